#include "common/replica_protocol.h"

#include <algorithm>
#include <unordered_set>

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

uint64_t MembershipDigest(const std::vector<int32_t>& ranks) {
  uint64_t h = 14695981039346656037ull;  // FNV-1a, over each rank's 4 bytes
  for (int32_t r : ranks) {
    auto v = static_cast<uint32_t>(r);
    for (int i = 0; i < 4; ++i, v >>= 8) {
      h ^= v & 0xffu;
      h *= 1099511628211ull;
    }
  }
  return h;
}

std::optional<MembershipDelta> MembershipDelta::Between(const MembershipView& from, const MembershipView& to) {
  const std::unordered_set<int32_t> before(from.ranks.begin(), from.ranks.end());
  const std::unordered_set<int32_t> after(to.ranks.begin(), to.ranks.end());
  MembershipDelta d;
  d.base_epoch = from.epoch;
  d.digest = MembershipDigest(to.ranks);
  for (int32_t r : from.ranks) {
    if (!after.count(r)) d.removed.push_back(r);
  }
  for (int32_t r : to.ranks) {
    if (!before.count(r)) d.added.push_back(r);
  }
  // The kept ranks must keep their order, and the added ones come last.
  const size_t kept = from.ranks.size() - d.removed.size();
  if (to.ranks.size() != kept + d.added.size()) return std::nullopt;
  size_t i = 0;
  for (int32_t r : from.ranks) {
    if (after.count(r) && (i >= kept || to.ranks[i++] != r)) return std::nullopt;
  }
  return d;
}

std::optional<std::vector<int32_t>> MembershipDelta::ApplyTo(const MembershipView& held) const {
  if (held.epoch != base_epoch) return std::nullopt;
  const std::unordered_set<int32_t> gone(removed.begin(), removed.end());
  std::vector<int32_t> ranks;
  ranks.reserve(held.ranks.size() + added.size());
  for (int32_t r : held.ranks) {
    if (!gone.count(r)) ranks.push_back(r);
  }
  ranks.insert(ranks.end(), added.begin(), added.end());
  if (MembershipDigest(ranks) != digest) return std::nullopt;
  return ranks;
}

std::string MembershipView::StorePrefix() const { return "m" + std::to_string(epoch) + "/"; }

std::string MembershipView::Describe() const {
  std::string out = "epoch " + std::to_string(epoch) + ": ranks [" + RankRanges(ranks) + "]";
  if (!reason.empty()) out += " (" + reason + ")";
  return out;
}

}  // namespace trainyard
