#include "server/sweeps/searcher.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"
#include "common/splitmix.h"
#include "server/sweeps/pbt.h"

namespace trainyard {
namespace {

// A uniform double in [0, 1) from 64 bits.
double Unit(uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1.0p-53; }

class GridSearcher final : public Searcher {
 public:
  explicit GridSearcher(const SweepSpec& s) : parameters_(s.parameters) {
    const int64_t all = GridSize(parameters_);
    limit_ = s.max_trials > 0 ? std::min<int64_t>(s.max_trials, all) : all;
  }
  std::optional<TrialPlan> Next() override {
    if (started_ >= limit_) return std::nullopt;
    TrialPlan t{started_, std::vector<std::string>(parameters_.size())};
    int64_t rest = started_;
    for (size_t i = parameters_.size(); i-- > 0;) {  // the last parameter fastest
      const SweepParameter& p = parameters_[i];
      if (p.kind == SweepParameter::Kind::kChoice) {
        const auto n = static_cast<int64_t>(p.choices.size());
        t.values[i] = p.choices[rest % n];
        rest /= n;
      } else {  // an integer range (ParseSweepSpec refuses real ranges in a grid)
        const auto n = static_cast<int64_t>(p.high - p.low) + 1;
        t.values[i] = absl::StrFormat("%d", static_cast<int64_t>(p.low) + rest % n);
        rest /= n;
      }
    }
    ++started_;
    return t;
  }
  bool exhausted() const override { return started_ >= limit_; }

 private:
  std::vector<SweepParameter> parameters_;
  int64_t limit_ = 0;
};

class RandomSearcher : public Searcher {
 public:
  explicit RandomSearcher(const SweepSpec& s) : parameters_(s.parameters), seed_(s.seed), limit_(s.max_trials) {}
  std::optional<TrialPlan> Next() override {
    if (started_ >= limit_) return std::nullopt;
    TrialPlan t{started_, {}};
    for (size_t i = 0; i < parameters_.size(); ++i) {
      t.values.push_back(DrawValue(parameters_[i], seed_, started_, static_cast<int>(i)));
    }
    ++started_;
    return t;
  }
  bool exhausted() const override { return started_ >= limit_; }

 private:
  std::vector<SweepParameter> parameters_;
  uint64_t seed_;
  int limit_;
};

class AshaSearcher final : public RandomSearcher {
 public:
  explicit AshaSearcher(const SweepSpec& s)
      : RandomSearcher(s),
        eta_(s.searcher.reduction_factor),
        rungs_(AshaRungs(s.searcher.min_steps, s.searcher.reduction_factor, s.max_steps)) {}

  Verdict OnMetric(int number, int64_t step, double value) override {
    int& next = next_rung_[number];  // the first rung this trial has not passed
    Verdict v = Verdict::kContinue;
    while (next < static_cast<int>(rungs_.size()) && step >= rungs_[next]) {
      std::vector<double>& recorded = recorded_[next];
      const bool on = AshaPromotes(recorded, value, eta_);
      recorded.push_back(value);
      ++next;
      if (!on) return Verdict::kStop;
      v = Verdict::kPromote;
    }
    return v;
  }

 private:
  const int eta_;
  const std::vector<int64_t> rungs_;
  std::map<int, int> next_rung_;                 // trial -> its next rung
  std::map<int, std::vector<double>> recorded_;  // rung -> the values that reached it
};

}  // namespace

Searcher::Verdict Searcher::OnMetric(int, int64_t, double) { return Verdict::kContinue; }
std::optional<TrialPlan> Searcher::Exploited(int, int, const std::vector<std::string>&) { return std::nullopt; }

std::string DrawValue(const SweepParameter& p, uint64_t seed, int number, int index) {
  const uint64_t bits =
      SplitMix64(SplitMix64(SplitMix64(seed) ^ static_cast<uint64_t>(number)) ^ static_cast<uint64_t>(index));
  const double u = Unit(bits);
  switch (p.kind) {
    case SweepParameter::Kind::kChoice:
      return p.choices[std::min(p.choices.size() - 1, static_cast<size_t>(u * static_cast<double>(p.choices.size())))];
    case SweepParameter::Kind::kUniform: return absl::StrFormat("%.6g", p.low + u * (p.high - p.low));
    case SweepParameter::Kind::kLogUniform:
      return absl::StrFormat("%.6g", std::exp(std::log(p.low) + u * (std::log(p.high) - std::log(p.low))));
    case SweepParameter::Kind::kInt: {
      const auto n = static_cast<int64_t>(p.high - p.low) + 1;
      return absl::StrFormat("%d", static_cast<int64_t>(p.low) +
                                       std::min<int64_t>(n - 1, static_cast<int64_t>(u * static_cast<double>(n))));
    }
  }
  return "";
}

std::vector<int64_t> AshaRungs(int64_t min_steps, int reduction_factor, int64_t max_steps) {
  std::vector<int64_t> out;
  for (int64_t r = min_steps; r > 0 && r < max_steps; r *= reduction_factor) out.push_back(r);
  return out;
}

bool AshaPromotes(const std::vector<double>& recorded_before, double value, int reduction_factor) {
  // The cut is over the values recorded before this one only (the trial's
  // own is recorded after the decision), as Ray Tune's _Bracket.cutoff.
  if (recorded_before.empty()) return true;  // the first at a rung goes on
  std::vector<double> before = recorded_before;
  std::sort(before.begin(), before.end());
  // Their (100 / reduction_factor)-th percentile, linearly interpolated (numpy's).
  const double at = (static_cast<double>(before.size()) - 1) / reduction_factor;
  const auto lo = static_cast<size_t>(std::floor(at));
  const size_t hi = std::min(before.size() - 1, lo + 1);
  const double cutoff = before[lo] + (at - static_cast<double>(lo)) * (before[hi] - before[lo]);
  return value <= cutoff;
}

std::unique_ptr<Searcher> MakeSearcher(const SweepSpec& sweep) {
  switch (sweep.searcher.kind) {
    case SweepSearcher::Kind::kGrid: return std::make_unique<GridSearcher>(sweep);
    case SweepSearcher::Kind::kRandom: return std::make_unique<RandomSearcher>(sweep);
    case SweepSearcher::Kind::kAsha: return std::make_unique<AshaSearcher>(sweep);
    case SweepSearcher::Kind::kPbt: return MakePbtSearcher(sweep);
  }
  return nullptr;
}

}  // namespace trainyard
