// The Scheduler alone, on a simulated clock: order by priority, fair share
// and submit time; quotas and borrowing; preemption (fewest, lowest, never
// non-preemptible or equal priority, minimum run time); backfill that never
// delays the head; estimated starts; requeued, backing-off, adopted jobs.
#include "server/scheduling/scheduler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace trainyard {
namespace {

using Time = Scheduler::Time;
using std::chrono::hours;
using std::chrono::minutes;
using std::chrono::seconds;
using Ids = std::vector<std::string>;

Demand Slots(int n) { return {true, ResourcePool::Kind::kSlots, n}; }
Demand Gpus(int n) { return {true, ResourcePool::Kind::kGpus, n}; }
Demand Elsewhere(int n) { return {false, ResourcePool::Kind::kSlots, n}; }

JobClaim Of(std::string owner, int64_t priority = 0, bool preemptible = false) {
  JobClaim c;
  c.owner = std::move(owner);
  c.priority = priority;
  c.preemptible = preemptible;
  return c;
}
JobClaim Lasting(Scheduler::Duration runtime, std::string owner = "") {
  JobClaim c = Of(std::move(owner));
  c.runtime = runtime;
  return c;
}

const Time kT0 = Time{} + hours(1000);

Ids Started(Scheduler& s, Time t) { return s.Schedule(t).start; }

SchedulerPolicy NoBackfill() {
  SchedulerPolicy p;
  p.backfill = false;
  return p;
}

TEST(Scheduler, FirstComeFirstServedWithinSlots) {
  Scheduler s(4, 0, NoBackfill());
  s.Enqueue("a", Slots(2), {});
  s.Enqueue("b", Slots(2), {});
  s.Enqueue("c", Slots(3), {});
  s.Enqueue("d", Slots(1), {});
  EXPECT_EQ(Started(s, kT0), (Ids{"a", "b"}));
  s.Release("a", kT0);
  EXPECT_TRUE(Started(s, kT0).empty()) << "c needs 3 of the 2 free; d waits behind it";
  EXPECT_EQ(s.WhyWaiting("d"), "waiting: behind job c, which starts first");
  EXPECT_EQ(s.WhyWaiting("c"), "waiting: 2 of this host's slots free; this job needs 3");
  s.Release("b", kT0);
  EXPECT_EQ(Started(s, kT0), (Ids{"c", "d"}));
}

TEST(Scheduler, ResourcesDoNotBlockEachOther) {
  Scheduler s(4, 2);
  s.Enqueue("big-gpu", Gpus(3), {});  // more than there are: waits
  s.Enqueue("cpu", Slots(2), {});
  s.Enqueue("slurm", Elsewhere(64), {});
  EXPECT_EQ(Started(s, kT0), (Ids{"cpu", "slurm"}));
  EXPECT_EQ(s.free_gpus(), 2);
}

TEST(Scheduler, HigherPriorityGoesFirst) {
  Scheduler s(2, 0);
  s.Enqueue("low", Slots(2), Of("a", 0));
  s.Enqueue("normal", Slots(2), Of("a", 100));
  s.Enqueue("high", Slots(2), Of("b", 1000));
  EXPECT_EQ(Started(s, kT0), Ids{"high"});
  s.Release("high", kT0 + seconds(1));
  EXPECT_EQ(Started(s, kT0 + seconds(1)), Ids{"normal"});
  s.Release("normal", kT0 + seconds(2));
  EXPECT_EQ(Started(s, kT0 + seconds(2)), Ids{"low"});
}

// Usage is rank-seconds decaying with the half-life; checked against a
// sum over small steps in float64.
TEST(Scheduler, FairShareUsageDecaysWithTheHalfLife) {
  SchedulerPolicy p;
  p.fair_share_half_life = hours(1);
  Scheduler s(8, 0, p);
  s.Enqueue("a1", Slots(4), Of("alice"));
  ASSERT_EQ(Started(s, kT0), Ids{"a1"});
  s.Release("a1", kT0 + hours(1));
  double reference = 0;
  const double h = 3600, dt = 0.01;
  for (double t = 0; t < 3600; t += dt) reference += 4 * dt * std::exp2(-(3600 - t - dt / 2) / h);
  const auto u1 = s.UserUsage(kT0 + hours(1)).at("alice").rank_seconds;
  EXPECT_NEAR(u1, reference, 1e-6 * reference);
  EXPECT_NEAR(u1, 4 * 3600 / std::log(2.0) * 0.5, 1e-6 * u1);
  EXPECT_NEAR(s.UserUsage(kT0 + hours(2)).at("alice").rank_seconds, u1 / 2, 1e-6 * u1) << "an idle hour halves it";
}

TEST(Scheduler, FairShareRanksEqualPriorityByRecentUsage) {
  Scheduler s(4, 0);
  s.Enqueue("a1", Slots(4), Of("alice"));
  ASSERT_EQ(Started(s, kT0), Ids{"a1"});
  s.Enqueue("a2", Slots(4), Of("alice"));  // alice submits first...
  s.Enqueue("b1", Slots(4), Of("bob"));
  s.Release("a1", kT0 + hours(1));
  // ...but used the host for an hour: bob goes first.
  EXPECT_EQ(Started(s, kT0 + hours(1)), Ids{"b1"});
  const auto q = s.Queue(kT0 + hours(1));
  ASSERT_EQ(q.size(), 1u);
  EXPECT_EQ(q[0].id, "a2");
  // Priority still wins over fair share.
  s.Enqueue("a3", Slots(4), Of("alice", 10));
  EXPECT_EQ(s.Queue(kT0 + hours(1))[0].id, "a3");
}

// Owners with equal usage (none yet) are ordered by their first job's
// submission, not by name.
TEST(Scheduler, EqualUsageFallsBackToSubmitTime) {
  Scheduler s(4, 0);
  s.Enqueue("z1", Slots(4), Of("zed"));
  s.Enqueue("a1", Slots(4), Of("amy"));
  s.Enqueue("z2", Slots(4), Of("zed"));
  const auto q = s.Queue(kT0);
  ASSERT_EQ(q.size(), 3u);
  EXPECT_EQ(q[0].id, "z1");
  EXPECT_EQ(q[1].id, "z2");
  EXPECT_EQ(q[2].id, "a1");
  EXPECT_EQ(Started(s, kT0), Ids{"z1"});
}

TEST(Scheduler, QuotaHoldsAJobWithItsReasonAndBlocksNobodyElse) {
  SchedulerPolicy p;
  p.user_quotas["alice"].gpus = 2;
  Scheduler s(8, 8, p);
  s.Enqueue("a1", Gpus(2), Of("alice"));
  s.Enqueue("a2", Gpus(1), Of("alice"));
  s.Enqueue("b1", Gpus(4), Of("bob"));
  EXPECT_EQ(Started(s, kT0), (Ids{"a1", "b1"}));
  EXPECT_EQ(s.WhyWaiting("a2"), "waiting: user alice uses 2 of 2 GPUs; this job needs 1");
  EXPECT_EQ(s.UserUsage(kT0).at("alice").gpus, 2);
  s.Release("a1", kT0 + seconds(1));
  EXPECT_EQ(Started(s, kT0 + seconds(1)), Ids{"a2"});
}

TEST(Scheduler, GroupQuotaCountsEveryMemberAndEveryLauncher) {
  SchedulerPolicy p;
  p.group_quotas["vision"].slots = 6;
  Scheduler s(16, 0, p);
  JobClaim alice = Of("alice"), bob = Of("bob");
  alice.group = bob.group = "vision";
  s.Enqueue("a1", Elsewhere(4), alice);  // a Slurm job counts against the quota
  s.Enqueue("b1", Slots(4), bob);
  s.Enqueue("b2", Slots(2), bob);
  EXPECT_EQ(Started(s, kT0), (Ids{"a1", "b2"}));
  EXPECT_EQ(s.WhyWaiting("b1"), "waiting: group vision uses 4 of 6 slots; this job needs 4");
}

TEST(Scheduler, IdleQuotaIsBorrowedWhenNobodyElseWaitsAndReclaimed) {
  SchedulerPolicy p;
  p.user_quotas["alice"].slots = 2;
  p.min_run_time = seconds(0);
  Scheduler s(8, 0, p);
  s.Enqueue("fixed", Slots(2), Of("alice"));
  s.Enqueue("stiff", Slots(2), Of("alice"));                          // not preemptible: cannot borrow
  s.Enqueue("loan", Slots(6), Of("alice", 0, /*preemptible=*/true));  // borrows
  EXPECT_EQ(Started(s, kT0), (Ids{"fixed", "loan"}));
  EXPECT_EQ(s.WhyWaiting("stiff"), "waiting: user alice uses 2 of 2 slots; this job needs 2");
  // Bob is within his quota (he has none) and needs what the loan holds.
  s.Enqueue("b1", Slots(4), Of("bob"));
  auto d = s.Schedule(kT0 + seconds(1));
  EXPECT_TRUE(d.start.empty());
  ASSERT_EQ(d.preempt.size(), 1u);
  EXPECT_EQ(d.preempt[0].victim, "loan");
  EXPECT_TRUE(d.preempt[0].reclaim);
  EXPECT_EQ(s.WhyWaiting("b1"), "waiting: preempting loan to free slots");
  s.Release("loan", kT0 + seconds(2));
  EXPECT_EQ(Started(s, kT0 + seconds(2)), Ids{"b1"});
}

TEST(Scheduler, NoBorrowingWhileAnotherOwnerWaits) {
  SchedulerPolicy p;
  p.user_quotas["alice"].slots = 2;
  Scheduler s(4, 0, p);
  s.Enqueue("b-later", Slots(4), Of("bob"), kT0 + hours(1));  // bob waits (backing off)
  s.Enqueue("a1", Slots(2), Of("alice"));
  s.Enqueue("loan", Slots(2), Of("alice", 0, true));
  EXPECT_EQ(Started(s, kT0), Ids{"a1"});
  EXPECT_FALSE(s.running("loan"));
}

// Running: two preemptible jobs at priority 0 (2 GPUs each), one at 50 (4),
// a non-preemptible one at 0 and a preemptible one at 1000.
class Preemption : public ::testing::Test {
 protected:
  Preemption() : s_(12, 12, Policy()) {
    Run("low-old", 2, 0, true, kT0);
    Run("low-new", 2, 0, true, kT0 + minutes(1));
    Run("mid", 4, 50, true, kT0);
    Run("stiff", 2, 0, false, kT0);
    Run("top", 2, 1000, true, kT0);
    EXPECT_EQ(s_.free_gpus(), 0);
  }
  static SchedulerPolicy Policy() {
    SchedulerPolicy p;
    p.min_run_time = minutes(10);
    return p;
  }
  void Run(const std::string& id, int gpus, int64_t priority, bool preemptible, Time at) {
    s_.Enqueue(id, Gpus(gpus), Of(id, priority, preemptible));
    ASSERT_EQ(Started(s_, at), Ids{id});
  }
  Ids Victims(const Scheduler::Decision& d) {
    Ids out;
    for (const auto& p : d.preempt) out.push_back(p.victim);
    std::sort(out.begin(), out.end());
    return out;
  }
  Scheduler s_;
  const Time later_ = kT0 + hours(1);
};

TEST_F(Preemption, TheLatestStartedOfTheLowestPriorityWhenOneIsEnough) {
  s_.Enqueue("urgent", Gpus(2), Of("u", 1000));
  EXPECT_EQ(Victims(s_.Schedule(later_)), Ids{"low-new"});
}

TEST_F(Preemption, EveryLowestBeforeAHigherOne) {
  s_.Enqueue("urgent", Gpus(4), Of("u", 1000));
  EXPECT_EQ(Victims(s_.Schedule(later_)), (Ids{"low-new", "low-old"})) << "not mid, though it alone would do";
}

TEST_F(Preemption, TheFewestOnceAHigherLevelIsNeeded) {
  s_.Enqueue("urgent", Gpus(6), Of("u", 1000));
  EXPECT_EQ(Victims(s_.Schedule(later_)), (Ids{"low-new", "mid"}));
}

TEST_F(Preemption, NeverNonPreemptibleOrEqualOrHigherPriority) {
  s_.Enqueue("urgent", Gpus(10), Of("u", 1000));
  auto d = s_.Schedule(later_);
  EXPECT_TRUE(d.preempt.empty()) << "stiff and top may not go, the rest frees 8 of 10";
  EXPECT_EQ(s_.WhyWaiting("urgent"), "waiting: 0 of this host's GPUs free; this job needs 10");
  s_.Remove("urgent");
  s_.Enqueue("peer", Gpus(2), Of("u", 0));
  EXPECT_TRUE(s_.Schedule(later_).preempt.empty()) << "equal priority never preempts";
}

TEST_F(Preemption, NotBeforeTheMinimumRunTimeAndNeverTwiceForOneNeed) {
  s_.Enqueue("urgent", Gpus(2), Of("u", 1000));
  // low-new started at kT0 + 1 min: protected until kT0 + 11 min.
  EXPECT_EQ(Victims(s_.Schedule(kT0 + minutes(10) + seconds(30))), Ids{"low-old"});
  EXPECT_TRUE(s_.Schedule(kT0 + minutes(12)).preempt.empty()) << "low-old is stopping for it already";
  EXPECT_EQ(s_.WhyWaiting("urgent"), "waiting: preempting low-old to free GPUs");
  s_.Release("low-old", kT0 + minutes(13));
  EXPECT_EQ(Started(s_, kT0 + minutes(13)), Ids{"urgent"});
  // Queued again, low-old waits; it is not preempted again before it ran
  // the minimum run time.
  s_.Enqueue("low-old", Gpus(2), Of("low-old", 0, true), {}, /*ahead=*/true);
  s_.Release("low-new", kT0 + minutes(14));
  EXPECT_EQ(Started(s_, kT0 + minutes(14)), Ids{"low-old"});
  s_.Enqueue("urgent2", Gpus(2), Of("u", 1000));
  EXPECT_EQ(Victims(s_.Schedule(kT0 + minutes(20))), Ids{"mid"}) << "low-old runs < 10 min since its restart";
}

TEST(Scheduler, BackfillStartsWhatEndsBeforeTheHead) {
  Scheduler s(4, 0);
  s.Enqueue("x", Slots(2), Lasting(seconds(100)));
  ASSERT_EQ(Started(s, kT0), Ids{"x"});
  s.SetExpectedEnd("x", kT0 + seconds(100));
  s.Enqueue("head", Slots(4), {});
  s.Enqueue("short", Slots(2), Lasting(seconds(50)));
  s.Enqueue("long", Slots(1), Lasting(seconds(200)));
  s.Enqueue("unknown", Slots(1), {});
  EXPECT_EQ(Started(s, kT0), Ids{"short"}) << "short ends at 50 s, the head starts at 100 s";
  s.SetExpectedEnd("short", kT0 + seconds(50));
  s.Release("short", kT0 + seconds(50));
  EXPECT_TRUE(Started(s, kT0 + seconds(50)).empty()) << "long and unknown would hold slots the head needs at 100 s";
  s.Release("x", kT0 + seconds(100));
  EXPECT_EQ(Started(s, kT0 + seconds(100)), Ids{"head"});
}

TEST(Scheduler, BackfillUsesWhatTheHeadWillNotNeed) {
  Scheduler s(8, 0);
  s.Enqueue("x", Slots(4), {});
  ASSERT_EQ(Started(s, kT0), Ids{"x"});  // its end is unknown: assumed now
  s.Enqueue("head", Slots(6), {});
  s.Enqueue("a", Slots(2), {});
  s.Enqueue("b", Slots(1), {});
  EXPECT_EQ(Started(s, kT0), Ids{"a"}) << "8 free at the head's start, it needs 6; b would take a 7th";
}

// Property: with exact run times, a job at the head of the queue starts no
// later than its start estimated when it became the head.
TEST(Scheduler, BackfillNeverDelaysTheHead) {
  for (int seed = 0; seed < 50; ++seed) {
    std::mt19937 rng(seed);
    Scheduler s(8, 0);
    std::map<std::string, int> runtime_s;
    for (int i = 0; i < 30; ++i) {
      const std::string id = "j" + std::to_string(i);
      runtime_s[id] = 10 + static_cast<int>(rng() % 200);
      s.Enqueue(id, Slots(1 + static_cast<int>(rng() % 8)), Lasting(seconds(runtime_s[id])));
    }
    std::map<std::string, Time> ends;
    std::map<std::string, Time> promised;  // head → its estimate when it became the head
    Time now = kT0;
    for (int round = 0; round < 1000 && (s.size() > 0 || !ends.empty()); ++round) {
      for (const std::string& id : Started(s, now)) {
        if (promised.count(id)) EXPECT_LE(now, promised[id]) << "seed " << seed << " job " << id;
        ends[id] = now + seconds(runtime_s[id]);
        s.SetExpectedEnd(id, ends[id]);
      }
      const auto q = s.Queue(now);
      if (!q.empty() && !promised.count(q[0].id) && q[0].estimated_start) promised[q[0].id] = *q[0].estimated_start;
      if (ends.empty()) break;
      auto next =
          std::min_element(ends.begin(), ends.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
      now = next->second;
      s.Release(next->first, now);
      ends.erase(next);
    }
    EXPECT_EQ(s.size(), 0u) << "seed " << seed;
  }
}

TEST(Scheduler, QueueShowsPositionsReasonsAndEstimatedStarts) {
  Scheduler s(4, 0);
  s.Enqueue("x", Slots(4), Lasting(seconds(60)));
  ASSERT_EQ(Started(s, kT0), Ids{"x"});
  s.SetExpectedEnd("x", kT0 + seconds(60));
  s.Enqueue("a", Slots(4), Lasting(seconds(30)));
  s.Enqueue("b", Slots(2), {});
  s.Enqueue("c", Slots(2), {});
  s.Schedule(kT0);
  const auto q = s.Queue(kT0);
  ASSERT_EQ(q.size(), 3u);
  EXPECT_EQ(q[0].id, "a");
  EXPECT_EQ(q[0].position, 1);
  EXPECT_EQ(q[0].estimated_start, kT0 + seconds(60));
  EXPECT_EQ(q[1].estimated_start, kT0 + seconds(90));
  EXPECT_EQ(q[2].estimated_start, kT0 + seconds(90)) << "b's run time is unknown, but c fits beside it";
  EXPECT_EQ(q[2].reason, "waiting: behind job a, which starts first");
}

// A decision stops looking once nothing more can start; the jobs it did
// not look at still say why they wait, and jobs elsewhere still start.
TEST(Scheduler, ADeepQueueBehindFullResources) {
  SchedulerPolicy p;
  p.user_quotas["alice"].slots = 1;
  p.backfill_depth = 10;
  Scheduler s(2, 0, p);
  s.Enqueue("running", Slots(2), Of("bob"));
  ASSERT_EQ(Started(s, kT0), Ids{"running"});
  for (int i = 0; i < 100; ++i) s.Enqueue("bob" + std::to_string(i), Slots(1), Of("bob"));
  s.Enqueue("alice-big", Slots(2), Of("alice"));
  s.Enqueue("slurm", Elsewhere(8), Of("carol"));
  EXPECT_EQ(Started(s, kT0 + seconds(1)), Ids{"slurm"});
  EXPECT_EQ(s.WhyWaiting("bob0"), "waiting: 0 of this host's slots free; this job needs 1");
  EXPECT_EQ(s.WhyWaiting("bob99"), "waiting: behind job bob0, which starts first");
  EXPECT_EQ(s.WhyWaiting("alice-big"), "waiting: user alice uses 0 of 1 slots; this job needs 2");
  for (const auto& e : s.Queue(kT0 + seconds(1))) {
    if (e.id == "alice-big") EXPECT_FALSE(e.estimated_start) << "over its quota: no estimate";
  }
}

TEST(Scheduler, ABackingOffJobTakesNothingAndBlocksNobody) {
  Scheduler s(2, 0);
  s.Enqueue("retry", Slots(2), {}, kT0 + seconds(4), /*ahead=*/true);
  s.Enqueue("next", Slots(2), {});
  EXPECT_EQ(Started(s, kT0), Ids{"next"});
  s.Release("next", kT0 + seconds(3));
  EXPECT_TRUE(Started(s, kT0 + seconds(3)).empty());
  EXPECT_EQ(Started(s, kT0 + seconds(4)), Ids{"retry"});
}

TEST(Scheduler, ARequeuedJobGoesBeforeJobsThatHaveNotStarted) {
  Scheduler s(2, 0);
  s.Enqueue("first", Slots(2), {});
  EXPECT_EQ(Started(s, kT0), Ids{"first"});
  s.Enqueue("waiting", Slots(2), {});
  s.Release("first", kT0);
  s.Enqueue("first", Slots(2), {}, Time{}, /*ahead=*/true);  // failed: resumes first
  EXPECT_EQ(Started(s, kT0), Ids{"first"});
  EXPECT_TRUE(s.queued("waiting"));
}

TEST(Scheduler, AdoptedJobsHoldWhatTheyRunOn) {
  Scheduler s(2, 1);
  s.HoldAdopted("cpu", Slots(3), {}, kT0);  // over-committed until its ranks end
  EXPECT_EQ(s.free_slots(), -1);
  s.HoldAdopted("gpu", Gpus(2), {}, kT0);  // as many GPUs as there are
  EXPECT_EQ(s.Held("gpu").gpus, std::vector<int>{0});
  s.Enqueue("next", Slots(1), {});
  EXPECT_TRUE(Started(s, kT0).empty());
  s.Release("cpu", kT0);
  EXPECT_EQ(Started(s, kT0), Ids{"next"});
  s.Release("gpu", kT0);
  EXPECT_EQ(s.free_gpus(), 1);
}

TEST(Scheduler, NothingStartsOncePaused) {
  Scheduler s(2, 0);
  s.Enqueue("a", Slots(1), {});
  s.Pause();
  EXPECT_TRUE(Started(s, kT0).empty());
  EXPECT_TRUE(s.queued("a"));
  EXPECT_EQ(s.WhyWaiting("a"), "waiting: the coordinator is stopping");
}

}  // namespace
}  // namespace trainyard
