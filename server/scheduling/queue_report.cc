#include "server/scheduling/queue_report.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace trainyard {
namespace {

using Kind = ResourcePool::Kind;
}  // namespace

std::string QueueReport::WhyWaiting(const std::string& id) const {
  auto it = s_.waiting_.find(id);
  if (it == s_.waiting_.end()) return "";
  Scheduler::Waiting w = it->second;
  if (w.pass != s_.pass_ && w.wait != Scheduler::Wait::kPaused) {
    // Not looked at by the last decision (it stopped early): behind the
    // head of its resource, or over its quota.
    w.wait = Scheduler::Wait::kNone;
    if (s_.last_decision_ < w.not_before) {
      w.wait = Scheduler::Wait::kBackoff;
    } else if (!s_.OverQuota(w) && w.demand.local && s_.last_heads_.count(w.demand.kind)) {
      w.wait = Scheduler::Wait::kBehindHead;
    }
  }
  const char* what = ResourcePool::NameOf(w.demand.kind);
  switch (w.wait) {
    case Scheduler::Wait::kNone:                // not looked at yet
    case Scheduler::Wait::kBackoff: return "";  // the job's own reason says when it restarts
    case Scheduler::Wait::kUserQuota:
    case Scheduler::Wait::kGroupQuota:
      return absl::StrCat("waiting: ", w.wait == Scheduler::Wait::kUserQuota ? "user " : "group ",
                          w.wait == Scheduler::Wait::kUserQuota ? w.claim.owner : w.claim.group, " uses ", w.quota_used,
                          " of ", w.quota_limit, " ", what, "; this job needs ", w.demand.minimum());
    case Scheduler::Wait::kResources:
    case Scheduler::Wait::kPreempting: return absl::StrCat("waiting: ", w.wait_detail);
    case Scheduler::Wait::kBehindHead: {
      auto head = s_.last_heads_.find(w.demand.kind);
      if (head == s_.last_heads_.end()) return absl::StrCat("waiting: for free ", what);
      return absl::StrCat("waiting: behind job ", head->second, ", which starts first");
    }
    case Scheduler::Wait::kPaused: return "waiting: the coordinator is stopping";
  }
  return "";
}

std::vector<Scheduler::QueueEntry> QueueReport::Queue(Time now,
                                                      const std::function<bool(const std::string& id)>& shown) const {
  std::vector<Scheduler::QueueEntry> out;
  // Estimated starts, per resource, in queue order (QueueForecast::Place).
  // A job over its quota has none: it starts when its owner's jobs end,
  // which no timeline here knows.
  std::map<Kind, QueueForecast> lines;
  for (Kind k : {Kind::kSlots, Kind::kGpus}) lines.emplace(k, s_.ForecastOf(k, now, QueueForecast::Ends::kKnown));
  int position = 0;
  for (const Scheduler::Waiting* w : s_.Order(now)) {
    ++position;
    std::optional<Time> start;
    if (!s_.quotas_.Check(w->claim.owner, w->claim.group, w->demand.kind, w->demand.minimum())) {
      start = w->demand.local ? lines.at(w->demand.kind).Place(w->demand.minimum(), w->not_before, w->claim.runtime)
                              : std::max(now, w->not_before);
    }
    if (shown && !shown(w->id)) continue;
    Scheduler::QueueEntry e{w->id, position, w->demand, w->claim, WhyWaiting(w->id)};
    e.owner_usage = s_.fair_share_.UsageAt(w->claim.owner, now);
    e.estimated_start = start;
    out.push_back(std::move(e));
  }
  return out;
}

std::map<std::string, Scheduler::Usage> QueueReport::UserUsage(Time now) const {
  std::map<std::string, Scheduler::Usage> out;
  for (const auto& [owner, queued] : s_.queued_by_owner_) out[owner].queued = queued;
  for (const auto& [owner, usage] : s_.fair_share_.Usage(now)) out[owner].rank_seconds = usage;
  for (const auto& [owner, in_use] : s_.quotas_.users()) {
    out[owner].slots = in_use.slots;
    out[owner].gpus = in_use.gpus;
  }
  return out;
}

std::map<std::string, Scheduler::Usage> QueueReport::GroupUsage() const {
  std::map<std::string, Scheduler::Usage> out;
  for (const auto& [group, in_use] : s_.quotas_.groups()) {
    out[group].slots = in_use.slots;
    out[group].gpus = in_use.gpus;
  }
  for (const auto& [group, queued] : s_.queued_by_group_) out[group].queued = queued;
  return out;
}

}  // namespace trainyard
