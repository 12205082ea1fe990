// The restart policy as a table: one row per rule.
#include "server/health/restart_policy.h"

#include <gtest/gtest.h>

namespace trainyard {
namespace {

using Kind = NextStep::Kind;

struct Row {
  const char* rule;
  AttemptEnd end;
  Kind kind;
  const char* reason;  // the whole reason
  bool counts_restart;
};

AttemptEnd Ended(void (*set)(AttemptEnd&)) {
  AttemptEnd e;
  e.num_processes = 2;
  e.step = 600;
  e.max_restarts = 2;
  set(e);
  return e;
}

TEST(RestartPolicy, Table) {
  const Row rows[] = {
      {"every rank trained to the end", Ended([](AttemptEnd& e) { e.all_succeeded = true; }), Kind::kSucceeded,
       "all 2 ranks finished at step 600", false},
      {"a cancel wins over everything", Ended([](AttemptEnd& e) {
         e.cancel_requested = true;
         e.failed = true;
         e.failure = "rank 1: boom";
       }),
       Kind::kCancelled, "cancelled by user", false},
      {"a failure with restarts left is requeued and counted", Ended([](AttemptEnd& e) {
         e.failed = true;
         e.failure = "rank 1: boom";
         e.restarts = 1;
       }),
       Kind::kRequeue, "restart 2 of 2 from the latest checkpoint after: rank 1: boom", true},
      {"a failure without restarts left fails the job", Ended([](AttemptEnd& e) {
         e.failed = true;
         e.failure = "rank 1: boom";
         e.restarts = 2;
       }),
       Kind::kFailed, "rank 1: boom (after 2 restarts)", false},
      {"with max_restarts 0 the failure is the reason", Ended([](AttemptEnd& e) {
         e.failed = true;
         e.failure = "rank 0: killed by signal 9";
         e.max_restarts = 0;
       }),
       Kind::kFailed, "rank 0: killed by signal 9", false},
      {"workers lost to a coordinator restart are requeued, not counted", Ended([](AttemptEnd& e) {
         e.failed = true;
         e.reattach_failed = true;
         e.failure = "the workers did not reattach";
         e.restarts = 2;
       }),
       Kind::kRequeue, "restart from the latest checkpoint after: the workers did not reattach", false},
      {"a job stopped for a coordinator restart is requeued, whatever its ranks did", Ended([](AttemptEnd& e) {
         e.shutting_down = true;
         e.stopped_for_restart = true;
         e.failed = true;
         e.failure = "rank 0 was killed by signal 9";
         e.restarts = 2;
       }),
       Kind::kRequeue,
       "the coordinator stopped (--on-shutdown checkpoint): resumes from its latest checkpoint when it starts again",
       false},
      {"a usage error is not retried, restarts left or not", Ended([](AttemptEnd& e) {
         e.failed = true;
         e.usage_error = true;
         e.failure = "rank 0 exited with code 2";
       }),
       Kind::kFailed, "rank 0 exited with code 2 (a usage error: not retried)", false},
      {"ranks that ended without a result failed", Ended([](AttemptEnd&) {}), Kind::kRequeue,
       "restart 1 of 2 from the latest checkpoint after: the workers ended without reporting a result", true},
      {"a preemptible job preempted is requeued, not counted", Ended([](AttemptEnd& e) {
         e.preempted = true;
         e.preemptible = true;
       }),
       Kind::kRequeue, "preempted: queued to resume from its checkpoint", false},
      {"a job that is not preemptible ends FAILED", Ended([](AttemptEnd& e) { e.preempted = true; }), Kind::kFailed,
       "preempted after a checkpoint (not preemptible): `trainctl resume` continues from it", false},
      {"nothing is requeued while the coordinator stops", Ended([](AttemptEnd& e) {
         e.failed = true;
         e.failure = "rank 1: stopped";
         e.shutting_down = true;
       }),
       Kind::kFailed, "rank 1: stopped (after 0 restarts)", false},
      {"a failure after a preemption is a failure", Ended([](AttemptEnd& e) {
         e.preempted = true;
         e.preemptible = true;
         e.failed = true;
         e.failure = "rank 0: checkpoint failed";
       }),
       Kind::kRequeue, "restart 1 of 2 from the latest checkpoint after: rank 0: checkpoint failed", true},
      {"a restart names the checkpoint it starts from", Ended([](AttemptEnd& e) {
         e.failed = true;
         e.failure = "rank 1: boom";
         e.latest_checkpoint = "checkpoint_3 (step 300)";
       }),
       Kind::kRequeue, "restart 1 of 2 from checkpoint_3 (step 300) after: rank 1: boom", true},
      {"a script without a registered checkpoint starts fresh, and is told so", Ended([](AttemptEnd& e) {
         e.failed = true;
         e.failure = "rank 1: killed by signal 9";
         e.script = true;
         e.attempt = 1;
       }),
       Kind::kRequeue,
       "restart 1 of 2 with no registered checkpoint: the script starts fresh (TORCHELASTIC_RESTART_COUNT=1) after: "
       "rank 1: killed by signal 9",
       true},
  };
  for (const Row& row : rows) {
    const NextStep next = DecideAfterAttempt(row.end);
    EXPECT_EQ(next.kind, row.kind) << row.rule;
    EXPECT_EQ(next.reason, row.reason) << row.rule;
    EXPECT_EQ(next.counts_restart, row.counts_restart) << row.rule;
  }
}

}  // namespace
}  // namespace trainyard
