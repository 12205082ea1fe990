// JobManagerOptions: how the JobManager and its parts are set up — this
// host's slots and GPUs, where the state and logs go, the limits of specs
// and the queue, the roots of paths, the restart backoff, the default
// launcher and the scheduler's times (the --flags of trainyard-server that
// set them are named). Plain data, free of the parts' headers.
#ifndef TRAINYARD_SERVER_JOBS_JOB_MANAGER_OPTIONS_H_
#define TRAINYARD_SERVER_JOBS_JOB_MANAGER_OPTIONS_H_

#include <chrono>
#include <string>
#include <vector>

#include "common/job_spec.h"

namespace trainyard {

struct JobManagerOptions {
  // CPU slots of this host; a job takes num_processes of them.
  int slots = 1;
  // Root of worker logs: <state_dir>/jobs/<id>/attempt-<n>/rank-<r>.log.
  std::string state_dir = "trainyard-state";
  // Where workers reach the WorkerService (host:port): local ones, and
  // those on other hosts.
  std::string coordinator_addr;
  std::string remote_coordinator_addr;
  // Address rank 0 binds its rendezvous store on; other ranks connect to it.
  std::string master_addr = "127.0.0.1";
  SpecLimits limits;
  // Jobs waiting in the queue at most; further submissions are refused.
  int max_queued_jobs = 50000;  // what bench/scale queues (docs/BENCHMARKS.md)
  // Paths a job may name (checkpoint.project_dir, resume sources) must lie
  // under one of these; empty: the state directory and the working directory.
  std::vector<std::string> allowed_roots;
  // GPUs of this host for local CUDA jobs: one per rank, never shared.
  int gpus = 0;
  int ranks_per_gpu = 1;  // ranks of local CUDA jobs one GPU may take
  // Between repeated failures of a job (no attempt trained a step in
  // between), its restart waits: not after the first failure, then
  // restart_backoff, doubling up to 30 s (0: never).
  std::chrono::milliseconds restart_backoff{1000};
  // A rank on another host (Slurm) whose stream is lost without a result
  // and whose end is not reported within this is ended, its node presumed
  // lost and excluded from the job's later attempts (--node-loss-grace-ms).
  std::chrono::milliseconds node_loss_grace{5000};
  // The launcher of specs that name none (launcher: default).
  LauncherKind default_launcher = LauncherKind::kLocal;
  // The Python of script jobs whose spec names none (--script-python).
  std::string script_python = "python3";
  // Fair share: how fast past usage fades (--fair-share-half-life).
  std::chrono::seconds fair_share_half_life{24 * 3600};
  // A job is not preempted for another before it ran this long since it
  // started (--preemption-min-run-time).
  std::chrono::seconds preemption_min_run_time{600};
  // Hosts a spec's notify.urls may name (--notify-allowed-host; "*.x.org"
  // for a domain's); empty: any not on the local network (a listed one may
  // be on it).
  std::vector<std::string> notify_allowed_hosts;
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_JOBS_JOB_MANAGER_OPTIONS_H_
