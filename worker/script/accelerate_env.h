// What `accelerate launch --config_file FILE` adds to each process's
// environment, for a script job's Accelerate config: computed by
// Accelerate's own launcher code (`python -m trainyard._launch_env`, with
// the script's Python), so a rank gets exactly what Accelerate would give
// it. Importing Accelerate costs about a second (it imports torch): the
// answer is cached on the host (AccelerateEnvCacheDir), keyed by all it
// depends on (python/trainyard/_launch_env.py says what).
#ifndef TRAINYARD_WORKER_SCRIPT_ACCELERATE_ENV_H_
#define TRAINYARD_WORKER_SCRIPT_ACCELERATE_ENV_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "worker/script/script_runner.h"

namespace trainyard {

// $TRAINYARD_CACHE_DIR, else $XDG_CACHE_HOME/trainyard, else
// $HOME/.cache/trainyard; empty (no cache) when none is set. A cache is an
// account's own: a file there that another account owns or may write is not
// used.
std::string AccelerateEnvCacheDir();

// Whether accelerate launch sets `name` (ACCELERATE_*, FSDP_*, MASTER_ADDR,
// OMP_NUM_THREADS, the devices' *_VISIBLE_* ...): the only variables
// AccelerateLaunchEnvironment gives.
bool IsAccelerateLaunchVariable(const std::string& name);

// The variables for `accelerate_config` (YAML; empty: none, and nothing is
// run) and the rank's place `where` (process count, machines, its machine).
// FailedPrecondition with Accelerate's message when it refuses the config;
// NotFound when `python` cannot be run. `cache_dir` empty: no cache. Any
// variable but launch variables is dropped.
absl::StatusOr<std::map<std::string, std::string>> AccelerateLaunchEnvironment(const std::string& python,
                                                                               const std::string& accelerate_config,
                                                                               const ScriptRank& where,
                                                                               const std::string& cache_dir);

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_SCRIPT_ACCELERATE_ENV_H_
