#include "server/jobs/fault_tolerance_modes.h"

#include <algorithm>

#include "server/replicas/replica_supervisor.h"

namespace trainyard {
namespace {

// fault_tolerance.mode fail_fast: the whole group's rules (the first lost
// rank fails the attempt), and a failed attempt is never restarted.
class FailFastSupervisor final : public RankSupervisor {
 public:
  int max_restarts(int) const override { return 0; }
};

}  // namespace

std::unique_ptr<RankSupervisor> MakeRankSupervisor(const ActiveJob& job, const Launcher::Traits& traits,
                                                   const TimeSource& clock, int32_t holds, bool adopting) {
  const JobSpec& spec = job.spec;
  const int32_t world = job.record.num_processes;
  // Replicas need a launcher that can start a single rank again.
  if (spec.replicas() && traits.replaces_ranks) {
    const int32_t min_replicas = spec.fault_tolerance.min_replicas;
    const int32_t unit = spec.ranks_per_replica();
    if (adopting) {
      return std::make_unique<ReplicaSupervisor>(job.record.id,
                                                 Membership::Adopting(world, min_replicas, &clock, unit));
    }
    int32_t ranks = world;
    if (spec.elastic.enabled() && traits.on_this_host && holds > 0) ranks = std::min(ranks, holds);
    return std::make_unique<ReplicaSupervisor>(job.record.id, Membership(world, min_replicas, &clock, ranks, unit));
  }
  if (spec.fault_tolerance.mode == FaultToleranceMode::kFailFast) return std::make_unique<FailFastSupervisor>();
  return std::make_unique<RankSupervisor>();  // whole_group
}

}  // namespace trainyard
