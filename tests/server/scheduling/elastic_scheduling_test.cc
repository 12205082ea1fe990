// The Scheduler's elastic jobs: they start with what is free above their
// minimum, grow into what no waiting job needs, are shrunk (not preempted)
// for a job of higher priority and grow back, and follow `trainctl scale`.
#include <gtest/gtest.h>

#include "server/scheduling/scheduler.h"

namespace trainyard {
namespace {

using Ids = std::vector<std::string>;
using std::chrono::seconds;
const Scheduler::Time kT0 = Scheduler::Time{} + std::chrono::hours(1000);

Demand Slots(int n) { return {true, ResourcePool::Kind::kSlots, n}; }
Demand Elastic(int min, int max) {
  Demand d = Slots(max);
  d.min_count = min;
  return d;
}
Demand ElasticGpus(int min, int max) {
  Demand d{true, ResourcePool::Kind::kGpus, max};
  d.min_count = min;
  return d;
}
JobClaim Of(std::string owner, int64_t priority = 0, bool preemptible = false) {
  JobClaim c;
  c.owner = std::move(owner);
  c.priority = priority;
  c.preemptible = preemptible;
  return c;
}
std::string Describe(const std::vector<Scheduler::Resize>& v) {
  std::string out;
  for (const auto& r : v) out += r.job + "->" + std::to_string(r.to) + (r.for_job.empty() ? "" : "/" + r.for_job) + " ";
  return out;
}

TEST(ElasticScheduling, StartsWithWhatIsFreeAboveItsMinimumAndGrowsWhenSlotsFree) {
  Scheduler s(4, 0);
  s.Enqueue("fixed", Slots(2), {});
  EXPECT_EQ(s.Schedule(kT0).start, Ids{"fixed"});
  s.Enqueue("elastic", Elastic(1, 3), {});
  const Scheduler::Decision d = s.Schedule(kT0);
  EXPECT_EQ(d.start, Ids{"elastic"});
  EXPECT_EQ(s.Held("elastic").slots, 2) << "2 of its 3 were free";
  EXPECT_TRUE(d.grow.empty());
  s.Release("fixed", kT0 + seconds(1));
  EXPECT_EQ(Describe(s.Schedule(kT0 + seconds(1)).grow), "elastic->3 ");
  EXPECT_EQ(s.Held("elastic").slots, 3);
  EXPECT_EQ(s.free_slots(), 1);
  EXPECT_TRUE(s.Schedule(kT0 + seconds(2)).grow.empty()) << "never above num_processes";
}

TEST(ElasticScheduling, DoesNotStartBelowItsMinimum) {
  Scheduler s(3, 0);
  s.Enqueue("fixed", Slots(2), {});
  s.Schedule(kT0);
  s.Enqueue("elastic", Elastic(2, 3), {});
  EXPECT_TRUE(s.Schedule(kT0).start.empty());
  EXPECT_EQ(s.WhyWaiting("elastic"), "waiting: 1 of this host's slots free; this job needs 2");
}

TEST(ElasticScheduling, AWaitingJobGetsFreeSlotsBeforeAnElasticJobGrows) {
  Scheduler s(4, 0);
  s.Enqueue("fixed", Slots(2), Of("a"));
  s.Enqueue("elastic", Elastic(1, 4), Of("a"));
  EXPECT_EQ(s.Schedule(kT0).start, (Ids{"fixed", "elastic"}));
  EXPECT_EQ(s.Held("elastic").slots, 2);
  s.Enqueue("big", Slots(3), Of("b"));
  EXPECT_TRUE(s.Schedule(kT0).start.empty());
  s.Release("fixed", kT0);
  const Scheduler::Decision d = s.Schedule(kT0);
  EXPECT_TRUE(d.grow.empty()) << "big waits for slots: the 2 free stay for it";
  EXPECT_EQ(s.WhyWaiting("big"), "waiting: 2 of this host's slots free; this job needs 3");
}

TEST(ElasticScheduling, AHigherPriorityJobShrinksAnElasticJobInsteadOfPreemptingAndItGrowsBack) {
  Scheduler::Time t = kT0;
  SchedulerPolicy p;
  p.min_run_time = std::chrono::minutes(0);
  Scheduler s(4, 0, p);
  s.Enqueue("fixed-low", Slots(1), Of("a", 0, /*preemptible=*/true));
  s.Enqueue("elastic", Elastic(1, 3), Of("a", 0, /*preemptible=*/true));
  EXPECT_EQ(s.Schedule(t).start, (Ids{"fixed-low", "elastic"}));
  EXPECT_EQ(s.free_slots(), 0);
  s.Enqueue("urgent", Slots(2), Of("b", 1000));
  Scheduler::Decision d = s.Schedule(t);
  EXPECT_TRUE(d.preempt.empty()) << "shrinking alone makes room";
  EXPECT_EQ(Describe(d.shrink), "elastic->1/urgent ");
  EXPECT_TRUE(d.start.empty()) << "its ranks leave first";
  EXPECT_EQ(s.WhyWaiting("urgent"), "waiting: shrinking elastic to free slots");
  EXPECT_EQ(s.Held("elastic").slots, 3) << "held until its ranks have left";
  // Asked again before the ranks left: nothing more is shrunk.
  d = s.Schedule(t);
  EXPECT_TRUE(d.shrink.empty() && d.preempt.empty() && d.start.empty());
  s.Resized("elastic", 1, t);
  d = s.Schedule(t);
  EXPECT_EQ(d.start, Ids{"urgent"});
  EXPECT_TRUE(d.grow.empty());
  s.Release("urgent", t += seconds(5));
  d = s.Schedule(t);
  EXPECT_EQ(Describe(d.grow), "elastic->3 ");
}

TEST(ElasticScheduling, WhenShrinkingCannotMakeRoomItPreemptsAsBefore) {
  SchedulerPolicy p;
  p.min_run_time = std::chrono::minutes(0);
  Scheduler s(4, 0, p);
  s.Enqueue("elastic", Elastic(2, 3), Of("a", 0, true));
  s.Enqueue("fixed-low", Slots(1), Of("a", 0, true));
  s.Schedule(kT0);
  s.Enqueue("urgent", Slots(3), Of("b", 1000));
  const Scheduler::Decision d = s.Schedule(kT0);
  EXPECT_TRUE(d.shrink.empty()) << "shrinking frees 1 of the 3 it needs";
  ASSERT_FALSE(d.preempt.empty());
}

TEST(ElasticScheduling, NeitherNonPreemptibleNorEqualPriorityJobsAreShrunk) {
  SchedulerPolicy p;
  p.min_run_time = std::chrono::minutes(0);
  Scheduler s(3, 0, p);
  s.Enqueue("elastic", Elastic(1, 3), Of("a", 0, /*preemptible=*/false));
  s.Schedule(kT0);
  s.Enqueue("urgent", Slots(1), Of("b", 1000));
  EXPECT_TRUE(s.Schedule(kT0).shrink.empty());
  Scheduler t(3, 0, p);
  t.Enqueue("elastic", Elastic(1, 3), Of("a", 5, true));
  t.Schedule(kT0);
  t.Enqueue("same", Slots(1), Of("b", 5));
  EXPECT_TRUE(t.Schedule(kT0).shrink.empty());
}

TEST(ElasticScheduling, ScaleGrowsWhenItFitsAndSaysWhatIsShortWhenNot) {
  Scheduler s(4, 0);
  s.Enqueue("elastic", Elastic(1, 4), {});
  s.Enqueue("fixed", Slots(2), {});
  s.Schedule(kT0);
  ASSERT_EQ(s.Held("elastic").slots, 4);
  EXPECT_EQ(s.Scale("elastic", 5, kT0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.Scale("elastic", 0, kT0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.Scale("nope", 2, kT0).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(s.Scale("elastic", 2, kT0).ok());
  EXPECT_EQ(s.Held("elastic").slots, 4) << "until its ranks have left";
  s.Resized("elastic", 2, kT0);
  EXPECT_EQ(s.Schedule(kT0).start, Ids{"fixed"});
  EXPECT_TRUE(s.Schedule(kT0).grow.empty()) << "it wants 2 now";
  const absl::Status st = s.Scale("elastic", 3, kT0);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(st.message(), "growing job elastic to 3 ranks needs 1 more of this host's slots; 0 free");
  s.Release("fixed", kT0);
  ASSERT_TRUE(s.Scale("elastic", 3, kT0).ok());
  EXPECT_EQ(s.Held("elastic").slots, 3) << "held at once";
  Scheduler fixed(2, 0);
  fixed.Enqueue("f", Slots(2), {});
  fixed.Schedule(kT0);
  EXPECT_EQ(fixed.Scale("f", 1, kT0).message(), "job f is not elastic (elastic.min_processes)");
}

TEST(ElasticScheduling, GrowsWithinItsOwnersQuota) {
  SchedulerPolicy p;
  p.user_quotas["a"].slots = 2;
  Scheduler s(4, 0, p);
  s.Enqueue("elastic", Elastic(1, 4), Of("a"));
  EXPECT_EQ(s.Schedule(kT0).start, Ids{"elastic"});
  EXPECT_EQ(s.Held("elastic").slots, 2) << "its owner may use 2";
  EXPECT_TRUE(s.Schedule(kT0).grow.empty());
}

TEST(ElasticScheduling, AnElasticGpuJobsRanksKeepTheirGpusFromTheBottom) {
  Scheduler s(0, 3);
  s.Enqueue("elastic", ElasticGpus(1, 3), {});
  s.Schedule(kT0);
  ASSERT_EQ(s.Held("elastic").gpus, (std::vector<int>{0, 1, 2}));
  ASSERT_TRUE(s.Scale("elastic", 1, kT0).ok());
  s.Resized("elastic", 1, kT0);
  EXPECT_EQ(s.Held("elastic").gpus, (std::vector<int>{0})) << "ranks 1 and 2 left";
  EXPECT_EQ(s.free_gpus(), 2);
  ASSERT_TRUE(s.Scale("elastic", 2, kT0).ok());
  EXPECT_EQ(s.Held("elastic").gpus.size(), 2u);
  EXPECT_EQ(s.Held("elastic").gpus[0], 0);
}

}  // namespace
}  // namespace trainyard
