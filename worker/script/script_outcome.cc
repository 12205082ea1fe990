#include "worker/script/script_outcome.h"

#include <signal.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/paths.h"

namespace trainyard {

void ScriptOutcome(const ScriptEnd& end, ScriptResult& result) {
  const std::string& last = end.last_stderr_line;
  if (end.exit.signaled()) {
    const int sig = end.exit.signal;
    if (end.stopping) {
      result.outcome = WorkerOutcome::kStopped;
    } else if (end.preempted) {
      // A script without the package ends on the SIGTERM passed on (or on
      // its peers' going first): it is preempted all the same, and resumes
      // from its latest checkpoint.
      result.outcome = WorkerOutcome::kPreempted;
      result.error = absl::StrCat("preempted at step ", end.last_step, "; the script ended on ",
                                  sig == SIGTERM ? "SIGTERM" : absl::StrCat("signal ", sig, " after SIGTERM"),
                                  end.checkpoints > 0 ? "" : " without saving a checkpoint");
    } else {
      result.outcome = WorkerOutcome::kFailed;
      result.error = absl::StrCat("script ", end.script_path, " was killed by signal ", sig, " (", strsignal(sig), ")",
                                  last.empty() ? "" : "; last stderr line before the signal: " + last);
    }
    return;
  }
  const int code = end.exit.exited() ? end.exit.code : 0;
  if (code != 0) {
    if (end.stopping) {
      result.outcome = WorkerOutcome::kStopped;
      return;
    }
    if (end.preempted && !end.talked) {
      // Told to leave (SIGTERM) and unable to save: its end, or its peers'
      // (a torch.distributed error when they went first), is the preemption.
      result.outcome = WorkerOutcome::kPreempted;
      result.error = absl::StrCat("preempted at step ", end.last_step, "; the script exited with code ", code,
                                  " after SIGTERM, without saving a checkpoint");
      return;
    }
    // The exception it raised (torch's error file), else its last stderr line.
    const std::string why = !end.raised.empty() ? end.raised : last;
    result.outcome = WorkerOutcome::kFailed;
    result.error = absl::StrCat("script ", end.script_path, " exited with code ", code, why.empty() ? "" : ": " + why);
    return;
  }
  // Exit 0: done, or saved and returned after being told to stop.
  if (end.preempted) {
    result.outcome = WorkerOutcome::kPreempted;
    result.error = absl::StrCat("preempted at step ", end.last_step,
                                end.checkpoints > 0 ? "; the script saved a checkpoint" : "; no checkpoint was saved");
  } else if (end.stop_told || end.stopping) {
    result.outcome = WorkerOutcome::kStopped;
  } else {
    result.outcome = WorkerOutcome::kSucceeded;
  }
}

std::string RaisedException(const std::string& path) {
  // Bounded, and never blocking: a FIFO or a huge file in its place is "".
  absl::StatusOr<std::string> text = ReadBoundedFile(path, 1 << 20);
  if (!text.ok()) return "";
  auto j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("message")) return "";
  const auto& m = j["message"];
  if (m.is_string()) return m.get<std::string>();
  if (m.is_object() && m.contains("message") && m["message"].is_string()) return m["message"].get<std::string>();
  return "";
}

}  // namespace trainyard
