// The replica protocol's messages (fault_tolerance.mode replica), one type
// each for the coordinator and the ranks: who trains together (a
// MembershipView, sent by the coordinator whenever the live ranks change)
// and what a rank says about it (a ReplicaReport). Converted to and from the
// wire in common/wire_convert only. Plain data.
#ifndef TRAINYARD_COMMON_REPLICA_PROTOCOL_H_
#define TRAINYARD_COMMON_REPLICA_PROTOCOL_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace trainyard {

// Ranks as people read them in events and logs: runs of three or more as
// ranges, in the given order ({0,1,2,3,7,9,10} -> "0-3,7,9,10").
std::string RankRanges(const std::vector<int32_t>& ranks);

// One epoch of a replica job: its members' launch ranks in group order (a
// member's group rank is its index), and where the epoch's groups meet (the
// first member's own store, under the key prefix "m<epoch>/").
struct MembershipView {
  int64_t epoch = 0;
  std::vector<int32_t> ranks;
  std::string store_addr;
  int32_t store_port = 0;
  std::string reason;

  bool operator==(const MembershipView&) const = default;
  // `rank`'s index in ranks, or -1 when it is not a member.
  int32_t IndexOf(int32_t rank) const;
  // The key prefix of this epoch's groups: "m<epoch>/".
  std::string StorePrefix() const;
  // "epoch 3: ranks [0-2] (rank 2 joined)", for logs (RankRanges).
  std::string Describe() const;
};

// The change from the membership of `base_epoch` to a newer one, sent
// instead of the whole list to a rank that holds that one (a 10,000-rank
// group that loses ten ranks sends ten ranks, not 9,990): the new ranks are
// the held ones without `removed`, then `added`, in order, and hash to
// `digest` (MembershipDigest), so that a rank holding anything else finds
// out and asks for the whole list.
struct MembershipDelta {
  int64_t base_epoch = 0;
  std::vector<int32_t> removed, added;
  uint64_t digest = 0;

  bool operator==(const MembershipDelta&) const = default;
  // The delta from `from` to `to`; nullopt when `to` is not `from` without
  // some ranks and then others (a reordered group: sent whole).
  static std::optional<MembershipDelta> Between(const MembershipView& from, const MembershipView& to);
  // `held`'s ranks with the delta applied; nullopt when `held` is not of
  // base_epoch or the result does not hash to digest.
  std::optional<std::vector<int32_t>> ApplyTo(const MembershipView& held) const;
};

// A 64-bit hash (FNV-1a) of a membership's ranks in order.
uint64_t MembershipDigest(const std::vector<int32_t>& ranks);

// A rank's side of a membership: its group broke (detail: what the
// collective raised), it committed its first step in the epoch (seconds:
// from taking the membership to that commit; healed, heal_bytes: whether
// it took a peer's state and how much), or it left (a membership without it).
struct ReplicaReport {
  enum class Kind { kGroupBroken, kCommitted, kLeft };
  Kind kind = Kind::kGroupBroken;
  int64_t epoch = 0;
  int64_t step = 0;  // the rank's committed step
  std::string detail;
  double seconds = 0;
  bool healed = false;
  int64_t heal_bytes = 0;
};

// What the coordinator shows of a running replica job (GetJob's replicas):
// its membership (ranks: the live members), the ranks being replaced, and
// its size.
struct ReplicaStatus {
  MembershipView membership;
  std::vector<int32_t> healing;
  int32_t min_replicas = 0;
  int32_t size = 0;              // ranks 0..size-1 run once the ones leaving and growing are done
  std::vector<int32_t> leaving;  // left out on purpose, ending
};

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_REPLICA_PROTOCOL_H_
