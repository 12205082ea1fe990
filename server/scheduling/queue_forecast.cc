#include "server/scheduling/queue_forecast.h"

#include <algorithm>

namespace trainyard {

QueueForecast::QueueForecast(Time now, int free, const std::vector<Holder>& holders, Ends ends)
    : now_(now), free_(free), last_(now) {
  std::vector<std::pair<Time, int>> sorted;
  for (const Holder& h : holders) {
    if (ends == Ends::kEarliest) {
      sorted.emplace_back(h.preempting || !h.expected_end ? now : std::max(now, *h.expected_end), h.count);
    } else if (h.expected_end) {
      sorted.emplace_back(std::max(now, *h.expected_end), h.count);
    }
  }
  std::sort(sorted.begin(), sorted.end());
  for (const auto& [time, count] : sorted) changes_.emplace_hint(changes_.end(), time, count);
}

std::pair<QueueForecast::Time, int> QueueForecast::Shadow(int need) const {
  int available = free_;
  Time t = now_;
  for (const auto& [end, count] : changes_) {
    if (available >= need) break;
    available += count;
    t = end;
  }
  return {t, available - need};
}

std::optional<QueueForecast::Time> QueueForecast::Place(int count, Time not_before, std::optional<Duration> runtime) {
  if (!known_) return std::nullopt;
  // Walk the times in order, with every change at a time applied together.
  int free = free_;
  std::optional<Time> start;
  auto it = changes_.begin();
  for (Time t = now_;; t = it->first) {
    for (; it != changes_.end() && it->first == t; ++it) free += it->second;
    if (t >= std::max(last_, not_before) && free >= count) {
      start = t;
      break;
    }
    if (it == changes_.end()) break;
  }
  if (!start) {
    known_ = false;
    return std::nullopt;
  }
  last_ = *start;
  changes_.emplace(*start, -count);
  if (runtime) changes_.emplace(*start + *runtime, count);
  return start;
}

}  // namespace trainyard
