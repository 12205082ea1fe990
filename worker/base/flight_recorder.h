// FlightRecorder: a rank's ring of its last collectives and the phase its
// training thread is in, readable at any moment from another thread (the
// control stream answers the coordinator's diagnose request with it, even
// while the training thread is blocked in a collective).
//
// RecordingBackend (worker/recording_backend.h) and ShmCollectives record
// into it; the Trainer sets the phase. Thread-safe.
#ifndef TRAINYARD_WORKER_BASE_FLIGHT_RECORDER_H_
#define TRAINYARD_WORKER_BASE_FLIGHT_RECORDER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/flight_record.h"

namespace trainyard {

class FlightRecorder {
 public:
  static constexpr size_t kDefaultCapacity = 1024;
  explicit FlightRecorder(int32_t rank, size_t capacity = kDefaultCapacity);

  // A collective of `group` started on this rank; returns the handle for
  // End. Its number is one more than the group's previous one.
  uint64_t Begin(const std::string& group, const char* op, int64_t bytes);
  // It finished (any thread; a handle that left the ring is ignored).
  void End(uint64_t handle);

  // The training thread: `phase` (a string literal) from now on, with
  // `step` steps completed.
  void SetPhase(const char* phase, int64_t step);
  // The phase and step set last (any thread).
  const char* phase() const { return phase_.load(std::memory_order_relaxed); }
  int64_t step() const { return step_.load(std::memory_order_relaxed); }

  // Everything it holds now, oldest collective first (and, when a stack
  // source is set, what it says: a script job's Python stack).
  FlightRecord Capture() const;
  // Called by Capture, outside the lock, on the thread that captures (it may
  // take a while: the stream's reader thread answers). Null: none.
  void SetStackSource(std::function<std::string()> source);

 private:
  const int32_t rank_;
  const size_t capacity_;
  mutable absl::Mutex mu_;
  std::vector<CollectiveRecord> ring_ ABSL_GUARDED_BY(mu_);
  uint64_t next_ ABSL_GUARDED_BY(mu_) = 0;                   // handles are 0, 1, ...
  std::map<std::string, int64_t> seq_ ABSL_GUARDED_BY(mu_);  // last number per group
  std::function<std::string()> stack_source_ ABSL_GUARDED_BY(mu_);
  std::atomic<const char*> phase_{"setup"};
  std::atomic<int64_t> phase_since_micros_;
  std::atomic<int64_t> step_{0};
};

// Sets the phase when `recorder` is not null.
inline void SetPhase(FlightRecorder* recorder, const char* phase, int64_t step) {
  if (recorder != nullptr) recorder->SetPhase(phase, step);
}

// Begin at construction, End at destruction (blocking collectives).
class RecordedCollective {
 public:
  RecordedCollective(FlightRecorder* recorder, const std::string& group, const char* op, int64_t bytes)
      : recorder_(recorder), handle_(recorder != nullptr ? recorder->Begin(group, op, bytes) : 0) {}
  ~RecordedCollective() {
    if (recorder_ != nullptr) recorder_->End(handle_);
  }
  RecordedCollective(const RecordedCollective&) = delete;
  RecordedCollective& operator=(const RecordedCollective&) = delete;

 private:
  FlightRecorder* const recorder_;
  const uint64_t handle_;
};

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_BASE_FLIGHT_RECORDER_H_
