#include "common/replica_protocol.h"

#include <algorithm>

namespace trainyard {

int32_t MembershipView::IndexOf(int32_t rank) const {
  auto it = std::find(ranks.begin(), ranks.end(), rank);
  return it == ranks.end() ? -1 : static_cast<int32_t>(it - ranks.begin());
}

std::string MembershipView::StorePrefix() const { return "m" + std::to_string(epoch) + "/"; }

std::string MembershipView::Describe() const {
  std::string out = "epoch " + std::to_string(epoch) + ": ranks [";
  for (size_t i = 0; i < ranks.size(); ++i) out += (i > 0 ? ", " : "") + std::to_string(ranks[i]);
  out += "]";
  if (!reason.empty()) out += " (" + reason + ")";
  return out;
}

}  // namespace trainyard
