// BlockingQueue: a FIFO between threads that one side closes — the commands
// flowing down one worker's stream (WorkerChannel) and the updates flowing
// to one watcher (JobWatch). Thread-safe.
//
// DeferredNotifications: while one lives on a thread, the listeners of the
// queues that thread pushes to or closes run when it ends, once per queue,
// instead of at each Push. The coordinator's lock holds one (ManagerLock),
// so that a command broadcast to 10,000 ranks is queued under the lock and
// written to their streams after it.
#ifndef TRAINYARD_SERVER_JOBS_BLOCKING_QUEUE_H_
#define TRAINYARD_SERVER_JOBS_BLOCKING_QUEUE_H_

#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <unordered_set>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace trainyard {

// What every BlockingQueue shares: its listener, called at once or, within
// a DeferredNotifications, at that one's end.
class QueueListener : public std::enable_shared_from_this<QueueListener> {
 public:
  // `listener` is called (outside the queue's lock, on the pushing or
  // closing thread, or at the end of its DeferredNotifications) after each
  // Push and Close, for a reader that waits on no thread of its own; null:
  // none. It must not call SetListener.
  void SetListener(std::function<void()> listener) {
    absl::MutexLock lock(&listener_mu_);
    listener_ = std::move(listener);
  }

 protected:
  ~QueueListener() = default;
  void Notify();

 private:
  friend class DeferredNotifications;
  void NotifyNow() {
    absl::MutexLock lock(&listener_mu_);
    if (listener_) listener_();
  }
  absl::Mutex listener_mu_;  // held while the listener runs: SetListener waits for it
  std::function<void()> listener_ ABSL_GUARDED_BY(listener_mu_);
};

class DeferredNotifications {
 public:
  DeferredNotifications() : outer_(current_) { current_ = this; }
  ~DeferredNotifications() {
    current_ = outer_;
    for (const std::weak_ptr<QueueListener>& q : queues_) {
      if (std::shared_ptr<QueueListener> live = q.lock()) live->NotifyNow();
    }
  }
  DeferredNotifications(const DeferredNotifications&) = delete;
  DeferredNotifications& operator=(const DeferredNotifications&) = delete;

 private:
  friend class QueueListener;
  // False when `q` is not owned by a shared_ptr (it is notified at once).
  bool Add(QueueListener* q) {
    std::weak_ptr<QueueListener> weak = q->weak_from_this();
    if (weak.expired()) return false;
    if (seen_.insert(q).second) queues_.push_back(std::move(weak));
    return true;
  }
  static inline thread_local DeferredNotifications* current_ = nullptr;
  DeferredNotifications* const outer_;
  std::unordered_set<const QueueListener*> seen_;
  std::vector<std::weak_ptr<QueueListener>> queues_;
};

inline void QueueListener::Notify() {
  if (DeferredNotifications* d = DeferredNotifications::current_; d != nullptr && d->Add(this)) return;
  NotifyNow();
}

template <typename T>
class BlockingQueue : public QueueListener {
 public:
  // Beyond `capacity` items, Push drops an item that `droppable` accepts
  // (and keeps any other): a slow reader loses what it can do without.
  explicit BlockingQueue(size_t capacity = std::numeric_limits<size_t>::max(),
                         std::function<bool(const T&)> droppable = nullptr)
      : capacity_(capacity), droppable_(std::move(droppable)) {}
  BlockingQueue(const BlockingQueue&) = delete;
  BlockingQueue& operator=(const BlockingQueue&) = delete;

  // Ignored once closed.
  void Push(T item) {
    {
      absl::MutexLock lock(&mu_);
      if (closed_) return;
      if (queue_.size() >= capacity_ && droppable_ && droppable_(item)) return;
      queue_.push_back(std::move(item));
    }
    Notify();
  }

  // The item first in line, if any, at once.
  bool TryPop(T* out) {
    absl::MutexLock lock(&mu_);
    if (queue_.empty()) return false;
    *out = std::move(queue_.front());
    queue_.pop_front();
    return true;
  }

  // Waits up to `timeout` for an item. False on timeout, or when closed and
  // drained.
  bool Pop(T* out, std::chrono::milliseconds timeout) {
    absl::MutexLock lock(&mu_);
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !queue_.empty() || closed_; };
    mu_.AwaitWithTimeout(absl::Condition(&ready), absl::FromChrono(timeout));
    if (queue_.empty()) return false;
    *out = std::move(queue_.front());
    queue_.pop_front();
    return true;
  }

  // Items pushed before stay readable.
  void Close() {
    {
      absl::MutexLock lock(&mu_);
      closed_ = true;
    }
    Notify();
  }

  bool closed() {
    absl::MutexLock lock(&mu_);
    return closed_;
  }
  bool closed_and_drained() {
    absl::MutexLock lock(&mu_);
    return closed_ && queue_.empty();
  }

 private:
  const size_t capacity_;
  const std::function<bool(const T&)> droppable_;
  absl::Mutex mu_;  // waiters wake when a condition they await holds
  std::deque<T> queue_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_JOBS_BLOCKING_QUEUE_H_
