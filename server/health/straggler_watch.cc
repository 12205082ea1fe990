#include "server/health/straggler_watch.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace trainyard {

StragglerWatch::StragglerWatch(double ratio, Duration window) : ratio_(ratio), window_(window) {}

std::string StragglerWatch::Verdict::Describe() const {
  return absl::StrFormat("its own work per step (forward and loss) took %.1fx the others' (%.1f ms vs %.1f ms)",
                         others_seconds > 0 ? own_seconds / others_seconds : 0.0, own_seconds * 1e3,
                         others_seconds * 1e3);
}

void StragglerWatch::Observe(int32_t rank, Time at, double own_seconds) {
  if (own_seconds < 0) return;
  auto& steps = steps_[rank];
  steps.emplace_back(at, own_seconds);
  while (!steps.empty() && steps.front().first < at - window_) steps.pop_front();
}

void StragglerWatch::Forget(int32_t rank) {
  steps_.erase(rank);
  slow_since_.erase(rank);
  named_.erase(rank);
}

std::optional<double> StragglerWatch::MeanOf(int32_t rank, Time now) const {
  auto it = steps_.find(rank);
  if (it == steps_.end()) return std::nullopt;
  double sum = 0;
  size_t n = 0;
  for (const auto& [at, seconds] : it->second) {
    if (at < now - window_) continue;
    sum += seconds;
    ++n;
  }
  if (n < kMinSteps) return std::nullopt;
  return sum / static_cast<double>(n);
}

std::optional<StragglerWatch::Verdict> StragglerWatch::Look(const std::vector<int32_t>& ranks, Time now) {
  // Every rank's mean, and all of them sorted once: the median of the
  // others' is the sorted list's without one copy of the rank's own
  // (O(N log N) for N ranks, not a sort per rank).
  std::vector<std::optional<double>> means;
  means.reserve(ranks.size());
  std::vector<double> sorted;
  sorted.reserve(ranks.size());
  for (int32_t r : ranks) {
    means.push_back(MeanOf(r, now));
    if (means.back()) sorted.push_back(*means.back());
  }
  std::sort(sorted.begin(), sorted.end());
  std::optional<Verdict> out;
  for (size_t x = 0; x < ranks.size(); ++x) {
    const int32_t r = ranks[x];
    if (!means[x] || sorted.size() < 2 || named_.count(r)) {
      slow_since_.erase(r);  // nothing to compare: not slow now
      continue;
    }
    const double mine = *means[x];
    const size_t i = static_cast<size_t>(std::lower_bound(sorted.begin(), sorted.end(), mine) - sorted.begin());
    const auto other = [&](size_t j) { return sorted[j < i ? j : j + 1]; };  // the others, in order
    const size_t k = sorted.size() - 1, mid = k / 2;
    const double median = k % 2 == 1 ? other(mid) : (other(mid - 1) + other(mid)) / 2;
    if (median <= 0 || mine < ratio_ * median) {
      slow_since_.erase(r);
      continue;
    }
    const Time since = slow_since_.emplace(r, now).first->second;
    if (now - since < window_) continue;
    if (!out || mine / median > out->own_seconds / out->others_seconds) out = Verdict{r, mine, median};
  }
  if (out) named_.insert(out->rank);
  return out;
}

}  // namespace trainyard
