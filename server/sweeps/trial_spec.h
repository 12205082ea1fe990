// What a sweep's trials are made of, apart from the manager that runs them:
// a trial's job spec (the base spec with its values set at their paths and
// its name), the check at submit of every value a search may give, the
// best trial so far, and the caller as the sweep store keeps it. Pure
// functions; no locks, no jobs.
#ifndef TRAINYARD_SERVER_SWEEPS_TRIAL_SPEC_H_
#define TRAINYARD_SERVER_SWEEPS_TRIAL_SPEC_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/spec/sweep_spec.h"
#include "server/auth/caller.h"
#include "server/store/sweep_store.h"
#include "server/sweeps/searcher.h"

namespace trainyard {

// Whether metric `a` is better than `b` (the sweep's goal).
bool Better(const SweepSpec& spec, double a, double b);
// The number of the trial with the best metric so far; -1 when none
// reported one.
int BestTrial(const SweepSpec& spec, const SweepRecord& r);
// A trial's value from its reports of the metric, oldest first, as the
// sweep's metric.scope takes it: the last, the best, or the mean of the
// last N; none without a report.
std::optional<double> TrialValue(const SweepSpec& spec, const std::vector<double>& reports);
// InvalidArgument naming sweep.metric.name when the trials run the built-in
// trainer (no script) and the metric is none of its series, or is eval_loss
// and they never evaluate. A script's own names are not known before it runs.
absl::Status CheckMetric(const SweepSpec& spec);
// "last", "best" or "last-N-avg", as the spec writes metric.scope.
std::string MetricScopeName(const SweepSpec& spec);
// The trials the search draws in all: max_trials, a grid's combinations (at
// most max_trials when set); PBT: its population (replacements come on top).
int64_t TotalTrials(const SweepSpec& spec);
// The job spec of one trial: the base spec with the trial's values set (and
// `more` "path=value" sets first), named <sweep_name>-t<N>.
absl::StatusOr<std::string> TrialSpec(const SweepSpec& spec, const std::string& sweep_name, const TrialPlan& plan,
                                      std::vector<std::string> more = {});
// InvalidArgument naming the parameter and value when one value the search
// may give a parameter (each choice, a range's ends, set on trial 0's spec)
// does not make a valid job spec; past 2,000 values, the rest are checked as
// their trials are submitted.
absl::Status CheckValues(const SweepSpec& spec);

// The JSON a sweep's webhooks receive for `event` (SUCCEEDED, ..., BEST):
// the sweep, its best trial and that trial's values.
std::string SweepWebhookBody(const SweepSpec& spec, const SweepRecord& r, const std::string& event,
                             int64_t unix_millis);

// A caller as the store keeps it (SweepRecord::caller), and back.
std::string EncodeCaller(const Caller& c);
Caller DecodeCaller(const std::string& text);

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_SWEEPS_TRIAL_SPEC_H_
