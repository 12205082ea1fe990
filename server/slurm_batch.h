// What the Slurm launcher hands to Slurm for one attempt, as plain text: the
// batch job's name, the per-rank wrapper script, the batch script (one
// `srun` step, a task per rank) and sbatch's arguments. Pure functions: the
// launcher writes and runs them; tests read them.
#ifndef TRAINYARD_SERVER_SLURM_BATCH_H_
#define TRAINYARD_SERVER_SLURM_BATCH_H_

#include <string>
#include <vector>

#include "server/launcher.h"

namespace trainyard {

// trainyard-<job>-a<attempt>: how an attempt's batch job is found again
// (squeue -n) after a coordinator restart.
std::string SlurmJobName(const std::string& job_id, int32_t attempt);

// One argument for /bin/sh, single-quoted.
std::string ShellQuote(const std::string& s);

// The wrapper each task runs: the worker ("$@") in the background, INT and
// TERM forwarded to it, its exit code (128+N for signal N) written to
// $TRAINYARD_EXIT_DIR/rank-$SLURM_PROCID.exit, where the server looks.
std::string RankWrapperScript();

// The batch script: `srun` with the wrapper at `rank_script` running
// `worker_binary` with the attempt's flags and `extra_worker_args`, each
// rank's output in <log_dir>/rank-<r>.log. Every argument is quoted.
std::string BatchScript(const LaunchRequest& r, const std::string& rank_script, const std::string& worker_binary,
                        const std::vector<std::string>& extra_worker_args);

// sbatch's argv (argv[0] = `sbatch`) for `r`, ending with `script`: job
// name, tasks, nodes, CPUs per task, output file, the preemption signal
// (TERM, preemption_grace_s before the end), requeue, GPUs per node for CUDA
// jobs, partition/account (the job's, else the server's), qos, time,
// constraint, then the server's and the job's extra arguments.
std::vector<std::string> SbatchArgs(const LaunchRequest& r, const SlurmLauncherOptions& o, const std::string& sbatch,
                                    const std::string& script);

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_SLURM_BATCH_H_
