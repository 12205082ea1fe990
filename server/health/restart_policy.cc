#include "server/health/restart_policy.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace trainyard {

// Where the next attempt starts, as said in the restart's event.
std::string RestartsFrom(const AttemptEnd& end) {
  if (!end.latest_checkpoint.empty()) return absl::StrCat("from ", end.latest_checkpoint);
  if (end.script) {
    return absl::StrCat(
        "with no registered checkpoint: the script starts fresh (TORCHELASTIC_RESTART_COUNT=", end.attempt, ")");
  }
  return "from the latest checkpoint";  // a native job's: its snapshots or checkpoints, found by the worker
}

NextStep DecideAfterAttempt(const AttemptEnd& end) {
  using Kind = NextStep::Kind;
  if (end.cancel_requested)
    return {Kind::kCancelled, end.cancel_reason.empty() ? "cancelled by user" : end.cancel_reason};
  if (end.stopped_for_restart) {
    return {Kind::kRequeue,
            "the coordinator stopped (--on-shutdown checkpoint): resumes from its latest checkpoint when it starts "
            "again"};
  }
  if (end.stopped_for_priority && !end.shutting_down) {
    return {Kind::kRequeue, "preempted for a job of higher priority: resumes from its latest checkpoint"};
  }
  // Ranks that ended neither well nor preempted failed, reported or not.
  const bool failed = end.failed || (!end.all_succeeded && !end.preempted);
  if (failed) {
    const std::string why = !end.failure.empty() ? end.failure : "the workers ended without reporting a result";
    if (end.usage_error) return {Kind::kFailed, absl::StrCat(why, " (a usage error: not retried)")};
    if (end.reattach_failed && !end.shutting_down) {
      return {Kind::kRequeue, absl::StrCat("restart from the latest checkpoint after: ", why)};
    }
    if (end.restarts < end.max_restarts && !end.shutting_down) {
      return {
          Kind::kRequeue,
          absl::StrCat("restart ", end.restarts + 1, " of ", end.max_restarts, " ", RestartsFrom(end), " after: ", why),
          /*counts_restart=*/true};
    }
    return {Kind::kFailed, end.max_restarts > 0 ? absl::StrCat(why, " (after ", end.restarts, " restarts)") : why};
  }
  if (end.preempted) {
    if (end.preemptible && !end.shutting_down) {
      return {Kind::kRequeue, "preempted: queued to resume from its checkpoint"};
    }
    return {Kind::kFailed, "preempted after a checkpoint (not preemptible): `trainctl resume` continues from it"};
  }
  return {Kind::kSucceeded, absl::StrCat(end.num_processes == 1 ? std::string("its one rank")
                                                                : absl::StrCat("all ", end.num_processes, " ranks"),
                                         " finished at step ", end.step)};
}

std::chrono::milliseconds RestartBackoff(int failures_in_a_row, std::chrono::milliseconds base) {
  if (failures_in_a_row <= 1 || base.count() <= 0) return std::chrono::milliseconds(0);
  return std::min<std::chrono::milliseconds>(base * (int64_t{1} << std::min(failures_in_a_row - 2, 20)),
                                             std::chrono::seconds(30));
}

}  // namespace trainyard
