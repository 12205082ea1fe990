// LockTimes: how long the coordinator's lock (ManagerLock) was waited for
// and held, as two histograms of fixed buckets, recorded with atomics only.
// ServerMetrics exports them as trainyard_coordinator_lock_wait_seconds and
// trainyard_coordinator_lock_hold_seconds: what tells whether one request,
// report or watchdog pass keeps the others out.
#ifndef TRAINYARD_SERVER_METRICS_LOCK_TIMES_H_
#define TRAINYARD_SERVER_METRICS_LOCK_TIMES_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <vector>

namespace trainyard {

class LockTimes {
 public:
  // Upper bounds in seconds (a last bucket, +Inf, takes the rest).
  static constexpr std::array<double, 12> kBuckets = {0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                                      0.025,  0.05,   0.1,   0.25,   0.5,   1};
  struct Histogram {
    std::vector<uint64_t> cumulative;  // per bound of kBuckets, then +Inf (the count)
    double sum = 0;
  };

  void Record(double waited_seconds, double held_seconds);
  Histogram waited() const { return Read(waited_); }
  Histogram held() const { return Read(held_); }

 private:
  struct Counts {
    std::array<std::atomic<uint64_t>, kBuckets.size() + 1> buckets{};
    std::atomic<uint64_t> sum_ns{0};
  };
  static void Add(Counts& c, double seconds);
  static Histogram Read(const Counts& c);
  Counts waited_, held_;
};

// The coordinator's (one per process).
LockTimes& CoordinatorLockTimes();

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_METRICS_LOCK_TIMES_H_
