#include "server/sweeps/trial_spec.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/spec/job_spec.h"
#include "common/spec/spec_overrides.h"
#include "nlohmann/json.hpp"
#include "server/jobs/job_history.h"

namespace trainyard {

bool Better(const SweepSpec& spec, double a, double b) { return spec.maximize ? a > b : a < b; }

int BestTrial(const SweepSpec& spec, const SweepRecord& r) {
  int best = -1;
  for (const SweepTrialRecord& t : r.trials) {
    if (!t.best_metric) continue;
    if (best < 0 || Better(spec, *t.best_metric, *r.trials[best].best_metric)) best = t.number;
  }
  return best;
}

std::optional<double> TrialValue(const SweepSpec& spec, const std::vector<double>& reports) {
  if (reports.empty()) return std::nullopt;
  switch (spec.metric_scope) {
    case SweepSpec::MetricScope::kLast: return reports.back();
    case SweepSpec::MetricScope::kBest: {
      double best = reports.front();
      for (double v : reports) {
        if (Better(spec, v, best)) best = v;
      }
      return best;
    }
    case SweepSpec::MetricScope::kLastAverage: {
      const size_t n = std::min(reports.size(), static_cast<size_t>(std::max(1, spec.metric_last_n)));
      double sum = 0;
      for (size_t i = reports.size() - n; i < reports.size(); ++i) sum += reports[i];
      return sum / static_cast<double>(n);
    }
  }
  return reports.back();
}

std::string MetricScopeName(const SweepSpec& spec) {
  switch (spec.metric_scope) {
    case SweepSpec::MetricScope::kLast: return "last";
    case SweepSpec::MetricScope::kBest: return "best";
    case SweepSpec::MetricScope::kLastAverage: return absl::StrCat("last-", spec.metric_last_n, "-avg");
  }
  return "last";
}

int64_t TotalTrials(const SweepSpec& spec) {
  if (spec.searcher.kind != SweepSearcher::Kind::kGrid) return spec.max_trials;
  const int64_t grid = GridSize(spec.parameters);
  return spec.max_trials > 0 ? std::min<int64_t>(spec.max_trials, grid) : grid;
}

absl::Status CheckMetric(const SweepSpec& spec) {
  auto probe = MakeSearcher(spec);
  const std::optional<TrialPlan> first = probe->Next();
  if (!first) return absl::OkStatus();
  auto text = TrialSpec(spec, spec.name.empty() ? "sweep" : spec.name, *first);
  if (!text.ok()) return absl::OkStatus();  // CheckValues says why
  auto job = ParseJobSpec(*text);
  if (!job.ok() || !job->script.empty()) return absl::OkStatus();
  const std::vector<std::string>& names = JobHistory::SeriesNames();
  if (std::find(names.begin(), names.end(), spec.metric) == names.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("sweep.metric.name: '", spec.metric, "' is not a series the built-in trainer reports (",
                     absl::StrJoin(names, ", "),
                     "); a name of your own is for a script's trials, which report it with trainyard.report(step, ",
                     spec.metric, "=...)"));
  }
  if (spec.metric == "eval_loss" && job->eval_every_steps <= 0) {
    return absl::InvalidArgumentError(
        "sweep.metric.name: 'eval_loss': the trials never evaluate (their eval_every_steps is 0); set "
        "eval_every_steps (and the data's eval split) in the base spec");
  }
  return absl::OkStatus();
}

// The spec of one trial: the base spec with the trial's values set (and
// `more`).
absl::StatusOr<std::string> TrialSpec(const SweepSpec& spec, const std::string& sweep_name, const TrialPlan& plan,
                                      std::vector<std::string> more) {
  std::vector<std::string> sets = std::move(more);
  for (size_t i = 0; i < spec.parameters.size(); ++i) {
    sets.push_back(absl::StrCat(spec.parameters[i].path, "=", plan.values[i]));
  }
  sets.push_back(absl::StrCat("name=", sweep_name, "-t", plan.number));
  return ApplySpecOverrides(spec.base_spec, sets);
}

// Checks every value the search may give each parameter (each choice, a
// range's ends), each set on trial 0's spec as a job's spec is checked, so
// that a search space that cannot make a job is refused at submit, not
// trial by trial. The checks are bounded: past kMaxChecks values the rest
// are checked as their trials are submitted.
absl::Status CheckValues(const SweepSpec& spec) {
  constexpr int kMaxChecks = 2000;
  auto probe = MakeSearcher(spec);
  const std::optional<TrialPlan> first = probe->Next();
  if (!first) return absl::InvalidArgumentError("sweep: the search space has no trial");
  const std::string name = spec.name.empty() ? "sweep" : spec.name;
  auto check = [&](const TrialPlan& plan, const std::string& what) -> absl::Status {
    auto text = TrialSpec(spec, name, plan);
    if (!text.ok()) return absl::InvalidArgumentError(absl::StrCat(what, ": ", text.status().message()));
    if (auto job = ParseJobSpec(*text); !job.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": ", job.status().message()));
    }
    return absl::OkStatus();
  };
  if (auto s = check(*first, "sweep trial 0"); !s.ok()) return s;
  int checks = 1;
  for (size_t i = 0; i < spec.parameters.size(); ++i) {
    const SweepParameter& p = spec.parameters[i];
    std::vector<std::string> values = p.choices;
    if (p.kind == SweepParameter::Kind::kInt) {
      values = {absl::StrCat(static_cast<int64_t>(p.low)), absl::StrCat(static_cast<int64_t>(p.high))};
    } else if (p.kind != SweepParameter::Kind::kChoice) {
      values = {absl::StrFormat("%.17g", p.low), absl::StrFormat("%.17g", p.high)};
    }
    for (const std::string& v : values) {
      if (v == first->values[i]) continue;
      if (++checks > kMaxChecks) return absl::OkStatus();
      TrialPlan plan = *first;
      plan.values[i] = v;
      if (auto s = check(plan, absl::StrCat("sweep.parameters.", p.path, " value ", v)); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

std::string EncodeCaller(const Caller& c) {
  return nlohmann::json{
      {"user", c.user}, {"groups", c.groups}, {"admin", c.admin}, {"roots", c.roots}, {"unix_user", c.unix_user}}
      .dump();
}

Caller DecodeCaller(const std::string& text) {
  Caller c;
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    c.user = j.value("user", "");
    c.groups = j.value("groups", std::vector<std::string>{});
    c.admin = j.value("admin", false);
    c.roots = j.value("roots", std::vector<std::string>{});
    c.unix_user = j.value("unix_user", "");
  } catch (const std::exception&) {
    // A caller the store cannot read submits as nobody: the job manager refuses it on a server with users.
  }
  return c;
}

std::string SweepWebhookBody(const SweepSpec& spec, const SweepRecord& r, const std::string& event,
                             int64_t unix_millis) {
  const int best = BestTrial(spec, r);
  nlohmann::ordered_json sweep = {
      {"id", r.id},         {"name", r.name},        {"owner", r.owner},          {"state", JobStateName(r.state)},
      {"reason", r.reason}, {"metric", spec.metric}, {"trials", r.trials.size()}, {"best_trial", best}};
  if (best >= 0) {
    const SweepTrialRecord& b = r.trials[best];
    sweep["best_job_id"] = b.job_id;
    sweep["best_metric"] = *b.best_metric;
    nlohmann::ordered_json values = nlohmann::ordered_json::object();
    for (size_t i = 0; i < spec.parameters.size() && i < b.values.size(); ++i) {
      values[spec.parameters[i].path] = b.values[i];
    }
    sweep["best_values"] = std::move(values);
  }
  return nlohmann::ordered_json{{"event", event}, {"unix_millis", unix_millis}, {"sweep", std::move(sweep)}}.dump();
}

}  // namespace trainyard
