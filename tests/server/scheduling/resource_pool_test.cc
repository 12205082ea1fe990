// ResourcePool: slots and GPU ids taken and given back; a job found running
// after a coordinator restart holds what is there.
#include "server/scheduling/resource_pool.h"

#include <gtest/gtest.h>

namespace trainyard {
namespace {

using Kind = ResourcePool::Kind;

TEST(ResourcePool, SlotsAndGpusAreTakenAndGivenBack) {
  ResourcePool pool(4, 2);
  EXPECT_TRUE(pool.Fits(Kind::kSlots, 4));
  EXPECT_FALSE(pool.Fits(Kind::kSlots, 5));
  ResourcePool::Held cpu = pool.Take(Kind::kSlots, 3);
  EXPECT_EQ(cpu.slots, 3);
  EXPECT_EQ(pool.free_slots(), 1);
  EXPECT_FALSE(pool.Fits(Kind::kSlots, 2));
  // GPUs are a resource of their own, one per rank, not shared by default.
  ResourcePool::Held gpu = pool.Take(Kind::kGpus, 2);
  EXPECT_EQ(gpu.gpus, (std::vector<int>{0, 1}));
  EXPECT_FALSE(pool.Fits(Kind::kGpus, 1));
  EXPECT_TRUE(pool.Fits(Kind::kSlots, 1));
  pool.Release(&gpu);
  EXPECT_TRUE(gpu.gpus.empty());
  EXPECT_EQ(pool.free_gpus(), 2);
  pool.Release(&cpu);
  EXPECT_EQ(cpu.slots, 0);
  EXPECT_EQ(pool.free_slots(), 4);
  pool.Release(&cpu);  // releasing an empty holding changes nothing
  EXPECT_EQ(pool.free_slots(), 4);
}

TEST(ResourcePool, APartialTakeHoldsWhatIsThere) {
  ResourcePool pool(2, 3);
  ResourcePool::Held first = pool.Take(Kind::kGpus, 2);
  ResourcePool::Held adopted = pool.Take(Kind::kGpus, 4, /*partial=*/true);
  EXPECT_EQ(adopted.gpus, (std::vector<int>{2}));
  EXPECT_EQ(pool.free_gpus(), 0);
  pool.Release(&first);
  pool.Release(&adopted);
  EXPECT_EQ(pool.free_gpus(), 3);
}

// --ranks-per-gpu 2: each GPU is taken by two ranks, those of one job first.
TEST(ResourcePool, RanksShareAGpuUpToTheirNumberPerGpu) {
  ResourcePool pool(0, 2, /*ranks_per_gpu=*/2);
  EXPECT_EQ(pool.free_gpus(), 4);
  ResourcePool::Held a = pool.Take(Kind::kGpus, 3);
  EXPECT_EQ(a.gpus, (std::vector<int>{0, 0, 1}));
  EXPECT_TRUE(pool.Fits(Kind::kGpus, 1));
  EXPECT_FALSE(pool.Fits(Kind::kGpus, 2));
  ResourcePool::Held b = pool.Take(Kind::kGpus, 1);
  EXPECT_EQ(b.gpus, (std::vector<int>{1}));
  pool.Release(&a);
  EXPECT_EQ(pool.free_gpus(), 3);
  ResourcePool::Held c = pool.Take(Kind::kGpus, 2);
  EXPECT_EQ(c.gpus, (std::vector<int>{0, 0}));
}

}  // namespace
}  // namespace trainyard
