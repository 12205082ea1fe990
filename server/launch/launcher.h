// Launcher: starts and stops the worker processes of one job attempt.
//
// Implementations: LocalLauncher (fork/exec on this host), SlurmLauncher
// (sbatch + srun; state from squeue/scontrol), ExternalLauncher (starts
// nothing: the ranks join by themselves). Launchers report the ranks' ends
// through the ExitCallback given at construction, from their own thread;
// implementations are safe to call from several threads.
#ifndef TRAINYARD_SERVER_LAUNCH_LAUNCHER_H_
#define TRAINYARD_SERVER_LAUNCH_LAUNCHER_H_

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/job_spec.h"
#include "common/unix_account.h"
#include "common/worker_outcome.h"

namespace trainyard {

// Everything one attempt's workers need to find each other and the server.
struct LaunchRequest {
  std::string job_id;
  int32_t attempt = 1;
  int32_t world_size = 1;
  std::string master_addr = "127.0.0.1";  // rank 0 hosts the TCPStore here
  int master_port = 0;
  std::string coordinator_addr;  // host:port of the WorkerService
  std::string token;             // per-attempt worker secret
  std::string log_dir;           // one rank-<r>.log per rank
  int32_t threads_per_process = 1;
  std::string job_name;  // the spec's name (Slurm --job-name)
  bool cuda = false;     // device: cuda
  // Local launcher, CUDA jobs: the GPU index each rank gets
  // (CUDA_VISIBLE_DEVICES), one per rank, never shared between jobs.
  std::vector<int> gpus;
  bool preemptible = false;        // Slurm: --requeue
  double preemption_grace_s = 60;  // Slurm: --signal lead time
  SlurmSpec slurm;                 // Slurm: nodes, partition, ...
  // Slurm: nodes not to run on (--exclude): nodes presumed lost earlier.
  std::vector<std::string> exclude_nodes;
  // fault_tolerance.mode replica: each rank serves a store of its own
  // (trainyard-worker --replica-store).
  bool replica_store = false;
  // Launch starts ranks 0..start_ranks-1 (0: all): an elastic job started
  // below its full size (launchers that replace ranks; the others start all).
  int32_t start_ranks = 0;
  // The account every rank runs as (the owner's unix_user): its own
  // uid/gid/groups, a clean environment, umask 077, files its own; none: the
  // server's. The local launcher only (admission refuses the others).
  std::optional<UnixAccount> run_as;
  // The job keeps its checkpoints in its default project directory, the
  // parent of log_dir (made the account's: server/launch/job_dirs.h).
  bool default_project = false;
};

// How one rank's process ended. Each launcher reads the process's exit
// status once, through the factories below, into the worker's own account
// of its end (common/worker_outcome.h); the coordinator reads nothing else.
struct RankExit {
  std::string job_id;
  int32_t attempt = 0;
  int32_t rank = 0;
  // How the worker ended; empty when the process ended but how is not known
  // (not the launcher's child: adopted after a coordinator restart).
  std::optional<WorkerOutcome> outcome;
  // What the launcher saw, for people ("rank 1 was killed by signal 9").
  std::string description;

  // Exited with `code` (a worker exit code; any other code is a failure).
  static RankExit Exited(std::string job_id, int32_t attempt, int32_t rank, int code);
  // Killed by `signal` (a failure).
  static RankExit Killed(std::string job_id, int32_t attempt, int32_t rank, int signal);
  // Gone, how is unknown; `description` may say more.
  static RankExit Unknown(std::string job_id, int32_t attempt, int32_t rank, std::string description = "");
  // Ended as `outcome` by another account than an exit status (an external
  // rank's report, a rank the coordinator gave up on), said in `description`.
  static RankExit Ended(std::string job_id, int32_t attempt, int32_t rank, WorkerOutcome outcome,
                        std::string description);

  bool ok() const { return outcome == WorkerOutcome::kSucceeded; }
};

class Launcher {
 public:
  // The ends one look found (at least one), so that the ends of ranks that
  // died together are taken together.
  using ExitCallback = std::function<void(const std::vector<RankExit>&)>;
  // What the cluster's scheduler says of an attempt (Slurm's state changes
  // and reasons), for the job's events.
  using NoteCallback = std::function<void(const std::string& job_id, int32_t attempt, const std::string& text)>;
  virtual ~Launcher() = default;

  // How a launcher's ranks run, as the coordinator needs to know it.
  struct Traits {
    // The ranks run on this host: they take its CPU slots or GPUs, reach
    // the coordinator at its local address, bind rank 0's store on
    // master_addr, see this host's files, and leave in-memory snapshots here.
    bool on_this_host = false;
    // The coordinator starts no process: the ranks join the attempt by
    // themselves (trainyard-worker --join) with the job's token, are stopped
    // by a command down their streams, and may see other files than this
    // host's.
    bool ranks_join = false;
    // It can start one rank of a running attempt again and kill one alone
    // (LaunchRank, KillRank): what fault_tolerance.mode replica needs.
    // Where ranks join, the replacement is the rank's next hello.
    bool replaces_ranks = false;
  };
  virtual Traits traits() const { return {}; }

  // Starts all ranks of the attempt. On error no process of it is left.
  virtual absl::Status Launch(const LaunchRequest& request) = 0;
  // Asks every live rank of the attempt to stop (SIGINT: at once, without a
  // checkpoint; SIGTERM is kept for preemption) and kills what is left after
  // the grace period (SIGKILL). Returns at once.
  virtual void Stop(const std::string& job_id, int32_t attempt) = 0;
  // fault_tolerance.mode replica: starts rank `rank` of the running attempt
  // of `request` again (a replacement of a rank that ended: same rank,
  // attempt and token); its end is reported like the others'. REQUIRES:
  // traits().replaces_ranks, and the rank's previous process was reported
  // ended. On error no process of it is left.
  virtual absl::Status LaunchRank(const LaunchRequest& /*request*/, int32_t /*rank*/) {
    return absl::UnimplementedError("this launcher cannot start one rank alone");
  }
  // Kills rank `rank` of the attempt at once (SIGKILL to what it runs): an
  // evicted replica. Its end is reported as usual. Nothing when it is gone.
  virtual void KillRank(const std::string& /*job_id*/, int32_t /*attempt*/, int32_t /*rank*/) {}
  // The id the cluster's own scheduler gave the attempt (Slurm's job id);
  // "" when there is none.
  virtual std::string ExternalId(const std::string& /*job_id*/, int32_t /*attempt*/) { return ""; }
  // Number of this job's processes that have not yet been reaped.
  virtual int LiveProcesses(const std::string& job_id) = 0;
  // Whether jobs can be launched at all (e.g. sbatch is installed); the
  // error names what is missing.
  virtual absl::Status Available() { return absl::OkStatus(); }
  // After a coordinator restart: follows an attempt an earlier coordinator
  // launched, reporting its ranks' ends (RankExit::Unknown where the
  // launcher cannot read the exit status) and stopping them like its own. A rank with
  // nothing left to follow is reported ended at once.
  virtual void Adopt(const LaunchRequest& request) = 0;
  // The coordinator stops and leaves its workers running for the next one
  // to adopt: forget every process, so that nothing is stopped, killed or
  // reported from now on (the destructor included).
  virtual void Detach() {}
};

struct LocalLauncherOptions {
  std::string worker_binary;
  std::chrono::milliseconds stop_grace{5000};
  // Extra arguments appended to every worker command line.
  std::vector<std::string> extra_worker_args;
};

// Creates the fork/exec launcher. Its destructor kills every process it still
// tracks and reaps them.
std::unique_ptr<Launcher> MakeLocalLauncher(LocalLauncherOptions options, Launcher::ExitCallback on_exit);

struct SlurmLauncherOptions {
  std::string worker_binary;  // as seen on the compute nodes
  std::chrono::milliseconds stop_grace{5000};
  std::chrono::milliseconds poll_interval{500};
  // A batch job whose ranks all ended by themselves (no stop of ours) is
  // followed this long for how Slurm says it ended (an operator's scancel,
  // the time limit), then what is left of it is cancelled.
  std::chrono::milliseconds drain{15000};
  // Directory of sbatch, squeue, scontrol and scancel; empty: PATH.
  std::string slurm_bin_dir;
  // sbatch defaults for every job (a job's slurm: section wins).
  std::string partition, account;
  std::vector<std::string> extra_sbatch_args;
  std::vector<std::string> extra_worker_args;
};

// Creates the Slurm launcher: one batch job per attempt (`sbatch`, one
// `srun` step of world_size tasks), followed with squeue/scontrol, stopped
// with scancel. Each rank writes its exit code under the attempt's log dir;
// ranks that end without one are reported failed once Slurm says the job
// has ended.
// Slurm's own account of each attempt (running on which nodes, requeued,
// cancelled by someone else, timed out, preempted, a node failure) goes to
// `on_note`, when given.
std::unique_ptr<Launcher> MakeSlurmLauncher(SlurmLauncherOptions options, Launcher::ExitCallback on_exit,
                                            Launcher::NoteCallback on_note = nullptr);

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_LAUNCH_LAUNCHER_H_
