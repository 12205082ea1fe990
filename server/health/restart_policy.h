// The restart policy: what follows once every rank of an attempt has ended.
// A pure function of how the attempt ended, so that the paths that see an
// attempt end — a launcher's exit reports (adopted ranks' included),
// external ranks' results, the watchdog — decide alike; unit-tested as
// a table (tests/server/health/restart_policy_test.cc).
#ifndef TRAINYARD_SERVER_HEALTH_RESTART_POLICY_H_
#define TRAINYARD_SERVER_HEALTH_RESTART_POLICY_H_

#include <chrono>
#include <cstdint>
#include <string>

namespace trainyard {

// How one attempt ended.
struct AttemptEnd {
  bool cancel_requested = false;
  std::string cancel_reason;  // who cancelled and why ("" : a user)
  // A rank failed, the hang watchdog fired, or the workers did not
  // reattach; `failure` says which.
  bool failed = false;
  std::string failure;
  // The attempt was lost to a coordinator restart (its workers did not
  // reattach): the coordinator's loss, not the job's.
  bool reattach_failed = false;
  // A rank ended with a usage error (bad command line or environment): the
  // next attempt would get the same, so it is not retried.
  bool usage_error = false;
  bool preempted = false;      // ranks checkpointed and stopped on a preemption signal
  bool all_succeeded = false;  // every rank trained to the end
  bool shutting_down = false;  // the coordinator is stopping: nothing is requeued...
  // ...except the jobs it stopped to resume after it restarts
  // (--on-shutdown checkpoint), whatever their ranks' ends.
  bool stopped_for_restart = false;
  // The scheduler preempted it for another job (checkpoint, then stop):
  // queued again whatever its ranks' ends, without using up a restart.
  bool stopped_for_priority = false;
  int restarts = 0;  // whole-group restarts after failures so far
  int max_restarts = 0;
  bool preemptible = false;
  int32_t num_processes = 0;
  int64_t step = 0;  // rank 0's last step
  // Where a restart would start: "checkpoint_3 (step 300)", or "" when the
  // job has no complete checkpoint.
  std::string latest_checkpoint;
  // A script job (its own loop: with no checkpoint it starts from scratch,
  // told so by TORCHELASTIC_RESTART_COUNT); the attempt that ended.
  bool script = false;
  int32_t attempt = 0;
};

struct NextStep {
  enum class Kind {
    kSucceeded,
    kFailed,
    kCancelled,
    kRequeue,  // queued again, to resume from the latest complete checkpoint
  };
  Kind kind = Kind::kFailed;
  std::string reason;           // the state change's reason
  bool counts_restart = false;  // a requeue that uses up one of max_restarts
};

NextStep DecideAfterAttempt(const AttemptEnd& end);

// How long a job's restart waits after `failures_in_a_row` failed attempts
// (none of them trained a step): nothing after the first, then `base`,
// doubling up to 30 s; never with a zero base.
std::chrono::milliseconds RestartBackoff(int failures_in_a_row, std::chrono::milliseconds base);

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_HEALTH_RESTART_POLICY_H_
