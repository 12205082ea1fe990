// Searcher: which trials a sweep (common/spec/sweep_spec.h) runs, and which
// of them go on. A trial is numbered from 0 in the order it was asked for;
// its values are one per parameter, in the sweep's parameter order, as YAML
// text for `--set path=value`. Kinds:
//   grid    every combination of the choice lists and integer ranges, in
//           order (the last parameter fastest), at most max_trials (0: all);
//   random  each value drawn uniformly (log-uniformly for log_uniform) from
//           the sweep's seed and the trial's number alone, so trial k's
//           values are the same whatever ran before it;
//   asha    random trials, stopped early by asynchronous successive halving:
//           rungs at min_steps * reduction_factor^k steps below max_steps;
//           a trial's metric at each rung (its first report at or past the
//           rung) is compared with those of every trial that reached the
//           rung before it, and the trial goes on (is promoted: the same
//           job trains on) only when it is within their best
//           1/reduction_factor (their 100/reduction_factor-th percentile,
//           interpolated; the first at a rung always goes on), else it is
//           stopped. Li et al., "A System for Massively Parallel
//           Hyperparameter Tuning" (2020); Ray Tune's AsyncHyperBand rule.
//   pbt     population-based training (server/sweeps/pbt.h).
// Pure logic; not thread-safe.
#ifndef TRAINYARD_SERVER_SWEEPS_SEARCHER_H_
#define TRAINYARD_SERVER_SWEEPS_SEARCHER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/spec/sweep_spec.h"

namespace trainyard {

struct TrialPlan {
  int number = 0;
  std::vector<std::string> values;  // one per parameter, YAML text
};

class Searcher {
 public:
  // kExploit (PBT): the trial is to be replaced by a copy of
  // exploit_source() (Exploited makes the copy's plan).
  enum class Verdict { kContinue, kPromote, kStop, kExploit };

  virtual ~Searcher() = default;
  // The next trial, or nullopt when the search has none left to start.
  virtual std::optional<TrialPlan> Next() = 0;
  // Trial `number` reported `value` of the sweep's metric at `step`
  // (smaller is better: a maximized metric comes negated). kPromote: it
  // passed a rung and goes on; kStop: it is to be stopped now.
  virtual Verdict OnMetric(int number, int64_t step, double value);
  // After kExploit: the trial whose state the poor one takes.
  int exploit_source() const { return exploit_source_; }
  // The trial that replaces `poor`: the next number, `source_values`
  // perturbed; nullopt for searchers that never exploit.
  virtual std::optional<TrialPlan> Exploited(int poor, int source, const std::vector<std::string>& source_values);
  // Whether Next has no trial left to start.
  virtual bool exhausted() const = 0;
  // Trials asked for so far.
  int started() const { return started_; }
  // A restarted sweep: trials 0..started-1 were asked for already (their
  // OnMetric decisions are replayed by calling OnMetric again, in order).
  void Resume(int started) { started_ = started; }

 protected:
  int started_ = 0;
  int exploit_source_ = -1;
};

// The searcher of `sweep` (its parameters, kind, seed and limits).
std::unique_ptr<Searcher> MakeSearcher(const SweepSpec& sweep);

// Trial `number`'s value of `p` drawn from `seed` (YAML text): the same for
// the same arguments.
std::string DrawValue(const SweepParameter& p, uint64_t seed, int number, int index);

// ASHA's rule alone: the rungs of a sweep (steps), and whether a metric
// goes on at a rung given the values recorded there before it.
std::vector<int64_t> AshaRungs(int64_t min_steps, int reduction_factor, int64_t max_steps);
bool AshaPromotes(const std::vector<double>& recorded_before, double value, int reduction_factor);

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_SWEEPS_SEARCHER_H_
