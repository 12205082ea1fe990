#include "server/replicas/replica_supervisor.h"

#include <utility>

#include "server/metrics/server_metrics.h"
#include "spdlog/spdlog.h"

namespace trainyard {

ReplicaSupervisor::ReplicaSupervisor(std::string job_id, Membership membership)
    : job_id_(std::move(job_id)), membership_(std::move(membership)) {}

RankActions ReplicaSupervisor::Actions(const Membership::Decision& d) {
  RankActions a;
  a.event = d.event;
  a.fail = d.fail;
  a.failure = d.failure;
  if (d.send) {
    WorkerCommand cmd{WorkerCommand::Kind::kMembership, d.send->reason};
    cmd.membership = std::make_shared<const MembershipView>(*d.send);
    if (d.delta) cmd.delta = std::make_shared<const MembershipDelta>(*d.delta);
    a.command = std::move(cmd);
    a.to = d.to;
  }
  a.healed_rank = d.healed_rank;
  a.heal_seconds = d.heal_seconds;
  a.kill = d.kill;
  a.launch = d.launch;
  a.parked = d.parked;
  return a;
}

RankActions ReplicaSupervisor::OnHello(int32_t rank, const std::string& store_addr, int32_t store_port,
                                       const MembershipView& held) {
  return Actions(membership_.adopting() ? membership_.OnReattach(rank, store_addr, store_port, held)
                                        : membership_.OnHello(rank, store_addr, store_port));
}

RankActions ReplicaSupervisor::OnReport(int32_t rank, const ReplicaReport& report) {
  if (report.kind == ReplicaReport::Kind::kGroupBroken) {
    spdlog::info("job {}: rank {} saw its group of membership {} break at step {}: {}", job_id_, rank, report.epoch,
                 report.step, report.detail);
  }
  return Actions(membership_.OnReport(rank, report));
}

bool ReplicaSupervisor::Absorbs(int32_t, bool live) const { return live && membership_.formed(); }

bool ReplicaSupervisor::LeftOnPurpose(int32_t rank) const {
  return InRange(rank) && membership_.state(rank) == Membership::State::kLeaving;
}

void ReplicaSupervisor::OnStreamLost(int32_t rank, bool live) {
  if (live && membership_.formed()) membership_.OnStreamLost(rank);
}

std::optional<ExitDecision> ReplicaSupervisor::OnExit(int32_t rank, bool finished, const std::string& why,
                                                      const AttemptCondition& attempt) {
  // An adopted group: a rank gone while the coordinator was away is
  // replaced once the others reattached.
  if (membership_.adopting() && !attempt.stopping) {
    ExitDecision d;
    d.actions = Actions(membership_.OnGone(rank));
    d.ended_while_away = true;
    d.taken = true;
    return d;
  }
  // A rank that left on purpose (the job shrank, maybe before its group
  // formed) is parked however it ended.
  if (!attempt.stopping && !attempt.stop_requested && LeftOnPurpose(rank)) {
    ExitDecision d;
    d.actions = Actions(membership_.OnExit(rank, why));
    d.taken = true;
    return d;
  }
  // A member that ended before the job did (failed, killed, gone without a
  // word), or a rank taken out of the membership however it ended (the
  // other ranks of a lost rank's shard group leave on their own), is
  // replaced while enough replicas are left.
  if (attempt.live && membership_.formed() &&
      (!finished || (InRange(rank) && membership_.state(rank) == Membership::State::kLost))) {
    const Membership::Decision m = membership_.OnExit(rank, why);
    if (!m.launch.empty() || m.fail || m.parked >= 0) return ExitDecision{Actions(m), false, false};
  }
  return std::nullopt;
}

std::vector<int32_t> ReplicaSupervisor::StreamsLost() const { return membership_.StreamsLost(); }
void ReplicaSupervisor::BeginBatch() { membership_.BeginBatch(); }
RankActions ReplicaSupervisor::EndBatch() { return Actions(membership_.EndBatch()); }
RankActions ReplicaSupervisor::OnPass() { return Actions(membership_.OnPass()); }

bool ReplicaSupervisor::Evictable(int32_t rank) const {
  return membership_.formed() && InRange(rank) && membership_.state(rank) == Membership::State::kMember;
}

RankActions ReplicaSupervisor::Evict(int32_t rank, const std::string& why) {
  return Actions(membership_.OnLost(rank, why));
}

std::vector<int32_t> ReplicaSupervisor::TrainingRanks(int32_t) const {
  return membership_.formed() ? membership_.view().ranks : std::vector<int32_t>{};
}

int32_t ReplicaSupervisor::training_size(int32_t world_size) const {
  const size_t members = membership_.view().ranks.size();
  return membership_.formed() && members > 0 ? static_cast<int32_t>(members) : world_size;
}

int32_t ReplicaSupervisor::lead() const { return membership_.lead(); }
int32_t ReplicaSupervisor::running(int32_t) const { return membership_.running(); }
int32_t ReplicaSupervisor::size(int32_t) const { return membership_.size(); }

std::optional<RankActions> ReplicaSupervisor::Resize(int32_t n, const std::string& why) {
  return Actions(membership_.Resize(n, why));
}

std::optional<ReplicaStatus> ReplicaSupervisor::Status() const {
  const Membership& m = membership_;
  return ReplicaStatus{m.view(), m.healing_ranks(), m.min_replicas(), m.size(), m.leaving_ranks()};
}

void ReplicaSupervisor::Export(const std::string& job_id, ServerMetrics* metrics) const {
  metrics->SetReplicas(job_id, membership_.live_replicas(), membership_.healing_replicas(), membership_.epoch());
}

}  // namespace trainyard
