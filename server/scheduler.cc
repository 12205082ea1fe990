#include "server/scheduler.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace trainyard {
namespace {

using Kind = ResourcePool::Kind;

const char* NameOf(Kind k) { return k == Kind::kGpus ? "GPUs" : "slots"; }

std::optional<int64_t> LimitOf(const Quota& q, Kind k) { return k == Kind::kGpus ? q.gpus : q.slots; }

double Seconds(Scheduler::Duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

Scheduler::Scheduler(int slots, int gpus, SchedulerPolicy policy, int ranks_per_gpu)
    : policy_(std::move(policy)), pool_(slots, gpus, ranks_per_gpu) {}

void Scheduler::SetPolicy(SchedulerPolicy policy) { policy_ = std::move(policy); }

void Scheduler::Enqueue(const std::string& id, Demand demand, JobClaim claim, Time not_before, bool ahead) {
  Remove(id);
  Waiting w{id, demand, std::move(claim), not_before};
  w.order = ahead ? --next_front_ : ++next_back_;
  ++owners_[w.claim.owner].queued;
  if (w.demand.local) {
    ++waiting_local_[w.demand.kind];
  } else {
    ++waiting_elsewhere_;
  }
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
  --owners_[w.claim.owner].queued;
  if (w.demand.local) {
    --waiting_local_[w.demand.kind];
  } else {
    --waiting_elsewhere_;
  }
  waiting_.erase(it);
  return true;
}

int Scheduler::queued_of(const std::string& owner) const {
  auto it = owners_.find(owner);
  return it == owners_.end() ? 0 : it->second.queued;
}

double Scheduler::UsageAt(const OwnerState& s, Time now) const {
  if (now <= s.updated) return s.usage;
  const double h = std::max(1e-3, Seconds(policy_.fair_share_half_life));
  const double dt = Seconds(now - s.updated);
  const double decay = std::exp2(-dt / h);
  // Exact for a constant rate over dt: ∫ rate · 2^(-(dt-t)/h) dt.
  return s.usage * decay + s.ranks_running * (h / std::log(2.0)) * (1 - decay);
}

void Scheduler::Accrue(const std::string& owner, Time now) {
  OwnerState& s = owners_[owner];
  s.usage = UsageAt(s, now);
  s.updated = std::max(s.updated, now);
}

std::vector<Scheduler::Waiting*> Scheduler::Order(Time now) const {
  std::vector<Waiting*> out;
  out.reserve(waiting_.size());
  std::vector<std::pair<double, const std::string*>> owners;
  for (const auto& [priority, by_owner] : levels_) {
    owners.clear();
    for (const auto& [owner, jobs] : by_owner) {
      auto s = owners_.find(owner);
      owners.emplace_back(s == owners_.end() ? 0.0 : UsageAt(s->second, now), &owner);
    }
    std::sort(owners.begin(), owners.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first < b.first : *a.second < *b.second;
    });
    for (const auto& [usage, owner] : owners) {
      for (const auto& [order, w] : by_owner.at(*owner)) out.push_back(w);
    }
  }
  return out;
}

bool Scheduler::OverQuota(Waiting& w) const {
  const Kind k = w.demand.kind;
  auto check = [&](const std::map<std::string, Quota>& quotas, const std::map<std::string, InUse>& in_use,
                   const std::string& name, const char* what, Wait wait) {
    if (name.empty()) return false;
    auto q = quotas.find(name);
    if (q == quotas.end()) return false;
    const std::optional<int64_t> limit = LimitOf(q->second, k);
    if (!limit) return false;
    auto u = in_use.find(name);
    const int used = u == in_use.end() ? 0 : u->second.of(k);
    if (used + w.demand.count <= *limit) return false;
    w.wait = wait;
    w.quota_used = used;
    w.quota_limit = *limit;
    (void)what;
    return true;
  };
  return check(policy_.user_quotas, user_in_use_, w.claim.owner, "user", Wait::kUserQuota) ||
         check(policy_.group_quotas, group_in_use_, w.claim.group, "group", Wait::kGroupQuota);
}

void Scheduler::Start(Waiting& w, Time now, bool borrowing, bool adopted) {
  // An adopted job's ranks run whatever is free: slots may be over-committed
  // until they end; GPUs are held as far as they go.
  if (w.demand.local) {
    held_[w.id] = pool_.Take(w.demand.kind, w.demand.count, adopted && w.demand.kind == Kind::kGpus);
  }
  Accrue(w.claim.owner, now);
  owners_[w.claim.owner].ranks_running += w.demand.count;
  if (!w.claim.owner.empty()) user_in_use_[w.claim.owner].of(w.demand.kind) += w.demand.count;
  if (!w.claim.group.empty()) group_in_use_[w.claim.group].of(w.demand.kind) += w.demand.count;
  Running r{w.demand, w.claim, now};
  r.borrowing = borrowing;
  running_[w.id] = std::move(r);
}

std::pair<Scheduler::Time, int> Scheduler::ShadowTime(Kind kind, int need, Time now) const {
  const int free = kind == Kind::kGpus ? pool_.free_gpus() : pool_.free_slots();
  std::vector<std::pair<Time, int>> ends;
  for (const auto& [id, r] : running_) {
    if (!r.demand.local || r.demand.kind != kind) continue;
    // An end nobody knows (or a job being preempted) may come at once: the
    // head is assumed to start as early as it could.
    ends.emplace_back(r.preempting || !r.expected_end ? now : std::max(now, *r.expected_end), r.demand.count);
  }
  std::sort(ends.begin(), ends.end());
  int available = free;
  Time t = now;
  for (const auto& [end, count] : ends) {
    if (available >= need) break;
    available += count;
    t = end;
  }
  return {t, available - need};
}

std::vector<Scheduler::Preemption> Scheduler::PickVictims(const Waiting& head, int need, Time now) const {
  struct Candidate {
    const std::string* id;
    const Running* r;
    bool reclaim;
  };
  std::vector<Candidate> candidates;
  for (const auto& [id, r] : running_) {
    if (!r.demand.local || r.demand.kind != head.demand.kind || r.preempting || !r.claim.preemptible) continue;
    if (now - r.started < policy_.min_run_time) continue;
    const bool lower = r.claim.priority < head.claim.priority;
    // Borrowed quota goes back to an owner within its own.
    const bool reclaim = !lower && r.borrowing && r.claim.owner != head.claim.owner;
    if (lower || reclaim) candidates.push_back({&id, &r, reclaim && !lower});
  }
  // The lowest priority that frees enough, then the fewest jobs at it.
  std::sort(candidates.begin(), candidates.end(),
            [](const Candidate& a, const Candidate& b) { return a.r->claim.priority < b.r->claim.priority; });
  int total = 0;
  size_t upto = 0;  // candidates[0, upto) have priorities up to the level that suffices
  while (upto < candidates.size() && total < need) {
    const int64_t level = candidates[upto].r->claim.priority;
    while (upto < candidates.size() && candidates[upto].r->claim.priority == level) {
      total += candidates[upto].r->demand.count;
      ++upto;
    }
  }
  if (total < need) return {};
  // Fewest: the largest first (k largest reach a sum no other k do); among
  // equals the lower priority, then the one that started last (least work
  // since its checkpoint is likely lost), then the id.
  std::vector<Candidate> pool(candidates.begin(), candidates.begin() + static_cast<std::ptrdiff_t>(upto));
  std::sort(pool.begin(), pool.end(), [](const Candidate& a, const Candidate& b) {
    if (a.r->demand.count != b.r->demand.count) return a.r->demand.count > b.r->demand.count;
    if (a.r->claim.priority != b.r->claim.priority) return a.r->claim.priority < b.r->claim.priority;
    if (a.r->started != b.r->started) return a.r->started > b.r->started;
    return *a.id < *b.id;
  });
  std::vector<Preemption> out;
  int freed = 0;
  for (const Candidate& c : pool) {
    if (freed >= need) break;
    freed += c.r->demand.count;
    out.push_back({*c.id, head.id, c.reclaim});
  }
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
  for (Waiting* w : Order(now)) {
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
    if (w->demand.local) {
      const Kind k = w->demand.kind;
      const bool fits = pool_.Fits(k, w->demand.count);
      auto head = heads.find(k);
      if (head != heads.end()) {
        // Behind the head of its resource: backfill only what does not delay it.
        Head& h = head->second;
        const bool ends_before = w->claim.runtime && now + *w->claim.runtime <= h.shadow;
        const bool spare = w->demand.count <= h.extra;
        if (!fits || !policy_.backfill || !(ends_before || spare)) {
          w->wait = Wait::kBehindHead;
          continue;
        }
        if (!ends_before) h.extra -= w->demand.count;
      } else if (!fits) {
        Head h{w};
        const int free = k == Kind::kGpus ? pool_.free_gpus() : pool_.free_slots();
        std::tie(h.shadow, h.extra) = ShadowTime(k, w->demand.count, now);
        heads[k] = h;
        // What running jobs being preempted will free counts as coming.
        int coming = 0;
        std::vector<std::string> preempting;
        for (const auto& [id, r] : running_) {
          if (r.preempting && r.demand.local && r.demand.kind == k) {
            coming += r.demand.count;
            preempting.push_back(id);
          }
        }
        const int need = w->demand.count - free - coming;
        bool freed_by_preemption = need <= 0 && !preempting.empty();
        if (need > 0 && !borrowing) {
          for (Preemption& p : PickVictims(*w, need, now)) {
            running_[p.victim].preempting = true;
            preempting.push_back(p.victim);
            d.preempt.push_back(std::move(p));
            freed_by_preemption = true;
          }
        }
        if (freed_by_preemption) {
          std::sort(preempting.begin(), preempting.end());
          w->wait = Wait::kPreempting;
          w->wait_detail = absl::StrCat("preempting ", absl::StrJoin(preempting, ", "), " to free ", NameOf(k));
        } else {
          w->wait = Wait::kResources;
          w->wait_detail = absl::StrCat(free, " of ", k == Kind::kGpus ? "this host's GPUs" : "this host's slots",
                                        " free; this job needs ", w->demand.count);
        }
        continue;
      }
    }
    Start(*w, now, borrowing, /*adopted=*/false);
    d.start.push_back(w->id);
    Remove(d.start.back());  // `w` goes; the other jobs' nodes stay where they are
  }
  last_heads_.clear();
  for (const auto& [kind, head] : heads) {
    if (waiting_.count(head.job->id)) last_heads_[kind] = head.job->id;
  }
  return d;
}

std::string Scheduler::WhyWaiting(const std::string& id) const {
  auto it = waiting_.find(id);
  if (it == waiting_.end()) return "";
  Waiting w = it->second;
  if (w.pass != pass_ && w.wait != Wait::kPaused) {
    // Not looked at by the last decision (it stopped early): behind the
    // head of its resource, or over its quota.
    w.wait = Wait::kNone;
    if (last_decision_ < w.not_before) {
      w.wait = Wait::kBackoff;
    } else if (!OverQuota(w) && w.demand.local && last_heads_.count(w.demand.kind)) {
      w.wait = Wait::kBehindHead;
    }
  }
  const char* what = NameOf(w.demand.kind);
  switch (w.wait) {
    case Wait::kNone:                // not looked at yet
    case Wait::kBackoff: return "";  // the job's own reason says when it restarts
    case Wait::kUserQuota:
    case Wait::kGroupQuota:
      return absl::StrCat("waiting: ", w.wait == Wait::kUserQuota ? "user " : "group ",
                          w.wait == Wait::kUserQuota ? w.claim.owner : w.claim.group, " uses ", w.quota_used, " of ",
                          w.quota_limit, " ", what, "; this job needs ", w.demand.count);
    case Wait::kResources:
    case Wait::kPreempting: return absl::StrCat("waiting: ", w.wait_detail);
    case Wait::kBehindHead: {
      auto head = last_heads_.find(w.demand.kind);
      if (head == last_heads_.end()) return absl::StrCat("waiting: for free ", what);
      return absl::StrCat("waiting: behind job ", head->second, ", which starts first");
    }
    case Wait::kPaused: return "waiting: the coordinator is stopping";
  }
  return "";
}

std::vector<Scheduler::QueueEntry> Scheduler::Queue(Time now) const {
  std::vector<QueueEntry> out;
  // Estimated starts, per resource, in queue order: each job starts once
  // what is free (now, plus known ends of running and earlier jobs) is
  // enough; after a job that never gets enough that way, none is known.
  // A job over its quota has none.
  struct Timeline {
    std::map<Time, int> delta;  // change of what is free at a time
    Time last{};
    bool known = true;
  };
  std::map<Kind, Timeline> lines;
  for (Kind k : {Kind::kSlots, Kind::kGpus}) {
    Timeline& t = lines[k];
    t.delta[now] += k == Kind::kGpus ? pool_.free_gpus() : pool_.free_slots();
    t.last = now;
    for (const auto& [id, r] : running_) {
      if (!r.demand.local || r.demand.kind != k) continue;
      if (r.expected_end) t.delta[std::max(now, *r.expected_end)] += r.demand.count;
    }
  }
  int position = 0;
  for (const Waiting* w : Order(now)) {
    QueueEntry e{w->id, ++position, w->demand, w->claim, WhyWaiting(w->id)};
    auto s = owners_.find(w->claim.owner);
    e.owner_usage = s == owners_.end() ? 0 : UsageAt(s->second, now);
    Waiting quota_check = *w;
    if (OverQuota(quota_check)) {
      // It starts when its owner's jobs end, which no timeline here knows.
    } else if (!w->demand.local) {
      e.estimated_start = std::max(now, w->not_before);
    } else if (Timeline& t = lines[w->demand.kind]; t.known) {
      int free = 0;
      std::optional<Time> start;
      for (const auto& [time, change] : t.delta) {
        free += change;
        if (time >= std::max(t.last, w->not_before) && free >= w->demand.count) {
          start = time;
          break;
        }
      }
      if (start) {
        e.estimated_start = *start;
        t.last = *start;
        t.delta[*start] -= w->demand.count;
        // A run time nobody knows: it holds what it takes from then on.
        if (w->claim.runtime) t.delta[*start + *w->claim.runtime] += w->demand.count;
      } else {
        t.known = false;
      }
    }
    out.push_back(std::move(e));
  }
  return out;
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
  Start(w, now, /*borrowing=*/false, /*adopted=*/true);
}

void Scheduler::Release(const std::string& id, Time now) {
  auto it = running_.find(id);
  if (it == running_.end()) return;
  const Running& r = it->second;
  Accrue(r.claim.owner, now);
  owners_[r.claim.owner].ranks_running -= r.demand.count;
  if (!r.claim.owner.empty()) user_in_use_[r.claim.owner].of(r.demand.kind) -= r.demand.count;
  if (!r.claim.group.empty()) group_in_use_[r.claim.group].of(r.demand.kind) -= r.demand.count;
  running_.erase(it);
  auto h = held_.find(id);
  if (h != held_.end()) {
    pool_.Release(&h->second);
    held_.erase(h);
  }
}

std::map<std::string, Scheduler::Usage> Scheduler::UserUsage(Time now) const {
  std::map<std::string, Usage> out;
  for (const auto& [owner, s] : owners_) {
    Usage& u = out[owner];
    u.queued = s.queued;
    u.rank_seconds = UsageAt(s, now);
  }
  for (const auto& [owner, in_use] : user_in_use_) {
    out[owner].slots = in_use.slots;
    out[owner].gpus = in_use.gpus;
  }
  return out;
}

std::map<std::string, Scheduler::Usage> Scheduler::GroupUsage() const {
  std::map<std::string, Usage> out;
  for (const auto& [group, in_use] : group_in_use_) {
    out[group].slots = in_use.slots;
    out[group].gpus = in_use.gpus;
  }
  for (const auto& [id, w] : waiting_) {
    if (!w.claim.group.empty()) ++out[w.claim.group].queued;
  }
  return out;
}

}  // namespace trainyard
