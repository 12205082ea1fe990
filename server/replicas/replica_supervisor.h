// ReplicaSupervisor: fault_tolerance.mode replica's rules for an attempt's
// ranks (server/health/rank_supervisor.h), over the attempt's Membership
// (server/replicas/membership.h): a rank's hello joins it (or, after a
// coordinator restart, reattaches it), a member lost is taken out and
// replaced while enough replicas are left, hung and slow members are
// evicted, an elastic job is resized. Each decision goes back as
// RankActions: memberships to send, ranks to launch or kill, a failure.
// Pure logic on the Membership's clock; not thread-safe.
#ifndef TRAINYARD_SERVER_REPLICAS_REPLICA_SUPERVISOR_H_
#define TRAINYARD_SERVER_REPLICAS_REPLICA_SUPERVISOR_H_

#include <string>

#include "server/health/rank_supervisor.h"
#include "server/replicas/membership.h"

namespace trainyard {

class ReplicaSupervisor final : public RankSupervisor {
 public:
  ReplicaSupervisor(std::string job_id, Membership membership);

  RankActions OnHello(int32_t rank, const std::string& store_addr, int32_t store_port,
                      const MembershipView& held) override;
  RankActions OnReport(int32_t rank, const ReplicaReport& report) override;
  bool Absorbs(int32_t rank, bool live) const override;
  bool LeftOnPurpose(int32_t rank) const override;
  void OnStreamLost(int32_t rank, bool live) override;
  std::optional<ExitDecision> OnExit(int32_t rank, bool finished, const std::string& why,
                                     const AttemptCondition& attempt) override;
  std::vector<int32_t> StreamsLost() const override;
  void BeginBatch() override;
  RankActions EndBatch() override;
  RankActions OnPass() override;
  bool Evictable(int32_t rank) const override;
  RankActions Evict(int32_t rank, const std::string& why) override;
  std::vector<int32_t> TrainingRanks(int32_t world_size) const override;
  int32_t training_size(int32_t world_size) const override;
  int32_t lead() const override;
  bool elastic() const override { return true; }
  int32_t running(int32_t world_size) const override;
  int32_t size(int32_t world_size) const override;
  std::optional<RankActions> Resize(int32_t n, const std::string& why) override;
  std::optional<ReplicaStatus> Status() const override;
  void Export(const std::string& job_id, ServerMetrics* metrics) const override;

  const Membership& membership() const { return membership_; }

 private:
  static RankActions Actions(const Membership::Decision& d);
  bool InRange(int32_t rank) const { return rank >= 0 && rank < membership_.world_size(); }

  const std::string job_id_;
  Membership membership_;
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_REPLICAS_REPLICA_SUPERVISOR_H_
