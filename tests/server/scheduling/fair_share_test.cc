// FairShare: usage accrues while ranks run and halves every half-life.
#include "server/scheduling/fair_share.h"

#include <gtest/gtest.h>

#include <cmath>

namespace trainyard {
namespace {

using std::chrono::hours;
using std::chrono::seconds;

TEST(FairShareTest, AnOwnerNeverSeenHasNoUsage) {
  FairShare f(hours(1));
  EXPECT_EQ(f.UsageAt("alice", FairShare::Time{} + hours(5)), 0);
  EXPECT_TRUE(f.Usage(FairShare::Time{}).empty());
}

TEST(FairShareTest, UsageAccruesWhileRanksRunAndDecaysAfter) {
  const FairShare::Time t0{hours(100)};
  const double h = 3600;
  FairShare f(hours(1));
  f.Started("alice", 2, t0);
  // Exactly: 2 ranks · h/ln2 · (1 - 2^(-t/h)); after one half-life, half of that bound.
  const double after_one = 2 * (h / std::log(2.0)) * 0.5;
  EXPECT_NEAR(f.UsageAt("alice", t0 + hours(1)), after_one, 1e-6);
  // Nearly 2 rank-seconds per second at first.
  EXPECT_NEAR(f.UsageAt("alice", t0 + seconds(10)), 20, 0.1);
  f.Stopped("alice", 2, t0 + hours(1));
  EXPECT_NEAR(f.UsageAt("alice", t0 + hours(2)), after_one / 2, 1e-6);  // halves each half-life
  EXPECT_NEAR(f.Usage(t0 + hours(2)).at("alice"), after_one / 2, 1e-6);
  EXPECT_EQ(f.UsageAt("bob", t0 + hours(2)), 0);
}

TEST(FairShareTest, AShorterHalfLifeForgetsFaster) {
  const FairShare::Time t0{hours(100)};
  FairShare slow(hours(24)), fast(hours(1));
  for (FairShare* f : {&slow, &fast}) {
    f->Started("alice", 1, t0);
    f->Stopped("alice", 1, t0 + hours(1));
  }
  EXPECT_LT(fast.UsageAt("alice", t0 + hours(10)), slow.UsageAt("alice", t0 + hours(10)) / 10);
  fast.set_half_life(hours(24));  // a policy reload: usage so far stays
  EXPECT_GT(fast.UsageAt("alice", t0 + hours(10)), 0);
}

}  // namespace
}  // namespace trainyard
