// ElasticSizer: start sizes, shrink plans and growth, as pure functions.
#include "server/scheduling/elastic_sizer.h"

#include <gtest/gtest.h>

namespace trainyard {
namespace {

using Time = std::chrono::steady_clock::time_point;

ElasticJob Job(std::string id, int64_t priority, int started_s, int size, int min_size, int want) {
  return {std::move(id), priority, Time(std::chrono::seconds(started_s)), size, min_size, want};
}

TEST(ElasticSizerTest, AJobStartsWithTheLargestSizeThatFits) {
  EXPECT_EQ(StartSize(8, 2, [](int n) { return n <= 5; }), 5);
  EXPECT_EQ(StartSize(8, 2, [](int) { return true; }), 8);
  EXPECT_EQ(StartSize(8, 2, [](int n) { return n < 2; }), 0);   // not even its minimum
  EXPECT_EQ(StartSize(4, 4, [](int n) { return n == 4; }), 4);  // not elastic: all or nothing
}

TEST(ElasticSizerTest, ShrinksTakeTheLowestPriorityAndTheLatestStartedFirst) {
  std::vector<ElasticJob> c = {Job("a", 5, 10, 6, 2, 6), Job("b", 1, 10, 4, 1, 4), Job("c", 1, 20, 4, 2, 4)};
  // Priority 1 first; of those the one that started last (c): 2 of it, then 1 of b.
  const std::vector<ElasticResize> got = PlanShrinks(c, 3);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].id, "c");
  EXPECT_EQ(got[0].to, 2);
  EXPECT_EQ(got[1].id, "b");
  EXPECT_EQ(got[1].to, 3);
}

TEST(ElasticSizerTest, NoShrinkWhenShrinkingAllFreesTooLittle) {
  std::vector<ElasticJob> c = {Job("a", 0, 0, 4, 2, 4), Job("b", 0, 0, 3, 3, 3)};
  EXPECT_TRUE(PlanShrinks(c, 3).empty());
  // A shrink in progress counts from where it goes.
  c[0].shrink_to = 3;
  EXPECT_TRUE(PlanShrinks(c, 2).empty());
  const std::vector<ElasticResize> got = PlanShrinks(c, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].to, 2);
}

TEST(ElasticSizerTest, GrowthGoesToTheHighestPriorityFirstWithinQuota) {
  std::vector<ElasticJob> jobs = {Job("low", 0, 0, 2, 1, 6), Job("high", 9, 5, 1, 1, 4), Job("early", 9, 1, 3, 1, 4)};
  const auto quota = [](const ElasticJob& j, int more) { return j.id == "high" ? std::min(more, 1) : more; };
  // 5 free: early (priority 9, started first) +1, high +1 (its quota), low the last 3.
  const std::vector<ElasticResize> got = PlanGrowth(jobs, 5, quota);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].id, "early");
  EXPECT_EQ(got[0].to, 4);
  EXPECT_EQ(got[1].id, "high");
  EXPECT_EQ(got[1].to, 2);
  EXPECT_EQ(got[2].id, "low");
  EXPECT_EQ(got[2].to, 5);
  EXPECT_TRUE(PlanGrowth(jobs, 0, quota).empty());
}

}  // namespace
}  // namespace trainyard
