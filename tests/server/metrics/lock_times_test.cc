// LockTimes: each wait and hold in its bucket (bounds inclusive), the sums,
// and what a ManagerLock records (one wait and one hold per lock taken).
#include "server/metrics/lock_times.h"

#include <gtest/gtest.h>

#include "server/jobs/manager_lock.h"

namespace trainyard {
namespace {

TEST(LockTimes, EachDurationInItsBucket) {
  LockTimes t;
  t.Record(0.0001, 0.003);  // waited: the first bucket (<= 0.1 ms); held: <= 5 ms
  t.Record(0.2, 2.0);       // <= 250 ms; over every bound: +Inf only
  const LockTimes::Histogram waited = t.waited(), held = t.held();
  ASSERT_EQ(waited.cumulative.size(), LockTimes::kBuckets.size() + 1);
  EXPECT_EQ(waited.cumulative[0], 1u);
  EXPECT_EQ(waited.cumulative[8], 1u);  // <= 100 ms
  EXPECT_EQ(waited.cumulative[9], 2u);  // <= 250 ms
  EXPECT_EQ(held.cumulative[3], 0u);    // <= 2.5 ms
  EXPECT_EQ(held.cumulative[4], 1u);    // <= 5 ms
  EXPECT_EQ(held.cumulative[11], 1u);   // <= 1 s
  EXPECT_EQ(held.cumulative.back(), 2u);
  EXPECT_NEAR(waited.sum, 0.2001, 1e-9);
  EXPECT_NEAR(held.sum, 2.003, 1e-9);
}

TEST(LockTimes, AManagerLockRecordsItsHold) {
  absl::Mutex mu;
  const uint64_t before = CoordinatorLockTimes().held().cumulative.back();
  const double sum_before = CoordinatorLockTimes().held().sum;
  {
    ManagerLock lock(&mu);
    absl::SleepFor(absl::Milliseconds(20));  // a hold of at least 20 ms to find in the buckets
  }
  const LockTimes::Histogram held = CoordinatorLockTimes().held();
  EXPECT_EQ(held.cumulative.back(), before + 1);
  EXPECT_GE(held.sum - sum_before, 0.02);
}

}  // namespace
}  // namespace trainyard
