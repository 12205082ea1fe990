// How one trainyard-worker process ended: the contract between a worker and
// the coordinator. The worker exits with ExitCodeOf(outcome) and reports the
// same outcome in its WorkerResult. The coordinator reads an exit code once,
// inside the launcher that saw it (OutcomeOfExitCode, server/launch/launcher.h's
// RankExit), and an external worker's outcome from its stream; nothing else.
#ifndef TRAINYARD_COMMON_WORKER_OUTCOME_H_
#define TRAINYARD_COMMON_WORKER_OUTCOME_H_

namespace trainyard {

enum class WorkerOutcome {
  kSucceeded,  // trained to the end
  kFailed,     // an error; the restart policy decides what follows
  kUsage,      // bad command line or environment; never retried by itself
  kStopped,    // stopped on request (SIGINT or the coordinator's stop command)
  kPreempted,  // checkpointed, then stopped on a preemption signal (SIGTERM)
};

constexpr const char* WorkerOutcomeName(WorkerOutcome outcome) {
  switch (outcome) {
    case WorkerOutcome::kSucceeded: return "succeeded";
    case WorkerOutcome::kFailed: return "failed";
    case WorkerOutcome::kUsage: return "usage error";
    case WorkerOutcome::kStopped: return "stopped";
    case WorkerOutcome::kPreempted: return "preempted";
  }
  return "failed";
}

// Process exit codes of trainyard-worker.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitStopped = 3;
inline constexpr int kExitPreempted = 4;

constexpr int ExitCodeOf(WorkerOutcome outcome) {
  switch (outcome) {
    case WorkerOutcome::kSucceeded: return kExitOk;
    case WorkerOutcome::kFailed: return kExitFailed;
    case WorkerOutcome::kUsage: return kExitUsage;
    case WorkerOutcome::kStopped: return kExitStopped;
    case WorkerOutcome::kPreempted: return kExitPreempted;
  }
  return kExitFailed;
}

// Any code that is not one of the worker's own (a crash, a signal's 128+N
// from a shell) is a failure.
constexpr WorkerOutcome OutcomeOfExitCode(int code) {
  switch (code) {
    case kExitOk: return WorkerOutcome::kSucceeded;
    case kExitUsage: return WorkerOutcome::kUsage;
    case kExitStopped: return WorkerOutcome::kStopped;
    case kExitPreempted: return WorkerOutcome::kPreempted;
    default: return WorkerOutcome::kFailed;
  }
}

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_WORKER_OUTCOME_H_
