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
  std::map<int32_t, double> means;
  for (int32_t r : ranks) {
    if (std::optional<double> m = MeanOf(r, now)) means[r] = *m;
  }
  std::optional<Verdict> out;
  for (int32_t r : ranks) {
    auto mine = means.find(r);
    std::vector<double> others;
    for (const auto& [other, mean] : means) {
      if (other != r) others.push_back(mean);
    }
    if (mine == means.end() || others.empty() || named_.count(r)) {
      slow_since_.erase(r);  // nothing to compare: not slow now
      continue;
    }
    std::sort(others.begin(), others.end());
    const size_t mid = others.size() / 2;
    const double median = others.size() % 2 == 1 ? others[mid] : (others[mid - 1] + others[mid]) / 2;
    if (median <= 0 || mine->second < ratio_ * median) {
      slow_since_.erase(r);
      continue;
    }
    const Time since = slow_since_.emplace(r, now).first->second;
    if (now - since < window_) continue;
    if (!out || mine->second / median > out->own_seconds / out->others_seconds) {
      out = Verdict{r, mine->second, median};
    }
  }
  if (out) named_.insert(out->rank);
  return out;
}

}  // namespace trainyard
