#include "server/sweeps/pbt.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "common/splitmix.h"

namespace trainyard {
namespace {

double Unit(uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1.0p-53; }

class PbtSearcher final : public Searcher {
 public:
  explicit PbtSearcher(const SweepSpec& s)
      : parameters_(s.parameters),
        seed_(s.seed),
        population_(s.max_trials),
        interval_(s.searcher.perturbation_interval),
        quantile_(s.searcher.quantile),
        resample_(s.searcher.resample_probability) {}

  std::optional<TrialPlan> Next() override {
    if (started_ >= population_) return std::nullopt;
    TrialPlan t{started_, {}};
    for (size_t i = 0; i < parameters_.size(); ++i) {
      t.values.push_back(DrawValue(parameters_[i], seed_, started_, static_cast<int>(i)));
    }
    ++started_;
    return t;
  }
  bool exhausted() const override { return started_ >= population_; }

  Verdict OnMetric(int number, int64_t step, double value) override {
    if (replaced_.count(number) > 0) return Verdict::kContinue;
    Member& m = members_[number];
    m.value = value;
    m.reported = true;
    if (m.next_check == 0) m.next_check = (step / interval_ + 1) * interval_;
    if (step < m.next_check) return Verdict::kContinue;
    m.next_check = (step / interval_ + 1) * interval_;
    std::vector<std::pair<double, int>> ranked;
    for (const auto& [n, member] : members_) {
      if (member.reported) ranked.push_back({member.value, n});
    }
    if (ranked.size() < 2) return Verdict::kContinue;
    std::sort(ranked.begin(), ranked.end());
    const size_t k = std::max<size_t>(1, static_cast<size_t>(std::floor(ranked.size() * quantile_)));
    auto in = [&](size_t from, size_t to) {
      for (size_t i = from; i < to; ++i) {
        if (ranked[i].second == number) return true;
      }
      return false;
    };
    if (!in(ranked.size() - k, ranked.size()) || in(0, k)) return Verdict::kContinue;
    const uint64_t bits = SplitMix64(SplitMix64(seed_ ^ 0x9b7) ^ static_cast<uint64_t>(number * 1000003 + step));
    exploit_source_ = ranked[bits % k].second;
    members_.erase(number);
    replaced_.insert(number);
    return Verdict::kExploit;
  }

  std::optional<TrialPlan> Exploited(int, int, const std::vector<std::string>& source_values) override {
    TrialPlan t{started_, PbtExplore(parameters_, source_values, resample_, seed_, started_)};
    ++started_;
    return t;
  }

 private:
  struct Member {
    double value = 0;
    bool reported = false;
    int64_t next_check = 0;  // 0: set at its first report
  };
  const std::vector<SweepParameter> parameters_;
  const uint64_t seed_;
  const int population_;
  const int64_t interval_;
  const double quantile_, resample_;
  std::map<int, Member> members_;
  std::set<int> replaced_;
};

}  // namespace

std::vector<std::string> PbtExplore(const std::vector<SweepParameter>& parameters,
                                    const std::vector<std::string>& values, double resample_probability, uint64_t seed,
                                    int number) {
  std::vector<std::string> out = values;
  for (size_t i = 0; i < parameters.size() && i < values.size(); ++i) {
    const SweepParameter& p = parameters[i];
    const uint64_t bits = SplitMix64(SplitMix64(SplitMix64(seed ^ 0x5eed) ^ static_cast<uint64_t>(number)) ^ i);
    const double u = Unit(bits), v = Unit(SplitMix64(bits));
    if (u < resample_probability) {
      out[i] = DrawValue(p, seed ^ 0x7e5a, number, static_cast<int>(i));
      continue;
    }
    const double factor = v < 0.5 ? 0.8 : 1.2;
    switch (p.kind) {
      case SweepParameter::Kind::kChoice: {
        auto at = std::find(p.choices.begin(), p.choices.end(), values[i]);
        if (at == p.choices.end()) break;
        const auto idx = static_cast<int64_t>(at - p.choices.begin());
        const int64_t moved = std::clamp<int64_t>(idx + (v < 0.5 ? -1 : 1), 0, p.choices.size() - 1);
        out[i] = p.choices[moved];
        break;
      }
      case SweepParameter::Kind::kUniform:
      case SweepParameter::Kind::kLogUniform: {
        double x = 0;
        if (!absl::SimpleAtod(values[i], &x)) break;
        out[i] = absl::StrFormat("%.6g", std::clamp(x * factor, p.low, p.high));
        break;
      }
      case SweepParameter::Kind::kInt: {
        double x = 0;
        if (!absl::SimpleAtod(values[i], &x)) break;
        double y = std::round(x * factor);
        if (y == x) y += v < 0.5 ? -1 : 1;
        out[i] = absl::StrFormat("%d", static_cast<int64_t>(std::clamp(y, p.low, p.high)));
        break;
      }
    }
  }
  return out;
}

std::unique_ptr<Searcher> MakePbtSearcher(const SweepSpec& sweep) { return std::make_unique<PbtSearcher>(sweep); }

}  // namespace trainyard
