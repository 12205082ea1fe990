#include "server/scheduling/victims.h"

#include <algorithm>

namespace trainyard {

std::vector<VictimCandidate> PickVictims(std::vector<VictimCandidate> candidates, int need) {
  // The lowest priority that frees enough, then the fewest jobs at it.
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const VictimCandidate& a, const VictimCandidate& b) { return a.priority < b.priority; });
  int total = 0;
  size_t upto = 0;  // candidates[0, upto) have priorities up to the level that suffices
  while (upto < candidates.size() && total < need) {
    const int64_t level = candidates[upto].priority;
    while (upto < candidates.size() && candidates[upto].priority == level) total += candidates[upto++].count;
  }
  if (total < need) return {};
  // k largest reach a sum no other k do.
  candidates.resize(upto);
  std::sort(candidates.begin(), candidates.end(), [](const VictimCandidate& a, const VictimCandidate& b) {
    if (a.count != b.count) return a.count > b.count;
    if (a.priority != b.priority) return a.priority < b.priority;
    if (a.started != b.started) return a.started > b.started;
    return a.id < b.id;
  });
  std::vector<VictimCandidate> out;
  int freed = 0;
  for (VictimCandidate& c : candidates) {
    if (freed >= need) break;
    freed += c.count;
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace trainyard
