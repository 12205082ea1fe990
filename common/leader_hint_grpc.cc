#include "common/leader_hint_grpc.h"

namespace trainyard {

grpc::Status AnswerAsStandby(grpc::ServerContextBase* ctx, const std::string& leader, int64_t term) {
  if (!leader.empty()) ctx->AddTrailingMetadata(kLeaderMetadataKey, leader);
  return grpc::Status(grpc::StatusCode::UNAVAILABLE, StandbyMessage(leader, term));
}

std::string LeaderHint(const grpc::ClientContext& ctx) {
  const auto& md = ctx.GetServerTrailingMetadata();
  auto it = md.find(kLeaderMetadataKey);
  if (it == md.end()) return "";
  return std::string(it->second.data(), it->second.size());
}

bool IsStandbyAnswer(const grpc::Status& status) {
  return status.error_code() == grpc::StatusCode::UNAVAILABLE && IsStandbyMessage(status.error_message());
}

}  // namespace trainyard
