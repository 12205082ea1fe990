// The Scheduler's elastic jobs: their sizes as they grow into free room,
// shrink for a job of higher priority and are scaled by hand (the plans
// themselves are server/scheduling/elastic_sizer's).
#include "absl/strings/str_cat.h"
#include "server/scheduling/scheduler.h"

namespace trainyard {

namespace {
using Kind = ResourcePool::Kind;
}  // namespace

void Scheduler::SetSize(const std::string& id, Running& r, int to, Time now) {
  const int from = r.demand.count;
  if (to == from || to < 0) return;
  fair_share_.Stopped(r.claim.owner, from, now);
  fair_share_.Started(r.claim.owner, to, now);
  if (to > from) {
    quotas_.Take(r.claim.owner, r.claim.group, r.demand.kind, to - from);
    if (r.demand.local) pool_.Grow(&held_[id], r.demand.kind, to - from);
  } else {
    quotas_.Give(r.claim.owner, r.claim.group, r.demand.kind, from - to);
    if (r.demand.local) pool_.Shrink(&held_[id], from - to);
  }
  r.demand.count = to;
}

ElasticJob Scheduler::ElasticOf(const std::string& id, const Running& r) {
  return {id, r.claim.priority, r.started, r.demand.count, r.demand.min_count, r.want, r.shrink_to};
}

std::vector<Scheduler::Resize> Scheduler::PickShrinks(const Waiting& head, int need) {
  std::vector<ElasticJob> candidates;
  for (const auto& [id, r] : running_) {
    if (r.demand.local && r.demand.kind == head.demand.kind && r.demand.min_count > 0 && !r.preempting &&
        r.claim.preemptible && r.claim.priority < head.claim.priority) {
      candidates.push_back(ElasticOf(id, r));
    }
  }
  std::vector<Resize> out;
  for (const ElasticResize& s : PlanShrinks(std::move(candidates), need)) {
    running_.at(s.id).shrink_to = s.to;
    out.push_back({s.id, s.to, head.id});
  }
  return out;
}

void Scheduler::Grow(Kind kind, Time now, Decision* d) {
  std::vector<ElasticJob> growing;
  for (const auto& [id, r] : running_) {
    if (r.demand.local && r.demand.kind == kind && r.demand.min_count > 0 && r.demand.count < r.want &&
        r.shrink_to < 0 && !r.preempting) {
      growing.push_back(ElasticOf(id, r));
    }
  }
  const auto allowed = [&](const ElasticJob& j, int more) {
    const JobClaim& c = running_.at(j.id).claim;
    while (more > 0 && quotas_.Check(c.owner, c.group, kind, more)) --more;
    return more;
  };
  for (const ElasticResize& g : PlanGrowth(std::move(growing), pool_.free(kind), allowed)) {
    SetSize(g.id, running_.at(g.id), g.to, now);
    d->grow.push_back({g.id, g.to, ""});
  }
}

absl::Status Scheduler::Scale(const std::string& id, int to, Time now) {
  auto it = running_.find(id);
  if (it == running_.end()) return absl::FailedPreconditionError(absl::StrCat("job ", id, " is not running"));
  Running& r = it->second;
  if (absl::Status ok = CheckScale(ElasticOf(id, r), r.full, r.preempting, to); !ok.ok()) return ok;
  const Kind k = r.demand.kind;
  if (to > r.demand.count) {
    const int more = to - r.demand.count;
    if (r.demand.local && !pool_.Fits(k, more)) {
      return absl::FailedPreconditionError(absl::StrCat("growing job ", id, " to ", to, " ranks needs ", more,
                                                        " more of this host's ", ResourcePool::NameOf(k), "; ",
                                                        pool_.free(k), " free"));
    }
    if (auto over = quotas_.Check(r.claim.owner, r.claim.group, k, more)) {
      return absl::FailedPreconditionError(
          absl::StrCat("growing job ", id, " to ", to, " ranks goes over the quota of ",
                       over->group ? "group " + r.claim.group : "user " + r.claim.owner, " (", over->used, " of ",
                       over->limit, " ", ResourcePool::NameOf(k), " in use)"));
    }
    SetSize(id, r, to, now);
  } else if (to < r.size_after_shrink()) {
    r.shrink_to = to;
  }
  r.want = to;
  return absl::OkStatus();
}

void Scheduler::Resized(const std::string& id, int ranks, Time now) {
  auto it = running_.find(id);
  if (it == running_.end()) return;
  Running& r = it->second;
  if (ranks < r.demand.count) SetSize(id, r, ranks, now);
  if (r.shrink_to >= 0 && r.demand.count <= r.shrink_to) r.shrink_to = -1;
}

}  // namespace trainyard
