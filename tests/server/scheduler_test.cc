// The Scheduler alone, on a simulated clock: first come, first served within
// each resource, resources independent of each other, jobs that take
// nothing here, backoff, requeued jobs first, adopted jobs, pause.
#include "server/scheduler.h"

#include <gtest/gtest.h>

namespace trainyard {
namespace {

using Time = Scheduler::Time;
using std::chrono::seconds;

Demand Slots(int n) { return {true, ResourcePool::Kind::kSlots, n}; }
Demand Gpus(int n) { return {true, ResourcePool::Kind::kGpus, n}; }
Demand Elsewhere(int n) { return {false, ResourcePool::Kind::kSlots, n}; }

const Time kT0 = Time{} + seconds(1000);

TEST(Scheduler, FirstComeFirstServedWithinSlots) {
  Scheduler s(4, 0);
  s.Enqueue("a", Slots(2));
  s.Enqueue("b", Slots(2));
  s.Enqueue("c", Slots(3));
  s.Enqueue("d", Slots(1));  // would fit nowhere either; waits behind c
  EXPECT_EQ(s.Schedule(kT0), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(s.free_slots(), 0);
  EXPECT_EQ(s.Held("a").slots, 2);
  s.Release("a");
  EXPECT_TRUE(s.Schedule(kT0).empty()) << "c needs 3 of the 2 free; d waits behind it";
  s.Release("b");
  EXPECT_EQ(s.Schedule(kT0), (std::vector<std::string>{"c", "d"}));
  EXPECT_EQ(s.size(), 0u);
  EXPECT_EQ(s.free_slots(), 0);
}

TEST(Scheduler, ResourcesDoNotBlockEachOther) {
  Scheduler s(2, 2);
  s.Enqueue("big-gpu", Gpus(3));  // more than there are free: waits
  s.Enqueue("cpu", Slots(2));
  s.Enqueue("slurm", Elsewhere(64));
  EXPECT_EQ(s.Schedule(kT0), (std::vector<std::string>{"cpu", "slurm"}));
  EXPECT_TRUE(s.queued("big-gpu"));
  EXPECT_TRUE(s.Held("slurm").gpus.empty());
  EXPECT_EQ(s.Held("slurm").slots, 0);
  s.Enqueue("gpu", Gpus(2));  // behind big-gpu
  EXPECT_TRUE(s.Schedule(kT0).empty());
  ASSERT_TRUE(s.Remove("big-gpu"));
  EXPECT_FALSE(s.Remove("big-gpu"));
  EXPECT_EQ(s.Schedule(kT0), std::vector<std::string>{"gpu"});
  EXPECT_EQ(s.Held("gpu").gpus, (std::vector<int>{0, 1}));
}

TEST(Scheduler, ABackingOffJobTakesNothingAndBlocksNobody) {
  Scheduler s(2, 0);
  s.Enqueue("retry", Slots(2), kT0 + seconds(4), /*ahead=*/true);
  s.Enqueue("next", Slots(2));
  EXPECT_EQ(s.Schedule(kT0), std::vector<std::string>{"next"});
  s.Release("next");
  EXPECT_TRUE(s.Schedule(kT0 + seconds(3)).empty());
  EXPECT_EQ(s.Schedule(kT0 + seconds(4)), std::vector<std::string>{"retry"});
}

TEST(Scheduler, ARequeuedJobGoesBeforeJobsThatHaveNotStarted) {
  Scheduler s(2, 0);
  s.Enqueue("first", Slots(2));
  EXPECT_EQ(s.Schedule(kT0), std::vector<std::string>{"first"});
  s.Enqueue("waiting", Slots(2));
  s.Release("first");
  s.Enqueue("first", Slots(2), Time{}, /*ahead=*/true);  // failed: resumes first
  EXPECT_EQ(s.Schedule(kT0), std::vector<std::string>{"first"});
  EXPECT_TRUE(s.queued("waiting"));
}

TEST(Scheduler, AdoptedJobsHoldWhatTheyRunOn) {
  Scheduler s(2, 1);
  s.HoldAdopted("cpu", Slots(3));  // over-committed until its ranks end
  EXPECT_EQ(s.free_slots(), -1);
  s.HoldAdopted("gpu", Gpus(2));  // as many GPUs as there are
  EXPECT_EQ(s.Held("gpu").gpus, std::vector<int>{0});
  s.Enqueue("next", Slots(1));
  EXPECT_TRUE(s.Schedule(kT0).empty());
  s.Release("cpu");
  EXPECT_EQ(s.Schedule(kT0), std::vector<std::string>{"next"});
  s.Release("gpu");
  EXPECT_EQ(s.free_gpus(), 1);
}

TEST(Scheduler, NothingStartsOncePaused) {
  Scheduler s(2, 0);
  s.Enqueue("a", Slots(1));
  s.Pause();
  EXPECT_TRUE(s.Schedule(kT0).empty());
  EXPECT_TRUE(s.queued("a"));
}

}  // namespace
}  // namespace trainyard
