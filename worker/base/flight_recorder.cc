#include "worker/base/flight_recorder.h"

#include "common/clock.h"

namespace trainyard {

FlightRecorder::FlightRecorder(int32_t rank, size_t capacity)
    : rank_(rank), capacity_(capacity == 0 ? 1 : capacity), phase_since_micros_(NowMicros()) {
  ring_.reserve(capacity_);
}

uint64_t FlightRecorder::Begin(const std::string& group, const char* op, int64_t bytes) {
  CollectiveRecord r;
  r.group = group;
  r.op = op;
  r.bytes = bytes;
  r.start_unix_micros = NowMicros();
  absl::MutexLock lock(&mu_);
  r.seq = ++seq_[group];
  const uint64_t handle = next_++;
  if (ring_.size() < capacity_) {
    ring_.push_back(std::move(r));
  } else {
    ring_[handle % capacity_] = std::move(r);
  }
  return handle;
}

void FlightRecorder::End(uint64_t handle) {
  const int64_t now = NowMicros();
  absl::MutexLock lock(&mu_);
  if (handle >= next_ || next_ - handle > capacity_) return;  // overwritten since
  ring_[handle % capacity_].end_unix_micros = now;
}

void FlightRecorder::SetPhase(const char* phase, int64_t step) {
  // "In <phase> after step N for T": T counts from the phase's start at this
  // step, so a phase that spans the steps (a script's) restarts with each.
  const bool new_step = step_.exchange(step, std::memory_order_relaxed) != step;
  if (phase_.exchange(phase, std::memory_order_relaxed) != phase || new_step) {
    phase_since_micros_.store(NowMicros(), std::memory_order_relaxed);
  }
}

FlightRecord FlightRecorder::Capture() const {
  FlightRecord out;
  out.rank = rank_;
  out.step = step_.load(std::memory_order_relaxed);
  out.phase = phase_.load(std::memory_order_relaxed);
  out.phase_since_unix_micros = phase_since_micros_.load(std::memory_order_relaxed);
  out.captured_unix_micros = NowMicros();
  std::function<std::string()> stack;
  {
    absl::MutexLock lock(&mu_);
    out.collectives.reserve(ring_.size());
    // Oldest first: once the ring has wrapped, it starts at the next slot.
    const size_t first = ring_.size() < capacity_ ? 0 : next_ % capacity_;
    for (size_t i = 0; i < ring_.size(); ++i) out.collectives.push_back(ring_[(first + i) % ring_.size()]);
    stack = stack_source_;
  }
  if (stack) out.python_stack = stack();
  return out;
}

void FlightRecorder::SetStackSource(std::function<std::string()> source) {
  absl::MutexLock lock(&mu_);
  stack_source_ = std::move(source);
}

}  // namespace trainyard
