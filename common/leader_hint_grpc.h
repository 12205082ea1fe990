// The gRPC side of common/leader_hint.h: a standby's answer (server) and the
// leader hint read out of a call's trailing metadata (clients). In
// trainyard_wire, with gRPC.
#ifndef TRAINYARD_COMMON_LEADER_HINT_GRPC_H_
#define TRAINYARD_COMMON_LEADER_HINT_GRPC_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <string>

#include "common/leader_hint.h"

namespace trainyard {

// Server side: adds the trailing metadata kLeaderMetadataKey = `leader`
// (none when empty) to `ctx` and returns UNAVAILABLE with
// StandbyMessage(leader, term). For unary and streaming handlers alike
// (ServerContext and CallbackServerContext); call it before the call ends.
grpc::Status AnswerAsStandby(grpc::ServerContextBase* ctx, const std::string& leader, int64_t term);

// Client side, after the call ended: the leader a standby named in the
// call's trailing metadata ("HOST:PORT"), or "" when none (not a standby,
// no leader yet, or the call never reached a server).
std::string LeaderHint(const grpc::ClientContext& ctx);

// Whether `status` is a standby's answer: UNAVAILABLE with its message.
bool IsStandbyAnswer(const grpc::Status& status);

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_LEADER_HINT_GRPC_H_
