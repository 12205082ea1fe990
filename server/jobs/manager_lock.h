// ManagerLock: how the coordinator takes its lock (the JobManager's mutex).
// Commands queued for workers' streams while it is held are handed to the
// streams after it is released (DeferredNotifications), so that a stop
// broadcast to 10,000 ranks does not write to 10,000 streams under the lock.
// How long each waited for the lock and held it goes to CoordinatorLockTimes
// (/metrics).
#ifndef TRAINYARD_SERVER_JOBS_MANAGER_LOCK_H_
#define TRAINYARD_SERVER_JOBS_MANAGER_LOCK_H_

#include <chrono>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/jobs/blocking_queue.h"
#include "server/metrics/lock_times.h"

namespace trainyard {

class ABSL_SCOPED_LOCKABLE ManagerLock {
 public:
  explicit ManagerLock(absl::Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu), asked_(Clock::now()) {
    mu_->Lock();
    taken_ = Clock::now();
  }
  // Released first; then the queues pushed to are notified (deferred_'s end).
  ~ManagerLock() ABSL_UNLOCK_FUNCTION() {
    const Clock::time_point released = Clock::now();
    mu_->Unlock();
    CoordinatorLockTimes().Record(Seconds(taken_ - asked_), Seconds(released - taken_));
  }
  ManagerLock(const ManagerLock&) = delete;
  ManagerLock& operator=(const ManagerLock&) = delete;

 private:
  using Clock = std::chrono::steady_clock;
  static double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
  DeferredNotifications deferred_;  // made before the lock is taken, ended after it is released
  absl::Mutex* const mu_;
  const Clock::time_point asked_;
  Clock::time_point taken_;
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_JOBS_MANAGER_LOCK_H_
