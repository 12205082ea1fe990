// Scheduler: the jobs waiting to start, the resources of this host that
// local jobs take (ResourcePool), what each running job holds, and the
// decision which waiting jobs start now and which running jobs give way.
//
// The order of the queue: priority (higher first), then fair share (the
// owner with less recent usage first: rank-seconds decaying with a
// half-life, as Slurm's fair-share factor), then a job queued again after a
// failure or preemption before one that has not started, then submit time.
//
// A job starts when its owner's and group's quotas (slots and GPUs in use,
// counted over every launcher) allow it and, for a local job, this host has
// what it needs. The first job in order whose resource (CPU slots or GPUs)
// is short is the head of that resource: later jobs that need the same
// resource start before it only when they do not delay it (backfill:
// they end before the head's estimated start, or use what the head will not
// need then). A job over its quota may borrow idle quota when no other
// owner's job waits, if it is preemptible: it gives the quota back (is
// preempted) when an owner within its quota needs the resources. When the
// head cannot start and running preemptible jobs of lower priority hold
// what it needs, the scheduler preempts the fewest of the lowest priority;
// never a job that has run less than the minimum run time since it started.
// Slurm and external jobs take nothing from this host (quota only).
//
// Elastic jobs (Demand::min_count) start with as many ranks as are free
// between their minimum and their full size, and grow back towards the size
// they want (full, or what `trainctl scale` asked for) when no waiting job
// is short of the same resource. For a head that cannot start, preemptible
// elastic jobs of lower priority are shrunk towards their minimum first (no
// work is lost): when shrinking alone makes room, nobody is preempted.
//
// The rules it orders and decides by are parts of their own: FairShare
// (usage decaying with a half-life), QuotaLedger (what each user and group
// has in use against their quotas), QueueForecast (when resources come
// free: the head's shadow time for backfill, and estimated starts),
// Victims (who is preempted) and ElasticSizer (elastic jobs' sizes; the
// Scheduler applies its plans in scheduler_elastic.cc).
//
// Deterministic: the time is passed in. Not thread-safe: the JobManager
// calls it under its mutex.
#ifndef TRAINYARD_SERVER_SCHEDULING_SCHEDULER_H_
#define TRAINYARD_SERVER_SCHEDULING_SCHEDULER_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "common/policy.h"
#include "server/scheduling/elastic_sizer.h"
#include "server/scheduling/fair_share.h"
#include "server/scheduling/queue_forecast.h"
#include "server/scheduling/quota_ledger.h"
#include "server/scheduling/resource_pool.h"
#include "server/scheduling/victims.h"

namespace trainyard {

// What one job takes while it runs.
struct Demand {
  // Local jobs take `count` of `kind` from this host; the others take
  // nothing here, but count against quotas as `count` of `kind`.
  bool local = false;
  ResourcePool::Kind kind = ResourcePool::Kind::kSlots;
  int count = 0;
  // Elastic jobs: they start with at least this many and run with between
  // min_count and count (0: not elastic, exactly `count`).
  int min_count = 0;
  int minimum() const { return min_count > 0 ? min_count : count; }
};

// Whose a job is and how it may be treated.
struct JobClaim {
  std::string owner;  // "" on a server without users
  std::string group;  // the quota group it counts against; "" for none
  int64_t priority = 0;
  bool preemptible = false;
  // How long it runs once started, when known (remaining steps × measured
  // step time): for backfill and estimated starts.
  std::optional<std::chrono::steady_clock::duration> runtime;
};

struct SchedulerPolicy {
  // Slots and GPUs in use at once per user and per group (queued_jobs is
  // checked at submission).
  std::map<std::string, Quota> user_quotas, group_quotas;
  // How fast past usage fades from fair share.
  std::chrono::steady_clock::duration fair_share_half_life = std::chrono::hours(24);
  // A job is not preempted for another before it has run this long.
  std::chrono::steady_clock::duration min_run_time = std::chrono::minutes(10);
  bool backfill = true;
  // Jobs looked at for backfill behind the first head, per decision (as
  // Slurm's bf_max_job_test): bounds a decision's time in a deep queue.
  int backfill_depth = 1000;
};

// The scheduling part of the users' policy: its quotas, with fair share's
// half-life and the minimum run time before a preemption.
SchedulerPolicy SchedulingOf(const Policy& policy, std::chrono::steady_clock::duration fair_share_half_life,
                             std::chrono::steady_clock::duration min_run_time);

class Scheduler {
 public:
  using Time = std::chrono::steady_clock::time_point;
  using Duration = std::chrono::steady_clock::duration;

  // A running job to preempt so that `for_job` can start.
  struct Preemption {
    std::string victim, for_job;
    bool reclaim = false;  // it ran on borrowed quota that `for_job`'s owner needs
  };
  // An elastic job's change of size: it runs ranks 0..to-1 once done.
  struct Resize {
    std::string job;
    int to = 0;
    std::string for_job;  // shrink: the job it makes room for
  };
  struct Decision {
    std::vector<std::string> start;  // in the order they start; each holds what it needs (Held)
    std::vector<Preemption> preempt;
    // Grown jobs hold their new size from this decision on; shrunk ones
    // hold their old size until Resized says their ranks above `to` ended.
    std::vector<Resize> grow, shrink;
  };
  // One waiting job as `trainctl queue` shows it.
  struct QueueEntry {
    std::string id;
    int position = 0;  // 1: first in order
    Demand demand;
    JobClaim claim;
    std::string reason;                   // why it waits
    std::optional<Time> estimated_start;  // from known run times; none: unknown
    double owner_usage = 0;               // fair-share usage of its owner (rank-seconds)
  };
  // What one user or group has.
  struct Usage {
    int slots = 0, gpus = 0;  // in use
    int queued = 0;           // jobs waiting
    double rank_seconds = 0;  // decayed usage (users only)
  };

  // `ranks_per_gpu`: ranks one GPU may take at once (ResourcePool).
  Scheduler(int slots, int gpus, SchedulerPolicy policy = {}, int ranks_per_gpu = 1);

  // Quotas and times from now on (a policy reload); what runs keeps running.
  void SetPolicy(SchedulerPolicy policy);
  const SchedulerPolicy& policy() const { return policy_; }

  // Queues job `id`; it does not start before `not_before`. `ahead`: a job
  // queued again, before jobs of its priority and owner that have not started.
  void Enqueue(const std::string& id, Demand demand, JobClaim claim, Time not_before = {}, bool ahead = false);
  // Takes `id` out of the queue; false when it was not queued.
  bool Remove(const std::string& id);
  bool queued(const std::string& id) const { return waiting_.count(id) > 0; }
  size_t size() const { return waiting_.size(); }
  // Jobs of `owner` waiting.
  int queued_of(const std::string& owner) const;
  // What each user and group has in use (every launcher).
  const QuotaLedger& quotas() const { return quotas_; }

  // The waiting jobs that start at `now` and the running jobs to preempt.
  // Nothing starts or is preempted once Pause() was called.
  Decision Schedule(Time now);
  // Why a job waits and the queue in order (QueueReport); `shown`: the
  // entries wanted (all when null).
  std::string WhyWaiting(const std::string& id) const;
  std::vector<QueueEntry> Queue(Time now, const std::function<bool(const std::string& id)>& shown = nullptr) const;

  // A running job's expected end (its remaining steps × step time).
  void SetExpectedEnd(const std::string& id, Time end);
  // What job `id` holds (empty when nothing).
  const ResourcePool::Held& Held(const std::string& id) const;
  // A job found running after a coordinator restart holds what it needs
  // (slots even beyond what is free; GPUs as far as they go: which ones it
  // had is not stored).
  void HoldAdopted(const std::string& id, Demand demand, JobClaim claim, Time now);
  // The job stopped running: gives back what it holds.
  void Release(const std::string& id, Time now);
  // An elastic job asked to run `to` ranks (`trainctl scale`): it grows at
  // once when what it needs is free (an error says what is short), or is
  // marked to shrink (Resized follows as its ranks leave). It grows back no
  // further than `to` afterwards.
  absl::Status Scale(const std::string& id, int to, Time now);
  // Elastic job `id` runs `ranks` ranks now (its ranks above ended, or a
  // grow could not be carried out): gives back what it held above them,
  // and a shrink down to them is over.
  void Resized(const std::string& id, int ranks, Time now);
  bool running(const std::string& id) const { return running_.count(id) > 0; }

  // Starts nothing from now on (the coordinator is stopping).
  void Pause() { paused_ = true; }

  int free_slots() const { return pool_.free_slots(); }
  int free_gpus() const { return pool_.free_gpus(); }
  // Every user and group with jobs running or waiting, or usage left (QueueReport).
  std::map<std::string, Usage> UserUsage(Time now) const;
  std::map<std::string, Usage> GroupUsage() const;

 private:
  friend class QueueReport;  // reads the queue's state
  enum class Wait { kNone, kBackoff, kUserQuota, kGroupQuota, kResources, kBehindHead, kPreempting, kPaused };
  struct Waiting {
    std::string id;
    Demand demand;
    JobClaim claim;
    Time not_before;
    int64_t order = 0;  // within its priority and owner
    // Why it waits, as of the last pass that looked at it (`pass`).
    Wait wait = Wait::kNone;
    int quota_used = 0;
    int64_t quota_limit = 0;
    std::string wait_detail;  // heads only: what they wait for
    int64_t pass = -1;
  };
  struct Running {
    Demand demand;  // count: the ranks it holds now
    JobClaim claim;
    Time started;
    std::optional<Time> expected_end;
    bool preempting = false;
    bool borrowing = false;
    // Elastic jobs: the full size, the size it grows back to, and the size
    // a shrink in progress goes down to (-1: none).
    int full = 0, want = 0, shrink_to = -1;
    int size_after_shrink() const { return shrink_to >= 0 ? shrink_to : demand.count; }
  };
  // The waiting jobs in queue order at `now`, one at a time (Next; null
  // after the last), as ordered when it was made: a pass that stops early
  // costs the jobs it looked at, not the queue. Removing the job Next just
  // returned is allowed (Schedule starts it).
  class OrderCursor {
   public:
    OrderCursor(const Scheduler& s, Time now);
    Waiting* Next();

   private:
    const Scheduler& s_;
    std::vector<std::pair<int64_t, std::vector<std::string>>> levels_;  // priority → owners in order
    size_t level_ = 0, owner_ = 0;
    std::optional<int64_t> after_;  // the order of the owner's job returned last
  };
  // All of them (OrderCursor to the end).
  std::vector<Waiting*> Order(Time now) const;
  // Whether `w` is over its owner's or group's quota: its wait then says which.
  bool OverQuota(Waiting& w) const;
  // Starts `w` with `size` ranks (its full count, or fewer when elastic).
  void Start(Waiting& w, Time now, bool borrowing, bool adopted, int size);
  // The most ranks `w` can start with now (0: not even its minimum).
  int SizeToStart(const Waiting& w, bool borrowing) const;
  // Running job `id` holds `to` ranks from now on.
  void SetSize(const std::string& id, Running& r, int to, Time now);
  // Shrinks elastic jobs so that `need` of the head's resource come free,
  // when shrinking alone can; returns the shrunk jobs (empty: it cannot).
  std::vector<Resize> PickShrinks(const Waiting& head, int need);
  static ElasticJob ElasticOf(const std::string& id, const Running& r);
  // Grows elastic jobs on `kind` into what is free.
  void Grow(ResourcePool::Kind kind, Time now, Decision* d);
  // Picks the running jobs to preempt so that `head` fits; empty when none will do.
  std::vector<Preemption> PickVictims(const Waiting& head, int need, Time now) const;
  // The timeline of `kind` on this host from now.
  QueueForecast ForecastOf(ResourcePool::Kind kind, Time now, QueueForecast::Ends ends) const;

  SchedulerPolicy policy_;
  ResourcePool pool_;
  FairShare fair_share_;
  QuotaLedger quotas_;
  // priority (highest first) → owner → order → job (nodes of waiting_)
  std::map<int64_t, std::map<std::string, std::map<int64_t, Waiting*>>, std::greater<>> levels_;
  std::unordered_map<std::string, Waiting> waiting_;
  std::unordered_map<std::string, Running> running_;
  std::map<std::string, ResourcePool::Held> held_;
  std::map<std::string, int> queued_by_owner_;  // every owner that queued a job
  std::map<std::string, int> queued_by_group_;  // groups with jobs waiting
  int64_t next_back_ = 0, next_front_ = 0;
  int64_t pass_ = 0;  // decisions made
  Time last_decision_{};
  // Local jobs waiting per resource, and jobs waiting elsewhere (Slurm,
  // external): when every resource has its head and none can backfill,
  // only these could still start.
  std::map<ResourcePool::Kind, int> waiting_local_;
  int waiting_elsewhere_ = 0;
  // The head of each resource at the last decision.
  std::map<ResourcePool::Kind, std::string> last_heads_;
  bool paused_ = false;
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_SCHEDULING_SCHEDULER_H_
