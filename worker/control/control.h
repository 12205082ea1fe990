// TrainerControl: requests from outside the training thread — the
// coordinator's commands and signals — which the trainer takes once per step
// and spreads to every rank through its per-step control exchange. Thread-
// safe; RequestStop() is async-signal-safe.
#ifndef TRAINYARD_WORKER_CONTROL_CONTROL_H_
#define TRAINYARD_WORKER_CONTROL_CONTROL_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/job_spec.h"

namespace trainyard {

struct CheckpointRequest {
  CheckpointType type = CheckpointType::kAuto;  // auto: the job's periodic type
  int64_t request_id = 0;                       // echoed in the checkpoint's report
  bool stop_after = false;                      // checkpoint, then stop (cancel --checkpoint)
};

class TrainerControl {
 public:
  void RequestStop() { stop_.store(true); }
  bool stop_requested() const { return stop_.load(); }
  // Preemption (SIGTERM): checkpoint at the next step boundary, then stop.
  void RequestPreemption() { preempt_.store(true); }
  bool preemption_requested() const { return preempt_.load(); }

  void RequestCheckpoint(const CheckpointRequest& request) {
    absl::MutexLock lock(&mu_);
    pending_.push_back(request);
  }
  // The oldest pending request, if any.
  std::optional<CheckpointRequest> TakeCheckpoint() {
    absl::MutexLock lock(&mu_);
    if (pending_.empty()) return std::nullopt;
    CheckpointRequest r = pending_.front();
    pending_.pop_front();
    return r;
  }

 private:
  static_assert(std::atomic<bool>::is_always_lock_free, "signal handlers need a lock-free flag");
  std::atomic<bool> stop_{false};
  std::atomic<bool> preempt_{false};
  absl::Mutex mu_;
  std::deque<CheckpointRequest> pending_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_CONTROL_CONTROL_H_
