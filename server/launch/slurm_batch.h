// What the Slurm launcher hands to Slurm for one attempt, as plain text: the
// batch job's name, the per-rank wrapper script, the batch script (one
// `srun` step, a task per rank) and sbatch's arguments. Pure functions: the
// launcher writes and runs them; tests read them.
#ifndef TRAINYARD_SERVER_LAUNCH_SLURM_BATCH_H_
#define TRAINYARD_SERVER_LAUNCH_SLURM_BATCH_H_

#include <string>
#include <vector>

#include "server/launch/launcher.h"

namespace trainyard {

// trainyard-<job>-a<attempt>: how an attempt's batch job is found again
// (squeue -n) after a coordinator restart.
std::string SlurmJobName(const std::string& job_id, int32_t attempt);

// trainyard-<job>-a<attempt>-r<rank>-<n>: the n-th replacement of one rank
// of a running attempt (fault_tolerance.mode replica), a batch job of its own.
std::string SlurmRankJobName(const std::string& job_id, int32_t attempt, int32_t rank, int32_t n);

// One argument for /bin/sh, single-quoted.
std::string ShellQuote(const std::string& s);

// The wrapper each task runs: the worker ("$@") in the background, INT and
// TERM forwarded to it, its node and pid written to
// $TRAINYARD_EXIT_DIR/rank-<rank>.pid (KillRank's target), its exit code
// (128+N for signal N) written to $TRAINYARD_EXIT_FILE, by default
// $TRAINYARD_EXIT_DIR/rank-$SLURM_PROCID.exit, where the server looks. The
// rank is $TRAINYARD_RANK, else $SLURM_PROCID.
std::string RankWrapperScript();

// Which ranks a batch script runs: all of the attempt (`rank` -1), or the
// `n`-th replacement of one rank, whose exit file is RankExitFile(...).
struct BatchRanks {
  int32_t rank = -1;
  int32_t n = 0;
};
// Where a rank's exit code is written: rank-<r>.exit, or rank-<r>-<n>.exit
// for its n-th replacement.
std::string RankExitFile(const std::string& log_dir, int32_t rank, int32_t n = 0);

// How long a batch script whose step failed waits to be cancelled.
inline constexpr int kFailedStepLingerSeconds = 60;

// The batch script: `srun` with the wrapper at `rank_script` running
// `worker_binary` with the attempt's flags and `extra_worker_args`, each
// rank's output in <log_dir>/rank-<r>.log. Every argument is quoted. A
// replica job's workers serve their stores (--replica-store) and the step
// outlives a lost node (--no-kill). When the step fails (not a preemption:
// every rank's exit code kExitPreempted), the script waits
// up to kFailedStepLingerSeconds to be cancelled rather than end by itself
// (a job that ends by itself with a node lost holds its other nodes until
// Slurm marks that node down; a cancelled one releases them at once).
std::string BatchScript(const LaunchRequest& r, const std::string& rank_script, const std::string& worker_binary,
                        const std::vector<std::string>& extra_worker_args, BatchRanks ranks = {});

// The lead time of the preemption signal (--signal=TERM@<seconds>): the
// job's preemption_grace_s, within what Slurm takes.
int64_t SignalLeadSeconds(const LaunchRequest& r);

// sbatch's argv (argv[0] = `sbatch`) for `r`, ending with `script`: job
// name, tasks, nodes, CPUs per task, output file, the preemption signal
// (TERM, preemption_grace_s before the end), requeue, GPUs per node for CUDA
// jobs, partition/account (the job's, else the server's), qos, time,
// constraint, then the server's and the job's extra arguments.
// A replica job's allocation outlives a lost node (--no-kill). `ranks`: a
// replacement of one rank is one task on one node, named SlurmRankJobName.
std::vector<std::string> SbatchArgs(const LaunchRequest& r, const SlurmLauncherOptions& o, const std::string& sbatch,
                                    const std::string& script, BatchRanks ranks = {});

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_LAUNCH_SLURM_BATCH_H_
