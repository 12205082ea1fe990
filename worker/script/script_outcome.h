// The outcome of one rank of a script job: how the script's process ended,
// and what the worker knows of its run (a stop it ordered, a preemption it
// passed on, whether the script talked on the channel, the checkpoints it
// saved), as the rank's WorkerOutcome and the reason of a failure.
#ifndef TRAINYARD_WORKER_SCRIPT_SCRIPT_OUTCOME_H_
#define TRAINYARD_WORKER_SCRIPT_SCRIPT_OUTCOME_H_

#include <cstdint>
#include <string>

#include "common/child_process.h"
#include "common/worker_outcome.h"

namespace trainyard {

struct ScriptResult {
  WorkerOutcome outcome = WorkerOutcome::kFailed;
  std::string error;      // why, for a failure
  int64_t last_step = 0;  // the last step the script reported, or script.progress read
  bool reported = false;  // it reported a step at all (trainyard.report)
};

struct ScriptEnd {
  std::string script_path;
  ChildExit exit;
  bool stopping = false;   // the worker ended it (SIGINT, then SIGKILL)
  bool preempted = false;  // the worker passed a preemption on (SIGTERM)
  bool stop_told = false;  // the script was told to save and stop
  bool talked = false;     // the script used the channel (it has the package)
  int64_t checkpoints = 0;
  int64_t last_step = 0;
  std::string last_stderr_line;  // the last line of its stderr that says something
  std::string raised;            // the exception it raised (RaisedException), or ""
};

// `end` as the rank's outcome: result.outcome and result.error (the other
// fields are left as they are).
void ScriptOutcome(const ScriptEnd& end, ScriptResult& result);

// The message of the exception a torch error file records ({"message":
// {"message": "ValueError: ...", "extraInfo": {...}}}), or "".
std::string RaisedException(const std::string& path);

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_SCRIPT_SCRIPT_OUTCOME_H_
