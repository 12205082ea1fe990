// Time as the project reads it. Wall-clock time as the project records it:
// milliseconds since the Unix epoch (job records, events, checkpoint
// manifests, metrics samples), and microseconds where collectives are timed.
// The coordinator's parts read both clocks through a TimeSource they are given,
// so that tests can run them on a FakeClock that moves only when told.
#ifndef TRAINYARD_COMMON_CLOCK_H_
#define TRAINYARD_COMMON_CLOCK_H_

#include <atomic>
#include <chrono>
#include <cstdint>

namespace trainyard {

inline int64_t NowMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The same in microseconds (flight records of collectives).
inline int64_t NowMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The two clocks a part reads: the monotonic one (deadlines, back-off,
// durations) and the wall clock (what is recorded). Thread-safe. (Not named
// Clock: several files call std::chrono::steady_clock that.)
class TimeSource {
 public:
  using Steady = std::chrono::steady_clock::time_point;
  virtual ~TimeSource() = default;
  virtual Steady SteadyNow() const = 0;
  virtual int64_t UnixMillis() const = 0;
  virtual int64_t UnixMicros() const = 0;
  // The clocks of this machine (lives for the whole program).
  static const TimeSource* Real();
};

class RealClock final : public TimeSource {
 public:
  Steady SteadyNow() const override { return std::chrono::steady_clock::now(); }
  int64_t UnixMillis() const override { return NowMillis(); }
  int64_t UnixMicros() const override { return NowMicros(); }
};

inline const TimeSource* TimeSource::Real() {
  static const RealClock clock;
  return &clock;
}

// A clock that starts at the real time of its construction and moves only
// by Advance: both clocks move together.
class FakeClock final : public TimeSource {
 public:
  FakeClock() : steady_(std::chrono::steady_clock::now().time_since_epoch()), unix_micros_(NowMicros()) {}
  Steady SteadyNow() const override { return Steady(steady_.load()); }
  int64_t UnixMillis() const override { return unix_micros_.load() / 1000; }
  int64_t UnixMicros() const override { return unix_micros_.load(); }
  void Advance(std::chrono::steady_clock::duration d) {
    steady_ = steady_.load() + d;
    unix_micros_ += std::chrono::duration_cast<std::chrono::microseconds>(d).count();
  }

 private:
  std::atomic<std::chrono::steady_clock::duration> steady_;
  std::atomic<int64_t> unix_micros_;
};

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_CLOCK_H_
