#include "common/replica_protocol.h"

#include <algorithm>

namespace trainyard {

std::string RankRanges(const std::vector<int32_t>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ",";
    if (j - i >= 2) {
      out += std::to_string(ranks[i]) + "-" + std::to_string(ranks[j]);
      i = j + 1;
    } else {
      out += std::to_string(ranks[i]);
      ++i;
    }
  }
  return out;
}

int32_t MembershipView::IndexOf(int32_t rank) const {
  auto it = std::find(ranks.begin(), ranks.end(), rank);
  return it == ranks.end() ? -1 : static_cast<int32_t>(it - ranks.begin());
}

std::string MembershipView::StorePrefix() const { return "m" + std::to_string(epoch) + "/"; }

std::string MembershipView::Describe() const {
  std::string out = "epoch " + std::to_string(epoch) + ": ranks [" + RankRanges(ranks) + "]";
  if (!reason.empty()) out += " (" + reason + ")";
  return out;
}

}  // namespace trainyard
