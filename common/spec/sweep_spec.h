// SweepSpec: a hyperparameter sweep as its owner writes it, a job spec with
// a `sweep:` section:
//
//   name: lr-sweep
//   model: {kind: mlp}
//   max_steps: 450
//   sweep:
//     parameters:
//       optimizer.lr: {log_uniform: [1.0e-4, 1.0e-1]}
//       data.batch_size: {choice: [16, 32, 64]}
//       model.hidden: {choice: [[64], [128, 64]]}
//       optimizer.weight_decay: {uniform: [0, 0.1]}
//       seed: {int: [1, 4]}
//     metric: {name: loss, goal: minimize}
//     searcher: {kind: asha, reduction_factor: 3, min_steps: 50}
//     max_trials: 12
//     concurrency: 4
//     seed: 7
//
// Everything outside `sweep:` is the base spec of every trial; a trial is
// that spec with one value per parameter set at its dotted path (as
// `trainctl submit --set` sets it), so any numeric or enum field, a script's
// `args` or `env`, can be searched. The trial's own spec is checked as any
// job's when it is submitted. Plain data and its parser.
#ifndef TRAINYARD_COMMON_SPEC_SWEEP_SPEC_H_
#define TRAINYARD_COMMON_SPEC_SWEEP_SPEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace trainyard {

// One searched field: its values are `choices` (YAML text each), or a
// range: uniform or log-uniform reals in [low, high], or the integers
// low..high.
struct SweepParameter {
  enum class Kind { kChoice, kUniform, kLogUniform, kInt };
  std::string path;  // the dotted spec field: "optimizer.lr"
  Kind kind = Kind::kChoice;
  std::vector<std::string> choices;
  double low = 0, high = 0;
};

struct SweepSearcher {
  enum class Kind { kGrid, kRandom, kAsha, kPbt };
  // grid, random, asha, pbt: as the spec names them.
  static const char* Name(Kind k) {
    switch (k) {
      case Kind::kGrid: return "grid";
      case Kind::kRandom: return "random";
      case Kind::kAsha: return "asha";
      case Kind::kPbt: return "pbt";
    }
    return "";
  }
  Kind kind = Kind::kRandom;
  // ASHA: rungs at min_steps * reduction_factor^k steps, up to the base
  // spec's max_steps; at each rung a trial goes on only when its metric is
  // among the best 1/reduction_factor of the trials that reached the rung.
  int reduction_factor = 3;
  int64_t min_steps = 0;
  // PBT: a population of max_trials trials; every perturbation_interval
  // steps a trial in the bottom `quantile` of the population (by its latest
  // metric) is replaced by a copy of one in the top `quantile` — a new trial
  // that resumes from a checkpoint of it, its values perturbed (x0.8 or
  // x1.2, a neighbouring choice) or, with resample_probability, drawn anew.
  int64_t perturbation_interval = 0;
  double quantile = 0.25;
  double resample_probability = 0.25;
};

struct SweepSpec {
  std::string name;
  std::string base_spec;  // the spec without `sweep:`, as YAML text
  // A trial's full length (ASHA's rungs and PBT's intervals lie below it):
  // a built-in model's spec's max_steps; for a script (the base spec has
  // `script:`), sweep.max_steps, the step its trainyard.report reaches at
  // its end (a script's spec has no max_steps: its arguments set it).
  int64_t max_steps = 0;
  std::vector<SweepParameter> parameters;
  std::string metric = "loss";  // loss, eval_loss, or a name a script reports
  // A trial's value (the one its sweep ranks it by): its last report of
  // the metric (metric.scope last, the default, as Ray Tune's scope="last"),
  // its best (best), or the mean of its last `metric_last_n` (last-N-avg).
  enum class MetricScope { kLast, kBest, kLastAverage };
  MetricScope metric_scope = MetricScope::kLast;
  int metric_last_n = 1;  // kLastAverage's N (2 ... 1000)
  bool maximize = false;
  SweepSearcher searcher;
  int max_trials = 0;   // grid: 0 is every combination
  int concurrency = 1;  // trials running at once
  uint64_t seed = 0;    // random and ASHA draws
  // The budget: once the trials used this many rank-hours (ranks x hours
  // they ran), the sweep starts no more and stops those still running
  // (0: none).
  double max_rank_hours = 0;
  // Webhooks (docs/reference/notifications.md): the sweep's end
  // (SUCCEEDED, FAILED, CANCELLED) and each new best trial (BEST).
  std::vector<std::string> notify_urls;
  std::vector<std::string> notify_on = {"SUCCEEDED", "FAILED", "CANCELLED"};
};

// The sweep in `text` (YAML or JSON); InvalidArgument naming the field
// ("sweep.parameters.optimizer.lr: ...") for a missing section, an unknown
// key, a range with low > high (or low <= 0 for log_uniform), an empty
// choice list, a grid over a real range, a searcher or goal not known, or
// limits out of range (max_trials 0 … 10,000, concurrency 1 … 1,000,
// reduction_factor 2 … 100, 0 < min_steps < max_steps for ASHA), an ASHA or
// PBT sweep without its trials' length (max_steps; sweep.max_steps for a
// script), sweep.max_steps beside a built-in model, max_steps beside a
// script.
absl::StatusOr<SweepSpec> ParseSweepSpec(const std::string& text);

// The number of trials a grid over `parameters` has (every parameter a
// choice list or an integer range); 0 past 1,000,000.
int64_t GridSize(const std::vector<SweepParameter>& parameters);

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_SPEC_SWEEP_SPEC_H_
