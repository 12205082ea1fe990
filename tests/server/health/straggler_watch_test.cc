// StragglerWatch on a simulated clock: a rank whose own work stays 3x the
// median of the others' for 10 s is named, once; not before, not below 3x,
// not when it recovers within the window.
#include "server/health/straggler_watch.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

namespace trainyard {
namespace {

using std::chrono::milliseconds;
using Time = StragglerWatch::Time;
const Time kT0 = Time{} + std::chrono::hours(1);

// Steps every 100 ms from `from` for `ms`: rank r's own work is seconds[r];
// looks at the ranks after each step and returns the first verdict's time.
struct Steps {
  StragglerWatch watch;
  Time now = kT0;
  std::optional<StragglerWatch::Verdict> verdict;
  Time verdict_at{};
  void Take(int ms, const std::vector<double>& seconds) {
    for (int t = 0; t < ms; t += 100) {
      now += milliseconds(100);
      std::vector<int32_t> ranks;
      for (int32_t r = 0; r < static_cast<int32_t>(seconds.size()); ++r) {
        watch.Observe(r, now, seconds[r]);
        ranks.push_back(r);
      }
      if (auto v = watch.Look(ranks, now); v && !verdict) {
        verdict = v;
        verdict_at = now;
      }
    }
  }
};

TEST(StragglerWatch, ARankThreeTimesSlowerForTenSecondsIsNamedOnce) {
  Steps run;
  run.Take(12000, {0.010, 0.011, 0.035});
  ASSERT_TRUE(run.verdict);
  EXPECT_EQ(run.verdict->rank, 2);
  // Slow from its third step (the fewest compared), then 10 s more.
  EXPECT_GE(run.verdict_at - kT0, std::chrono::seconds(10));
  EXPECT_LE(run.verdict_at - kT0, std::chrono::milliseconds(10500));
  EXPECT_NEAR(run.verdict->others_seconds, 0.0105, 1e-9);  // the median of ranks 0 and 1
  EXPECT_EQ(run.verdict->Describe().substr(0, 53), "its own work per step (forward and loss) took 3.3x th");
  // Once: not again while it stays slow, until it is forgotten (replaced).
  EXPECT_FALSE(run.watch.Look({0, 1, 2}, run.now));
  run.watch.Forget(2);
  run.verdict.reset();
  run.Take(11000, {0.010, 0.011, 0.035});
  EXPECT_TRUE(run.verdict);
}

TEST(StragglerWatch, BelowThreeTimesOrRecoveringWithinTheWindowIsNotSlow) {
  Steps below;
  below.Take(30000, {0.010, 0.010, 0.028});
  EXPECT_FALSE(below.verdict);

  // The window's mean follows: 4 s slow are below 3x again 8 s in.
  Steps recovers;
  recovers.Take(4000, {0.010, 0.010, 0.050});
  recovers.Take(10000, {0.010, 0.010, 0.010});
  recovers.Take(4000, {0.010, 0.010, 0.050});
  EXPECT_FALSE(recovers.verdict);
}

TEST(StragglerWatch, TwoRanksCompareWithEachOtherAndOneRankWithNobody) {
  Steps two;
  two.Take(12000, {0.040, 0.010});
  ASSERT_TRUE(two.verdict);
  EXPECT_EQ(two.verdict->rank, 0);

  Steps one;
  one.Take(12000, {0.040});
  EXPECT_FALSE(one.verdict);

  // A rank without steps in the window is not compared (nor named).
  StragglerWatch watch;
  for (int i = 1; i <= 120; ++i) watch.Observe(0, kT0 + milliseconds(100 * i), 0.01);
  EXPECT_FALSE(watch.Look({0, 1}, kT0 + milliseconds(12000)));
}

// The others' median against a sort of the others alone, over odd and even
// counts with ties: the one sort of every rank's mean gives the same.
TEST(StragglerWatch, TheOthersMedianIsTheirOwnWithTiesAndAnyCount) {
  std::mt19937 rng(7);
  for (int n : {2, 3, 4, 5, 8, 101, 1000}) {
    std::vector<double> seconds(static_cast<size_t>(n));
    for (double& s : seconds) s = 0.010 + 0.001 * static_cast<double>(rng() % 5);  // ties
    const int32_t slow = static_cast<int32_t>(rng() % static_cast<uint32_t>(n));
    seconds[static_cast<size_t>(slow)] = 0.2;
    Steps run;
    run.Take(11000, seconds);
    ASSERT_TRUE(run.verdict) << n << " ranks";
    EXPECT_EQ(run.verdict->rank, slow);
    std::vector<double> others = seconds;
    others.erase(others.begin() + slow);
    std::sort(others.begin(), others.end());
    const size_t mid = others.size() / 2;
    const double median = others.size() % 2 == 1 ? others[mid] : (others[mid - 1] + others[mid]) / 2;
    EXPECT_NEAR(run.verdict->others_seconds, median, 1e-12) << n << " ranks";
  }
}

}  // namespace
}  // namespace trainyard
