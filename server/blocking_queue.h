// BlockingQueue: a FIFO between threads that one side closes — the commands
// flowing down one worker's stream (WorkerChannel) and the updates flowing
// to one watcher (JobWatch). Thread-safe.
#ifndef TRAINYARD_SERVER_BLOCKING_QUEUE_H_
#define TRAINYARD_SERVER_BLOCKING_QUEUE_H_

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <limits>
#include <mutex>

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
      std::lock_guard<std::mutex> lock(mu_);
      if (closed_) return;
      if (queue_.size() >= capacity_ && droppable_ && droppable_(item)) return;
      queue_.push_back(std::move(item));
    }
    cv_.notify_all();
  }

  // Waits up to `timeout` for an item. False on timeout, or when closed and
  // drained.
  bool Pop(T* out, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return !queue_.empty() || closed_; });
    if (queue_.empty()) return false;
    *out = std::move(queue_.front());
    queue_.pop_front();
    return true;
  }

  // Items pushed before stay readable.
  void Close() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      closed_ = true;
    }
    cv_.notify_all();
  }

  bool closed() {
    std::lock_guard<std::mutex> lock(mu_);
    return closed_;
  }
  bool closed_and_drained() {
    std::lock_guard<std::mutex> lock(mu_);
    return closed_ && queue_.empty();
  }

 private:
  const size_t capacity_;
  const std::function<bool(const T&)> droppable_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<T> queue_;  // guarded by mu_
  bool closed_ = false;  // guarded by mu_
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_BLOCKING_QUEUE_H_
