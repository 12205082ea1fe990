// StragglerWatch: which rank of a job is far slower than the others. A
// rank's own work per step is its forward passes and losses (the steps'
// forward_seconds): no collective is in it, so a fast rank waiting for a
// slow one does not look slow. A rank is slow when the mean of its own work
// over the last `window` is at least `ratio` times the median of the other
// ranks' means, at every look for a whole `window` (by default 3x for
// 10 s).
//
// Pure logic on the times it is given. Not thread-safe: the JobManager
// calls it under its mutex.
#ifndef TRAINYARD_SERVER_HEALTH_STRAGGLER_WATCH_H_
#define TRAINYARD_SERVER_HEALTH_STRAGGLER_WATCH_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace trainyard {

class StragglerWatch {
 public:
  using Time = std::chrono::steady_clock::time_point;
  using Duration = std::chrono::steady_clock::duration;

  struct Verdict {
    int32_t rank = -1;
    double own_seconds = 0;     // its mean own work per step over the window
    double others_seconds = 0;  // the median of the others' means
    // "its own work per step (forward and loss) took 3.4x the others' (...)".
    std::string Describe() const;
  };

  explicit StragglerWatch(double ratio = 3.0, Duration window = std::chrono::seconds(10));

  // One step of `rank`, ended at `at`, whose own work took `own_seconds`.
  void Observe(int32_t rank, Time at, double own_seconds);
  // Among `ranks` (the ones training together), the rank slow at every look
  // for a whole window up to `now`, if any (the slowest when several are);
  // each rank once, until Forget.
  std::optional<Verdict> Look(const std::vector<int32_t>& ranks, Time now);
  // `rank` is a new process (a replacement): its history goes.
  void Forget(int32_t rank);
  Duration window() const { return window_; }

 private:
  // The mean of `rank`'s steps within the window before `now`; none with
  // fewer than kMinSteps there.
  std::optional<double> MeanOf(int32_t rank, Time now) const;
  static constexpr size_t kMinSteps = 3;

  double ratio_;
  Duration window_;
  std::map<int32_t, std::deque<std::pair<Time, double>>> steps_;
  std::map<int32_t, Time> slow_since_;
  std::set<int32_t> named_;  // verdicts given (once per rank until Forget)
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_HEALTH_STRAGGLER_WATCH_H_
