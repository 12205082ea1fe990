// ScriptRunner: one rank of a script job. The user's Python script runs as
// this worker's child with the environment a rank gets from `accelerate
// launch` and torchrun (ScriptEnvironment), and the worker stays its agent:
//  - steps the script reports (the `trainyard` package, over a ScriptChannel
//    the child inherits as descriptor 3), or that script.progress reads
//    from rank 0's output, become the job's metrics; a script that
//    succeeds with neither has rank 0 note that its progress is not known;
//  - checkpoints it registers become the job's checkpoints (rank 0 seals
//    them as complete, applies checkpoint.total_limit and reports them);
//  - a checkpoint request, a preemption (SIGTERM) or `cancel --checkpoint`
//    reach the script as trainyard.checkpoint_requested()/should_stop();
//    SIGTERM is passed on; a stop ends the script (SIGINT, then SIGKILL);
//  - a checkpoint request to a script that has not imported the package
//    (it never said hello) is answered at once as failed, saying how to
//    enable it; `cancel --checkpoint` of such a script is a plain cancel;
//  - the script runs through trainyard/_run_script.py (as `python SCRIPT`
//    runs it), which leaves without Python's finalization once the script
//    returned: no abort in Gloo's teardown after the work is done;
//  - the script is a ChildProcess; its exit becomes this rank's outcome
//    (ScriptOutcome), with the exception it raised
//    (torch's error file, TORCHELASTIC_ERROR_FILE) or else the last line
//    of its stderr as the reason of a failure.
// Runs on the calling thread; not thread-safe.
#ifndef TRAINYARD_WORKER_SCRIPT_SCRIPT_RUNNER_H_
#define TRAINYARD_WORKER_SCRIPT_SCRIPT_RUNNER_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "common/step_metrics.h"
#include "common/worker_outcome.h"
#include "worker/control/control.h"
#include "worker/script/script_outcome.h"

namespace trainyard {

// Where this rank stands in its job, as the worker knows it.
struct ScriptRank {
  std::string job_id;
  int32_t rank = 0;
  int32_t world_size = 1;
  int32_t local_rank = 0;
  int32_t local_world_size = 1;
  int32_t node_rank = 0;
  int32_t num_nodes = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  int32_t attempt = 1;      // TORCHELASTIC_RESTART_COUNT is attempt - 1
  std::string resume_dir;   // TRAINYARD_RESUME_DIR; empty: a fresh start
  std::string package_dir;  // put first on PYTHONPATH: the `trainyard` package
  int threads = 1;          // OMP_NUM_THREADS
};

class FlightRecorder;

// The environment variables a rank of `spec` gets, beyond the worker's own:
// torchrun's (RANK, LOCAL_RANK, WORLD_SIZE, ..., TORCHELASTIC_*), those
// `accelerate launch` adds for the spec's distribution (`accelerate`: as
// accelerate's own launcher computed them for the job's Accelerate config;
// empty: none), the script's `env`, and Trainyard's (TRAINYARD_*).
std::map<std::string, std::string> ScriptEnvironment(const JobSpec& spec, const ScriptRank& where,
                                                     const std::map<std::string, std::string>& accelerate);

// Where the rank's torch elastic error file goes (TORCHELASTIC_ERROR_FILE):
// a file of this attempt and rank in a directory of this process's own
// (mkdtemp in the temporary directory; removed when the script ended); ""
// when none can be made.
std::string ErrorFilePath(const ScriptRank& where);

struct ScriptOptions {
  std::chrono::milliseconds stop_grace{5000};  // SIGINT -> SIGKILL when stopping the script
  size_t stderr_lines = 50;                    // kept for the reason of a failure
  // Takes the script's reported steps as its phase ("script"), and asked
  // for a diagnosis, the script's Python stack (`py_spy`, when set: the
  // py-spy executable) while it runs. Not owned; may be null.
  FlightRecorder* flight_recorder = nullptr;
  std::string py_spy;
};

class ScriptRunner {
 public:
  // `sink` gets the steps and (rank 0) checkpoints; `control` the
  // coordinator's and the signals' requests. Both may be null.
  ScriptRunner(JobSpec spec, ScriptRank where, std::map<std::string, std::string> environment, MetricsSink* sink,
               TrainerControl* control, ScriptOptions options = {});
  // Runs the script to its end.
  ScriptResult Run();

 private:
  JobSpec spec_;
  ScriptRank where_;
  std::map<std::string, std::string> env_;
  MetricsSink* sink_;
  TrainerControl* control_;
  ScriptOptions options_;
};

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_SCRIPT_SCRIPT_RUNNER_H_
