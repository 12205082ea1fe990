// BlockingQueue: a FIFO between threads that one side closes — the commands
// flowing down one worker's stream (WorkerChannel) and the updates flowing
// to one watcher (JobWatch). Thread-safe.
#ifndef TRAINYARD_SERVER_JOBS_BLOCKING_QUEUE_H_
#define TRAINYARD_SERVER_JOBS_BLOCKING_QUEUE_H_

#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <limits>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace trainyard {

template <typename T>
class BlockingQueue {
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

  // `listener` is called (outside the queue's lock, on the pushing or
  // closing thread) after each Push and Close, for a reader that waits on
  // no thread of its own; null: none. It must not call SetListener.
  void SetListener(std::function<void()> listener) {
    absl::MutexLock lock(&listener_mu_);
    listener_ = std::move(listener);
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
  void Notify() {
    absl::MutexLock lock(&listener_mu_);
    if (listener_) listener_();
  }

  const size_t capacity_;
  const std::function<bool(const T&)> droppable_;
  absl::Mutex mu_;  // waiters wake when a condition they await holds
  std::deque<T> queue_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  absl::Mutex listener_mu_;  // held while the listener runs: SetListener waits for it
  std::function<void()> listener_ ABSL_GUARDED_BY(listener_mu_);
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_JOBS_BLOCKING_QUEUE_H_
