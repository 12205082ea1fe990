// PBT's rules alone: who is exploited and when, whose state it takes, and
// how the copy's values are explored.
#include "server/sweeps/pbt.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace trainyard {
namespace {

SweepSpec Population(int n, double quantile) {
  SweepSpec s;
  s.max_steps = 3000;
  s.max_trials = n;
  s.concurrency = n;
  s.seed = 3;
  s.searcher.kind = SweepSearcher::Kind::kPbt;
  s.searcher.perturbation_interval = 100;
  s.searcher.quantile = quantile;
  s.searcher.resample_probability = 0;
  s.parameters = {{"optimizer.lr", SweepParameter::Kind::kLogUniform, {}, 1e-5, 1e-1},
                  {"data.batch_size", SweepParameter::Kind::kChoice, {"16", "32", "64"}, 0, 0},
                  {"seed", SweepParameter::Kind::kInt, {}, 1, 100}};
  return s;
}

TEST(Pbt, TheWorstAtAnIntervalTakesTheStateOfTheBest) {
  auto pbt = MakeSearcher(Population(4, 0.25));
  for (int n = 0; n < 4; ++n) ASSERT_TRUE(pbt->Next().has_value());
  EXPECT_FALSE(pbt->Next().has_value()) << "a population of 4";
  EXPECT_TRUE(pbt->exhausted());
  using V = Searcher::Verdict;
  // First reports: nobody is checked before its first interval.
  for (int n = 0; n < 4; ++n) EXPECT_EQ(pbt->OnMetric(n, 10, 1.0 + n), V::kContinue);
  EXPECT_EQ(pbt->OnMetric(3, 99, 4.0), V::kContinue);
  // At step 100: trial 3 is the worst (4.0), trial 0 the best (1.0).
  EXPECT_EQ(pbt->OnMetric(0, 100, 1.0), V::kContinue) << "the best goes on";
  EXPECT_EQ(pbt->OnMetric(3, 100, 4.0), V::kExploit);
  EXPECT_EQ(pbt->exploit_source(), 0);
  EXPECT_EQ(pbt->OnMetric(3, 150, 0.1), V::kContinue) << "a replaced trial is no member";
  auto copy = pbt->Exploited(3, 0, {"0.001", "32", "50"});
  ASSERT_TRUE(copy.has_value());
  EXPECT_EQ(copy->number, 4);
  // The copy is a member, checked first at the interval after its first report.
  EXPECT_EQ(pbt->OnMetric(4, 151, 9.0), V::kContinue);
  EXPECT_EQ(pbt->OnMetric(1, 200, 2.0), V::kContinue);
  EXPECT_EQ(pbt->OnMetric(4, 200, 9.0), V::kExploit) << "now the worst of 0, 1, 2, 4";
}

TEST(Pbt, ExploringMovesEachValueByAFactorOrANeighbour) {
  const SweepSpec s = Population(4, 0.25);
  for (int number = 0; number < 50; ++number) {
    auto v = PbtExplore(s.parameters, {"0.001", "32", "50"}, 0, s.seed, number);
    const double lr = std::atof(v[0].c_str());
    EXPECT_TRUE(std::abs(lr - 0.0008) < 1e-9 || std::abs(lr - 0.0012) < 1e-9) << v[0];
    EXPECT_TRUE(v[1] == "16" || v[1] == "64") << v[1];
    EXPECT_TRUE(v[2] == "40" || v[2] == "60") << v[2];
    EXPECT_EQ(v, PbtExplore(s.parameters, {"0.001", "32", "50"}, 0, s.seed, number)) << "seeded";
  }
  // Kept in range; with resample_probability 1, drawn anew.
  auto edge = PbtExplore(s.parameters, {"0.1", "64", "100"}, 0, s.seed, 7);
  EXPECT_LE(std::atof(edge[0].c_str()), 0.1);
  EXPECT_LE(std::atoi(edge[2].c_str()), 100);
  auto fresh = PbtExplore(s.parameters, {"0.001", "32", "50"}, 1, s.seed, 7);
  EXPECT_GE(std::atof(fresh[0].c_str()), 1e-5);
  EXPECT_LE(std::atof(fresh[0].c_str()), 1e-1);
}

}  // namespace
}  // namespace trainyard
