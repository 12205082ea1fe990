// The searchers against what they promise: a grid's every combination, a
// random search's ranges and reproducibility, and ASHA's rungs and cuts
// checked against a float64 percentile computed here and against the
// losses of a simulated sweep.
#include "server/sweeps/searcher.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <set>

namespace trainyard {
namespace {

SweepSpec Sweep(SweepSearcher::Kind kind, int max_trials) {
  SweepSpec s;
  s.max_steps = 450;
  s.searcher.kind = kind;
  s.searcher.reduction_factor = 3;
  s.searcher.min_steps = 50;
  s.max_trials = max_trials;
  s.seed = 11;
  SweepParameter lr{"optimizer.lr", SweepParameter::Kind::kLogUniform, {}, 1e-4, 1e-1};
  SweepParameter bs{"data.batch_size", SweepParameter::Kind::kChoice, {"16", "32", "64"}, 0, 0};
  SweepParameter seed{"seed", SweepParameter::Kind::kInt, {}, 1, 4};
  s.parameters = {bs, seed};
  if (kind != SweepSearcher::Kind::kGrid) s.parameters.push_back(lr);
  return s;
}

TEST(Searcher, AGridGivesEveryCombinationOnceLastParameterFastest) {
  auto grid = MakeSearcher(Sweep(SweepSearcher::Kind::kGrid, 0));
  std::vector<std::vector<std::string>> got;
  while (auto t = grid->Next()) {
    EXPECT_EQ(t->number, static_cast<int>(got.size()));
    got.push_back(t->values);
  }
  ASSERT_EQ(got.size(), 12u);
  EXPECT_EQ(got[0], (std::vector<std::string>{"16", "1"}));
  EXPECT_EQ(got[1], (std::vector<std::string>{"16", "2"}));
  EXPECT_EQ(got[4], (std::vector<std::string>{"32", "1"}));
  EXPECT_EQ(got[11], (std::vector<std::string>{"64", "4"}));
  EXPECT_EQ(std::set<std::vector<std::string>>(got.begin(), got.end()).size(), 12u);
  auto capped = MakeSearcher(Sweep(SweepSearcher::Kind::kGrid, 5));
  int n = 0;
  while (capped->Next()) ++n;
  EXPECT_EQ(n, 5);
  EXPECT_EQ(grid->OnMetric(0, 450, 1.0), Searcher::Verdict::kContinue) << "a grid stops nothing";
}

TEST(Searcher, RandomValuesStayInTheirRangesAndDependOnlyOnSeedAndNumber) {
  const SweepSpec s = Sweep(SweepSearcher::Kind::kRandom, 4000);
  auto random = MakeSearcher(s);
  std::vector<double> logs;
  std::set<std::string> seeds, sizes;
  while (auto t = random->Next()) {
    sizes.insert(t->values[0]);
    seeds.insert(t->values[1]);
    const double lr = std::stod(t->values[2]);
    ASSERT_GE(lr, 1e-4);
    ASSERT_LE(lr, 1e-1);
    logs.push_back(std::log10(lr));
    EXPECT_EQ(t->values[2], DrawValue(s.parameters[2], s.seed, t->number, 2)) << "trial " << t->number;
  }
  EXPECT_EQ(random->started(), 4000);
  EXPECT_EQ(sizes, (std::set<std::string>{"16", "32", "64"}));
  EXPECT_EQ(seeds, (std::set<std::string>{"1", "2", "3", "4"}));
  // Log-uniform: log10(lr) uniform on [-4, -1], mean -2.5, each third a third.
  double mean = 0;
  for (double l : logs) mean += l / static_cast<double>(logs.size());
  EXPECT_NEAR(mean, -2.5, 0.05);
  const auto low_third = std::count_if(logs.begin(), logs.end(), [](double l) { return l < -3; });
  EXPECT_NEAR(static_cast<double>(low_third) / static_cast<double>(logs.size()), 1.0 / 3, 0.03);
  EXPECT_NE(DrawValue(s.parameters[2], s.seed, 0, 2), DrawValue(s.parameters[2], s.seed + 1, 0, 2));
}

// numpy.percentile(values, q) with linear interpolation, in float64.
double Percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double at = q / 100 * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<size_t>(at);
  const size_t hi = std::min(v.size() - 1, lo + 1);
  return v[lo] + (at - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

TEST(Searcher, AshaRungsAndItsCutMatchThePercentile) {
  EXPECT_EQ(AshaRungs(50, 3, 450), (std::vector<int64_t>{50, 150}));
  EXPECT_EQ(AshaRungs(10, 2, 100), (std::vector<int64_t>{10, 20, 40, 80}));
  EXPECT_TRUE(AshaPromotes({}, 5.0, 3)) << "the first at a rung goes on";
  const std::vector<std::vector<double>> before = {{1.0}, {1.0, 2.0}, {0.5, 0.9, 3.0, 2.2, 1.7}, {4, 4, 4}};
  for (const auto& b : before) {
    for (double v : {0.1, 0.95, 1.0, 1.2, 2.0, 4.0, 9.0}) {
      // The cut over the values before it, not with its own among them.
      EXPECT_EQ(AshaPromotes(b, v, 3), v <= Percentile(b, 100.0 / 3)) << "v " << v << " after " << b.size();
    }
  }
}

// Ray Tune's asynchronous successive halving as its _Bracket writes it
// (python/ray/tune/schedulers/async_hyperband.py: on_result and cutoff),
// in float64, maximizing a reward as Ray does: rungs from the highest
// milestone down; a result decides at the highest milestone its iteration
// reached that the trial has no value at yet: cutoff = nanpercentile of the
// rewards recorded there, (1 - 1/rf) * 100; STOP when the reward is below
// it; then the reward is recorded there.
class RayBracket {
 public:
  RayBracket(int64_t min_t, int64_t max_t, int rf) : rf_(rf) {
    for (int64_t m = min_t; m < max_t; m *= rf) milestones_.insert(milestones_.begin(), m);
    recorded_.resize(milestones_.size());
  }
  // true: CONTINUE, false: STOP.
  bool OnResult(int trial, int64_t iteration, double reward) {
    for (size_t i = 0; i < milestones_.size(); ++i) {
      if (iteration >= milestones_[i] && recorded_[i].count(trial)) break;
      if (iteration < milestones_[i] || recorded_[i].count(trial)) continue;
      bool go_on = true;
      if (!recorded_[i].empty()) {
        std::vector<double> rewards;
        for (const auto& [t, r] : recorded_[i]) rewards.push_back(r);
        go_on = !(reward < NumpyPercentile(rewards, (1.0 - 1.0 / rf_) * 100.0));
      }
      recorded_[i][trial] = reward;
      return go_on;
    }
    return true;
  }

 private:
  static double NumpyPercentile(std::vector<double> v, double q) {  // method="linear"
    std::sort(v.begin(), v.end());
    const double rank = q / 100.0 * static_cast<double>(v.size() - 1);
    const size_t below = static_cast<size_t>(rank);
    const size_t above = std::min(below + 1, v.size() - 1);
    return v[below] + (rank - static_cast<double>(below)) * (v[above] - v[below]);
  }
  const int rf_;
  std::vector<int64_t> milestones_;
  std::vector<std::map<int, double>> recorded_;
};

// A fixed sequence of reports, replayed through our searcher (the loss, to
// minimize) and through Ray's rule (the reward: its negation): every
// decision equal. The trials report at each rung's step, in an order
// drawn from the seed, so that later trials meet rungs others reached
// first; sequences where the rule that counts a trial's own value among
// those before it decides otherwise are among them.
TEST(Searcher, AshaDecidesAsRayTunesBracketOnReplayedSequences) {
  int differs_from_self_inclusive = 0, decisions = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    for (int rf : {2, 3, 4}) {
      SweepSpec s = Sweep(SweepSearcher::Kind::kAsha, 30);
      s.searcher.reduction_factor = rf;
      s.searcher.min_steps = 10;
      s.max_steps = 10 * rf * rf * rf;
      auto ours = MakeSearcher(s);
      RayBracket ray(10, s.max_steps, rf);
      const std::vector<int64_t> rungs = AshaRungs(10, rf, s.max_steps);
      std::mt19937_64 gen(seed * 7919 + rf);
      std::uniform_real_distribution<double> u(0.0, 1.0);
      // (trial, rung index) reports, each trial's rungs in order, trials interleaved.
      std::vector<int> next(30, 0);
      std::vector<bool> stopped(30, false);
      std::map<int, std::vector<double>> recorded_self;  // the self-inclusive rule, for contrast
      for (int round = 0; round < 30 * static_cast<int>(rungs.size()); ++round) {
        const int trial = static_cast<int>(gen() % 30);
        if (stopped[trial] || next[trial] >= static_cast<int>(rungs.size())) continue;
        const int rung = next[trial]++;
        const double loss = u(gen);
        std::vector<double>& before = recorded_self[rung];
        std::vector<double> with_own = before;
        with_own.push_back(loss);
        const bool self_inclusive = loss <= Percentile(with_own, 100.0 / rf);
        const bool ray_goes_on = ray.OnResult(trial, rungs[rung], -loss);
        const Searcher::Verdict v = ours->OnMetric(trial, rungs[rung], loss);
        const bool ours_goes_on = v != Searcher::Verdict::kStop;
        ASSERT_EQ(ours_goes_on, ray_goes_on) << "seed " << seed << " rf " << rf << " trial " << trial << " rung "
                                             << rungs[rung] << " loss " << loss << " after " << before.size();
        differs_from_self_inclusive += self_inclusive != ray_goes_on;
        ++decisions;
        before.push_back(loss);
        if (!ours_goes_on) stopped[trial] = true;
      }
    }
  }
  EXPECT_GT(decisions, 2000);
  EXPECT_GT(differs_from_self_inclusive, 0) << "the sequences include ones where the two rules differ";
  std::printf("ASHA replay: %d decisions, %d of them where the self-inclusive rule differs\n", decisions,
              differs_from_self_inclusive);
}

TEST(Searcher, AshaStopsTheWorstAtEachRungOfASimulatedSweep) {
  SweepSpec s = Sweep(SweepSearcher::Kind::kAsha, 12);
  auto asha = MakeSearcher(s);
  // Trial k's loss at step t: a curve whose order between trials never
  // changes (final loss grows with (k * 7) % 12), reported every 10 steps.
  auto loss = [](int k, int64_t step) { return (1.0 + ((k * 7) % 12) / 10.0) * (1.0 + 100.0 / (step + 10)); };
  std::vector<int64_t> stopped_at(12, -1);
  std::vector<int> promotions(12, 0);
  // Trials start in order and run in lockstep, four at a time.
  for (int wave = 0; wave < 3; ++wave) {
    std::vector<int> running;
    for (int i = 0; i < 4; ++i) running.push_back(asha->Next()->number);
    for (int64_t step = 10; step <= 450; step += 10) {
      for (int k : running) {
        if (stopped_at[k] >= 0) continue;
        switch (asha->OnMetric(k, step, loss(k, step))) {
          case Searcher::Verdict::kStop: stopped_at[k] = step; break;
          case Searcher::Verdict::kPromote: ++promotions[k]; break;
          case Searcher::Verdict::kContinue: break;
        }
      }
    }
  }
  EXPECT_FALSE(asha->Next()) << "12 trials";
  // At every rung, each trial stopped there was worse (at that rung) than
  // the 1/3 quantile of the ones that reached it before it.
  int finished = 0;
  for (int k = 0; k < 12; ++k) {
    if (stopped_at[k] < 0) {
      ++finished;
      EXPECT_EQ(promotions[k], 2) << "trial " << k << " passed both rungs";
    } else {
      EXPECT_TRUE(stopped_at[k] == 50 || stopped_at[k] == 150) << stopped_at[k];
    }
  }
  EXPECT_GE(finished, 1);
  EXPECT_LE(finished, 5) << "most trials are stopped early";
  // The best trial (final loss order: k with (k*7)%12 == 0, trial 0) always finishes.
  EXPECT_EQ(stopped_at[0], -1);
  // The worst of the first wave at rung 50 (trial with the largest (k*7)%12 among 0..3: trial 3, 9) stops.
  EXPECT_EQ(stopped_at[3], 50);
}

}  // namespace
}  // namespace trainyard
