// Finding the leading coordinator (high availability, issue 65): the
// convention between a standby coordinator and every caller (trainctl, the
// Python client, workers, the web UI).
//
// A standby answers every JobService and WorkerService call with gRPC status
// UNAVAILABLE, the message StandbyMessage(leader, term), and — when it knows
// the leader — the trailing metadata kLeaderMetadataKey = "HOST:PORT" of the
// leader. A caller that gets such an answer goes to that address next (even
// when it is not in its own list); an UNAVAILABLE without the hint, or no
// connection at all, sends it to the next address of its list.
//
// A list of coordinators is written "a:50051,b:50051" (--server,
// TRAINYARD_SERVER, the worker's --server): SplitAddresses.
//
// gRPC-free (trainyard_common); reading the hint out of a call's trailing
// metadata, and answering as a standby: common/leader_hint_grpc.h.
#ifndef TRAINYARD_COMMON_LEADER_HINT_H_
#define TRAINYARD_COMMON_LEADER_HINT_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace trainyard {

// The trailing metadata key of a standby's answer: the leader's "HOST:PORT"
// (absent when there is no leader yet).
inline constexpr char kLeaderMetadataKey[] = "trainyard-leader";

// What every standby answer's message starts with.
inline constexpr char kStandbyMessagePrefix[] = "this coordinator is a standby; ";

// "this coordinator is a standby; the leader is at HOST:PORT (term N)", or
// "this coordinator is a standby; no leader yet" when `leader` is empty.
std::string StandbyMessage(const std::string& leader, int64_t term);

// Whether a status message is a standby's answer (StandbyMessage's).
bool IsStandbyMessage(std::string_view message);

// "a:50051, b:50051" -> {"a:50051", "b:50051"}: split at commas, each item
// trimmed of spaces and tabs. An empty item (",,", a trailing comma, an
// empty list) or one with spaces inside is INVALID_ARGUMENT naming it.
// Duplicates are kept once, in their first place.
absl::StatusOr<std::vector<std::string>> SplitAddresses(const std::string& list);

// The order in which one call tries a list of coordinators: `preferred`
// (the one that last answered as the leader; empty: none) first, then the
// list's own order, each address once.
std::vector<std::string> TryOrder(const std::vector<std::string>& addresses, const std::string& preferred);

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_LEADER_HINT_H_
