#include "server/health/rank_supervisor.h"

namespace trainyard {

RankActions RankSupervisor::OnHello(int32_t, const std::string&, int32_t, const MembershipView&) { return {}; }
RankActions RankSupervisor::OnReport(int32_t, const ReplicaReport&) { return {}; }
bool RankSupervisor::Absorbs(int32_t, bool) const { return false; }
bool RankSupervisor::LeftOnPurpose(int32_t) const { return false; }
void RankSupervisor::OnStreamLost(int32_t, bool) {}
std::optional<ExitDecision> RankSupervisor::OnExit(int32_t, bool, const std::string&, const AttemptCondition&) {
  return std::nullopt;
}
std::vector<int32_t> RankSupervisor::StreamsLost() const { return {}; }
void RankSupervisor::BeginBatch() {}
RankActions RankSupervisor::EndBatch() { return {}; }
RankActions RankSupervisor::OnPass() { return {}; }
bool RankSupervisor::Evictable(int32_t) const { return false; }
RankActions RankSupervisor::Evict(int32_t, const std::string&) { return {}; }

std::vector<int32_t> RankSupervisor::TrainingRanks(int32_t world_size) const {
  std::vector<int32_t> all;
  for (int32_t r = 0; r < world_size; ++r) all.push_back(r);
  return all;
}

int32_t RankSupervisor::training_size(int32_t world_size) const { return world_size; }
int32_t RankSupervisor::lead() const { return 0; }
bool RankSupervisor::elastic() const { return false; }
int32_t RankSupervisor::running(int32_t world_size) const { return world_size; }
int32_t RankSupervisor::size(int32_t world_size) const { return world_size; }
std::optional<RankActions> RankSupervisor::Resize(int32_t, const std::string&) { return std::nullopt; }
int RankSupervisor::max_restarts(int spec_max_restarts) const { return spec_max_restarts; }
std::optional<ReplicaStatus> RankSupervisor::Status() const { return std::nullopt; }
void RankSupervisor::Export(const std::string&, ServerMetrics*) const {}

}  // namespace trainyard
