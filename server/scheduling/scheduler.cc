#include "server/scheduling/scheduler.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/scheduling/queue_report.h"

namespace trainyard {
namespace {

using Kind = ResourcePool::Kind;

}  // namespace

SchedulerPolicy SchedulingOf(const Policy& policy, std::chrono::steady_clock::duration fair_share_half_life,
                             std::chrono::steady_clock::duration min_run_time) {
  SchedulerPolicy s;
  s.user_quotas = policy.user_quotas;
  s.group_quotas = policy.group_quotas;
  s.fair_share_half_life = fair_share_half_life;
  s.min_run_time = min_run_time;
  return s;
}

Scheduler::Scheduler(int slots, int gpus, SchedulerPolicy policy, int ranks_per_gpu)
    : pool_(slots, gpus, ranks_per_gpu) {
  SetPolicy(std::move(policy));
}

void Scheduler::SetPolicy(SchedulerPolicy policy) {
  policy_ = std::move(policy);
  fair_share_.set_half_life(policy_.fair_share_half_life);
  quotas_.SetQuotas(policy_.user_quotas, policy_.group_quotas);
}

QueueForecast Scheduler::ForecastOf(Kind kind, Time now, QueueForecast::Ends ends) const {
  std::vector<QueueForecast::Holder> holders;
  for (const auto& [id, r] : running_) {
    if (r.demand.local && r.demand.kind == kind) holders.push_back({r.demand.count, r.expected_end, r.preempting});
  }
  return QueueForecast(now, pool_.free(kind), holders, ends);
}

void Scheduler::Enqueue(const std::string& id, Demand demand, JobClaim claim, Time not_before, bool ahead) {
  Remove(id);
  Waiting w{id, demand, std::move(claim), not_before};
  w.order = ahead ? --next_front_ : ++next_back_;
  ++queued_by_owner_[w.claim.owner];
  if (!w.claim.group.empty()) ++queued_by_group_[w.claim.group];
  ++(w.demand.local ? waiting_local_[w.demand.kind] : waiting_elsewhere_);
  Waiting& stored = waiting_.emplace(id, std::move(w)).first->second;
  levels_[stored.claim.priority][stored.claim.owner][stored.order] = &stored;
}

bool Scheduler::Remove(const std::string& id) {
  auto it = waiting_.find(id);
  if (it == waiting_.end()) return false;
  const Waiting& w = it->second;
  auto level = levels_.find(w.claim.priority);
  auto owner = level->second.find(w.claim.owner);
  owner->second.erase(w.order);
  if (owner->second.empty()) level->second.erase(owner);
  if (level->second.empty()) levels_.erase(level);
  --queued_by_owner_[w.claim.owner];
  if (auto g = queued_by_group_.find(w.claim.group); g != queued_by_group_.end() && --g->second == 0) {
    queued_by_group_.erase(g);
  }
  --(w.demand.local ? waiting_local_[w.demand.kind] : waiting_elsewhere_);
  waiting_.erase(it);
  return true;
}

int Scheduler::queued_of(const std::string& owner) const {
  auto it = queued_by_owner_.find(owner);
  return it == queued_by_owner_.end() ? 0 : it->second;
}

Scheduler::OrderCursor::OrderCursor(const Scheduler& s, Time now) : s_(s) {
  std::vector<std::pair<double, const std::string*>> owners;
  for (const auto& level : s.levels_) {
    const auto& by_owner = level.second;  // a named reference: clang before 16 cannot capture a structured binding
    owners.clear();
    for (const auto& [owner, jobs] : by_owner) owners.emplace_back(s.fair_share_.UsageAt(owner, now), &owner);
    // Less usage first; at equal usage, whoever's first waiting job came first.
    std::sort(owners.begin(), owners.end(), [&by_owner](const auto& a, const auto& b) {
      if (a.first != b.first) return a.first < b.first;
      return by_owner.at(*a.second).begin()->first < by_owner.at(*b.second).begin()->first;
    });
    std::vector<std::string> names;
    names.reserve(owners.size());
    for (const auto& [usage, owner] : owners) names.push_back(*owner);
    levels_.emplace_back(level.first, std::move(names));
  }
}

Scheduler::Waiting* Scheduler::OrderCursor::Next() {
  // Found again by key at each step: the job returned last may be gone,
  // and with it its owner's and level's entries.
  for (; level_ < levels_.size(); ++level_, owner_ = 0, after_.reset()) {
    auto level = s_.levels_.find(levels_[level_].first);
    if (level == s_.levels_.end()) continue;
    for (const std::vector<std::string>& owners = levels_[level_].second; owner_ < owners.size();
         ++owner_, after_.reset()) {
      auto jobs = level->second.find(owners[owner_]);
      if (jobs == level->second.end()) continue;
      auto it = after_ ? jobs->second.upper_bound(*after_) : jobs->second.begin();
      if (it == jobs->second.end()) continue;
      after_ = it->first;
      return it->second;
    }
  }
  return nullptr;
}

std::vector<Scheduler::Waiting*> Scheduler::Order(Time now) const {
  std::vector<Waiting*> out;
  out.reserve(waiting_.size());
  OrderCursor cursor(*this, now);
  while (Waiting* w = cursor.Next()) out.push_back(w);
  return out;
}

bool Scheduler::OverQuota(Waiting& w) const {
  const std::optional<QuotaLedger::Over> over =
      quotas_.Check(w.claim.owner, w.claim.group, w.demand.kind, w.demand.minimum());
  if (!over) return false;
  w.wait = over->group ? Wait::kGroupQuota : Wait::kUserQuota;
  w.quota_used = over->used;
  w.quota_limit = over->limit;
  return true;
}

int Scheduler::SizeToStart(const Waiting& w, bool borrowing) const {
  const Demand& d = w.demand;
  return StartSize(d.count, d.minimum(), [&](int n) {
    if (d.local && !pool_.Fits(d.kind, n)) return false;
    return borrowing || n <= d.minimum() || !quotas_.Check(w.claim.owner, w.claim.group, d.kind, n);
  });
}

void Scheduler::Start(Waiting& w, Time now, bool borrowing, bool adopted, int size) {
  // An adopted job's ranks run whatever is free: slots may be over-committed
  // until they end; GPUs are held as far as they go.
  if (w.demand.local) held_[w.id] = pool_.Take(w.demand.kind, size, adopted && w.demand.kind == Kind::kGpus);
  fair_share_.Started(w.claim.owner, size, now);
  quotas_.Take(w.claim.owner, w.claim.group, w.demand.kind, size);
  Running r{w.demand, w.claim, now};
  r.demand.count = size;
  r.full = r.want = w.demand.count;
  r.borrowing = borrowing;
  running_[w.id] = std::move(r);
}

std::vector<Scheduler::Preemption> Scheduler::PickVictims(const Waiting& head, int need, Time now) const {
  std::vector<VictimCandidate> candidates;
  for (const auto& [id, r] : running_) {
    if (!r.demand.local || r.demand.kind != head.demand.kind || r.preempting || !r.claim.preemptible) continue;
    if (now - r.started < policy_.min_run_time) continue;
    const bool lower = r.claim.priority < head.claim.priority;
    // Borrowed quota goes back to an owner within its own.
    const bool reclaim = !lower && r.borrowing && r.claim.owner != head.claim.owner;
    if (lower || reclaim) candidates.push_back({id, r.demand.count, r.claim.priority, r.started, reclaim && !lower});
  }
  std::vector<Preemption> out;
  for (VictimCandidate& c : trainyard::PickVictims(std::move(candidates), need))
    out.push_back({c.id, head.id, c.reclaim});
  return out;
}

Scheduler::Decision Scheduler::Schedule(Time now) {
  Decision d;
  if (paused_) {
    for (auto& [id, w] : waiting_) w.wait = Wait::kPaused;
    return d;
  }
  struct Head {
    const Waiting* job = nullptr;
    Time shadow{};
    int extra = 0;  // free at the shadow time beyond what the head needs
  };
  std::map<Kind, Head> heads;
  ++pass_;
  last_decision_ = now;
  int behind_heads = 0;
  OrderCursor order(*this, now);
  for (Waiting* w = order.Next(); w != nullptr; w = order.Next()) {
    if (!heads.empty()) {
      // Past the heads only backfill and jobs elsewhere can start: stop
      // once neither can (the jobs not looked at keep waiting as they were).
      bool every_head = true;
      for (Kind k : {Kind::kSlots, Kind::kGpus}) every_head &= heads.count(k) > 0 || waiting_local_[k] == 0;
      const bool room = policy_.backfill && (pool_.free_slots() > 0 || pool_.free_gpus() > 0) &&
                        behind_heads < policy_.backfill_depth;
      if (every_head && !room && waiting_elsewhere_ == 0) break;
      ++behind_heads;
    }
    w->pass = pass_;
    w->wait = Wait::kNone;
    w->wait_detail.clear();
    if (now < w->not_before) {  // backing off: takes nothing, blocks nobody
      w->wait = Wait::kBackoff;
      continue;
    }
    bool borrowing = false;
    if (OverQuota(*w)) {
      // Idle quota may be borrowed by a preemptible job when no other
      // owner's job waits.
      const int others = static_cast<int>(waiting_.size()) - queued_of(w->claim.owner);
      if (!w->claim.preemptible || others > 0) continue;
      borrowing = true;
    }
    int size = w->demand.count;
    if (w->demand.local) {
      const Kind k = w->demand.kind;
      size = SizeToStart(*w, borrowing);
      const bool fits = size > 0;
      auto head = heads.find(k);
      if (head != heads.end()) {
        // Behind the head of its resource: backfill only what does not delay it.
        Head& h = head->second;
        const bool ends_before = w->claim.runtime && now + *w->claim.runtime <= h.shadow;
        if (fits && !ends_before) size = std::min(size, std::max(h.extra, 0));  // an elastic job takes what is spare
        const bool spare = size >= w->demand.minimum() && size <= h.extra;
        if (!fits || !policy_.backfill || !(ends_before || spare)) {
          w->wait = Wait::kBehindHead;
          continue;
        }
        if (!ends_before) h.extra -= size;
      } else if (!fits) {
        const int needs = w->demand.minimum();
        Head h{w};
        const int free = pool_.free(k);
        std::tie(h.shadow, h.extra) = ForecastOf(k, now, QueueForecast::Ends::kEarliest).Shadow(needs);
        heads[k] = h;
        // What running jobs being preempted or shrunk will free counts as coming.
        int coming = 0;
        std::vector<std::string> preempting, shrinking;
        for (const auto& [id, r] : running_) {
          if (!r.demand.local || r.demand.kind != k) continue;
          if (r.preempting) {
            coming += r.demand.count;
            preempting.push_back(id);
          } else if (r.shrink_to >= 0) {
            coming += r.demand.count - r.shrink_to;
            shrinking.push_back(id);
          }
        }
        const int need = needs - free - coming;
        bool making_room = need <= 0 && (!preempting.empty() || !shrinking.empty());
        if (need > 0 && !borrowing) {
          // Elastic jobs shrink before anyone is preempted.
          std::vector<Resize> shrinks = PickShrinks(*w, need);
          for (Resize& s : shrinks) {
            shrinking.push_back(s.job);
            d.shrink.push_back(std::move(s));
            making_room = true;
          }
          if (shrinks.empty()) {
            for (Preemption& p : PickVictims(*w, need, now)) {
              running_[p.victim].preempting = true;
              preempting.push_back(p.victim);
              d.preempt.push_back(std::move(p));
              making_room = true;
            }
          }
        }
        if (making_room) {
          std::sort(preempting.begin(), preempting.end());
          std::sort(shrinking.begin(), shrinking.end());
          std::vector<std::string> how;
          if (!preempting.empty()) how.push_back(absl::StrCat("preempting ", absl::StrJoin(preempting, ", ")));
          if (!shrinking.empty()) how.push_back(absl::StrCat("shrinking ", absl::StrJoin(shrinking, ", ")));
          w->wait = Wait::kPreempting;
          w->wait_detail = absl::StrCat(absl::StrJoin(how, " and "), " to free ", ResourcePool::NameOf(k));
        } else {
          w->wait = Wait::kResources;
          w->wait_detail = absl::StrCat(free, " of ", k == Kind::kGpus ? "this host's GPUs" : "this host's slots",
                                        " free; this job needs ", needs);
        }
        continue;
      }
    }
    Start(*w, now, borrowing, /*adopted=*/false, size);
    d.start.push_back(w->id);
    Remove(d.start.back());  // `w` goes; the other jobs' nodes stay where they are
  }
  // What no waiting job can take now goes to elastic jobs below their size.
  for (Kind k : {Kind::kSlots, Kind::kGpus}) {
    if (!heads.count(k)) Grow(k, now, &d);
  }
  last_heads_.clear();
  for (const auto& [kind, head] : heads) {
    if (waiting_.count(head.job->id)) last_heads_[kind] = head.job->id;
  }
  return d;
}

std::string Scheduler::WhyWaiting(const std::string& id) const { return QueueReport(*this).WhyWaiting(id); }

std::vector<Scheduler::QueueEntry> Scheduler::Queue(Time now,
                                                    const std::function<bool(const std::string& id)>& shown) const {
  return QueueReport(*this).Queue(now, shown);
}

void Scheduler::SetExpectedEnd(const std::string& id, Time end) {
  auto it = running_.find(id);
  if (it != running_.end()) it->second.expected_end = end;
}

const ResourcePool::Held& Scheduler::Held(const std::string& id) const {
  static const ResourcePool::Held kNothing;
  auto it = held_.find(id);
  return it == held_.end() ? kNothing : it->second;
}

void Scheduler::HoldAdopted(const std::string& id, Demand demand, JobClaim claim, Time now) {
  Release(id, now);
  Waiting w{id, demand, std::move(claim)};
  Start(w, now, /*borrowing=*/false, /*adopted=*/true, demand.count);
}

void Scheduler::Release(const std::string& id, Time now) {
  auto it = running_.find(id);
  if (it == running_.end()) return;
  const Running& r = it->second;
  fair_share_.Stopped(r.claim.owner, r.demand.count, now);
  quotas_.Give(r.claim.owner, r.claim.group, r.demand.kind, r.demand.count);
  running_.erase(it);
  auto h = held_.find(id);
  if (h != held_.end()) {
    pool_.Release(&h->second);
    held_.erase(h);
  }
}

std::map<std::string, Scheduler::Usage> Scheduler::UserUsage(Time now) const {
  return QueueReport(*this).UserUsage(now);
}

std::map<std::string, Scheduler::Usage> Scheduler::GroupUsage() const { return QueueReport(*this).GroupUsage(); }

}  // namespace trainyard
