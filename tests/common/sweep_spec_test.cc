// The sweep section of a job spec: what is read, and every refusal naming
// its field.
#include "common/spec/sweep_spec.h"

#include <gtest/gtest.h>

#include "common/spec/spec_overrides.h"

namespace trainyard {
namespace {

constexpr char kAsha[] = R"(name: lr-sweep
model: {kind: mlp}
max_steps: 450
sweep:
  parameters:
    optimizer.lr: {log_uniform: [1.0e-4, 1.0e-1]}
    data.batch_size: {choice: [16, 32, 64]}
    model.hidden: {choice: [[64], [128, 64]]}
    optimizer.weight_decay: {uniform: [0, 0.1]}
    seed: {int: [1, 4]}
  metric: {name: eval_loss, goal: minimize}
  searcher: {kind: asha, reduction_factor: 3, min_steps: 50}
  max_trials: 12
  concurrency: 4
  seed: 7
)";

TEST(SweepSpec, ReadsEveryPartAndKeepsTheRestAsTheBaseSpec) {
  absl::StatusOr<SweepSpec> s = ParseSweepSpec(kAsha);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->name, "lr-sweep");
  EXPECT_EQ(s->max_steps, 450);
  ASSERT_EQ(s->parameters.size(), 5u);
  EXPECT_EQ(s->parameters[0].path, "optimizer.lr");
  EXPECT_EQ(s->parameters[0].kind, SweepParameter::Kind::kLogUniform);
  EXPECT_DOUBLE_EQ(s->parameters[0].low, 1e-4);
  EXPECT_EQ(s->parameters[1].choices, (std::vector<std::string>{"16", "32", "64"}));
  EXPECT_EQ(s->parameters[2].choices, (std::vector<std::string>{"[64]", "[128, 64]"}));
  EXPECT_EQ(s->parameters[4].kind, SweepParameter::Kind::kInt);
  EXPECT_EQ(s->metric, "eval_loss");
  EXPECT_FALSE(s->maximize);
  EXPECT_EQ(s->searcher.kind, SweepSearcher::Kind::kAsha);
  EXPECT_EQ(s->searcher.reduction_factor, 3);
  EXPECT_EQ(s->searcher.min_steps, 50);
  EXPECT_EQ(s->max_trials, 12);
  EXPECT_EQ(s->concurrency, 4);
  EXPECT_EQ(s->seed, 7u);
  EXPECT_EQ(s->base_spec.find("sweep:"), std::string::npos) << s->base_spec;
  EXPECT_NE(s->base_spec.find("max_steps: 450"), std::string::npos) << s->base_spec;
  // A trial is the base spec with a value per parameter, as --set sets it.
  absl::StatusOr<std::string> trial =
      ApplySpecOverrides(s->base_spec, {"optimizer.lr=0.003", "model.hidden=" + s->parameters[2].choices[1]});
  ASSERT_TRUE(trial.ok()) << trial.status();
  EXPECT_NE(trial->find("lr: 0.003"), std::string::npos) << *trial;
  EXPECT_NE(trial->find("hidden: [128, 64]"), std::string::npos) << *trial;
}

TEST(SweepSpec, AGridNeedsNoTrialCountAndCountsItsCombinations) {
  absl::StatusOr<SweepSpec> s = ParseSweepSpec(
      "max_steps: 10\nsweep:\n  parameters:\n    seed: {int: [1, 3]}\n    data.batch_size: {choice: [8, 16]}\n"
      "  searcher: {kind: grid}\n");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->max_trials, 0);
  EXPECT_EQ(GridSize(s->parameters), 6);
  EXPECT_EQ(s->concurrency, 1);
  EXPECT_EQ(s->metric, "loss");
}

TEST(SweepSpec, RefusalsNameTheField) {
  const std::string base = "max_steps: 100\n";
  const std::string lr = "sweep:\n  max_trials: 4\n  parameters:\n    optimizer.lr: ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {base, "'sweep'"},
      {base + "sweep: {max_trials: 2}\n", "'sweep.parameters'"},
      {base + lr + "{uniform: [1, 0]}\n", "'sweep.parameters.optimizer.lr.uniform': low (1) must not be above"},
      {base + lr + "{log_uniform: [0, 1]}\n", "'sweep.parameters.optimizer.lr.log_uniform': a log-uniform range"},
      {base + lr + "{choice: []}\n", "'sweep.parameters.optimizer.lr.choice'"},
      {base + lr + "{normal: [0, 1]}\n", "'sweep.parameters.optimizer.lr.normal': unknown kind"},
      {base + lr + "{uniform: [0, x]}\n", "'sweep.parameters.optimizer.lr.uniform': not a value"},
      {base + lr + "{uniform: [0, 1]}\n  searcher: {kind: grid}\n", "a grid takes choice lists and int ranges"},
      {base + lr + "{uniform: [0, 1]}\n  searcher: {kind: bayes}\n", "'sweep.searcher.kind': 'bayes'"},
      {base + lr + "{uniform: [0, 1]}\n  searcher: {kind: asha, min_steps: 100}\n", "'sweep.searcher.min_steps'"},
      {base + lr + "{uniform: [0, 1]}\n  searcher: {kind: asha, min_steps: 5, reduction_factor: 1}\n",
       "'sweep.searcher.reduction_factor': 2 … 100"},
      {base + lr + "{uniform: [0, 1]}\n  metric: {name: loss, goal: lowest}\n", "'sweep.metric.goal'"},
      {base + lr + "{uniform: [0, 1]}\n  concurrency: 0\n", "'sweep.concurrency'"},
      {base + lr + "{uniform: [0, 1]}\n  budget: 3\n", "'sweep.budget': unknown key"},
      {base + "sweep:\n  parameters:\n    optimizer.lr: {uniform: [0, 1]}\n", "'sweep.max_trials': random and ASHA"},
      {base + "sweep:\n  max_trials: 2\n  parameters:\n    sweep.seed: {int: [1, 2]}\n", "not a job field"},
      // A trial's value is set as `path=value` and its name is <name>-t<N>:
      // a path that holds '=' (or an escape sequence), a name that YAML
      // would cut at a comment, are refused.
      {base + "sweep:\n  max_trials: 2\n  parameters:\n    \"a=b.c\": {int: [1, 2]}\n", "'a=b.c': a dotted path"},
      {base + "sweep:\n  max_trials: 2\n  parameters:\n    \"seed\\e[31m\": {int: [1, 2]}\n",
       "'seed\\x1b[31m': a dotted path"},
      {"name: 'lr #x'\n" + base + lr + "{uniform: [0, 1]}\n", "'name': may contain only letters"},
      {"name: [a]\n" + base + lr + "{uniform: [0, 1]}\n", "'name'"},
      {"[1, 2]", "a sweep is a job spec"},
      {"max_steps: [", "not valid YAML"},
  };
  for (const auto& [text, want] : cases) {
    absl::StatusOr<SweepSpec> s = ParseSweepSpec(text);
    ASSERT_FALSE(s.ok()) << text;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_NE(std::string(s.status().message()).find(want), std::string::npos) << text << "\n" << s.status();
  }
}

}  // namespace
}  // namespace trainyard

namespace trainyard {
namespace {

TEST(SweepSpec, ReadsItsBudgetAndWebhooksAndRefusesBadOnes) {
  const std::string base = std::string(kAsha);
  auto with = [&](const std::string& extra) { return ParseSweepSpec(base + extra); };
  auto s = with("  max_rank_hours: 2.5\n  notify: {urls: [https://hooks.example.com/x], on: [best, SUCCEEDED]}\n");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_DOUBLE_EQ(s->max_rank_hours, 2.5);
  EXPECT_EQ(s->notify_urls, (std::vector<std::string>{"https://hooks.example.com/x"}));
  EXPECT_EQ(s->notify_on, (std::vector<std::string>{"BEST", "SUCCEEDED"}));
  const std::pair<const char*, const char*> bad[] = {
      {"  max_rank_hours: -1\n", "sweep.max_rank_hours"},
      {"  notify: {urls: [file:///etc/passwd]}\n", "sweep.notify.urls[0]"},
      {"  notify: {urls: ['https://u:p@h/x']}\n", "sweep.notify.urls[0]"},
      {"  notify: {urls: [https://h/x], on: [EXPLODED]}\n", "sweep.notify.on"},
      {"  notify: {url: https://h/x}\n", "sweep.notify.url"},
  };
  for (const auto& [extra, field] : bad) {
    auto r = with(extra);
    ASSERT_FALSE(r.ok()) << extra;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(r.status().message()).find(field), std::string::npos) << r.status();
  }
}

}  // namespace
}  // namespace trainyard

namespace trainyard {
namespace {

// A script's length is its own (its arguments): its sweep says it as
// sweep.max_steps, which ASHA's rungs and PBT's intervals lie below.
constexpr char kScript[] =
    "script: {path: /tmp/train.py, args: [--steps, '300']}\n"
    "sweep:\n"
    "  parameters:\n    script.env.LR: {log_uniform: [1.0e-3, 1.0e-1]}\n"
    "  max_trials: 4\n  concurrency: 4\n";

TEST(SweepSpec, AScriptSweepTakesItsTrialsLengthFromSweepMaxSteps) {
  auto asha = ParseSweepSpec(std::string(kScript) + "  max_steps: 300\n  searcher: {kind: asha, min_steps: 30}\n");
  ASSERT_TRUE(asha.ok()) << asha.status();
  EXPECT_EQ(asha->max_steps, 300);
  // The base spec (every trial's) has no max_steps, which a script's refuses.
  EXPECT_EQ(asha->base_spec.find("max_steps"), std::string::npos) << asha->base_spec;
  auto pbt =
      ParseSweepSpec(std::string(kScript) + "  max_steps: 300\n  searcher: {kind: pbt, perturbation_interval: 100}\n");
  ASSERT_TRUE(pbt.ok()) << pbt.status();
  EXPECT_EQ(pbt->max_steps, 300);
  // Grid and random need no length.
  auto random = ParseSweepSpec(kScript);
  ASSERT_TRUE(random.ok()) << random.status();
  EXPECT_EQ(random->max_steps, 0);

  const std::pair<std::string, std::string> bad[] = {
      // ASHA and PBT without it: refused at submit, naming the field.
      {std::string(kScript) + "  searcher: {kind: asha, min_steps: 30}\n",
       "'sweep.max_steps': an ASHA sweep of a script needs its trials' full length"},
      {std::string(kScript) + "  searcher: {kind: pbt, perturbation_interval: 100}\n",
       "'sweep.max_steps': a PBT sweep of a script needs its trials' full length"},
      // The spec's max_steps is a built-in model's, refused beside a script.
      {"max_steps: 300\n" + std::string(kScript) + "  searcher: {kind: asha, min_steps: 30}\n",
       "'max_steps': a script sets its own length (script.args); a sweep of a script takes its trials' length as "
       "sweep.max_steps"},
      {std::string(kScript) + "  max_steps: 0\n", "'sweep.max_steps': the step the script's trainyard.report"},
      {std::string(kScript) + "  max_steps: lots\n", "'sweep.max_steps': not a value"},
      {std::string(kScript) + "  max_steps: 300\n  searcher: {kind: asha, min_steps: 300}\n",
       "'sweep.searcher.min_steps': the first rung, above 0 and below sweep.max_steps (300)"},
      {std::string(kScript) + "  max_steps: 300\n  searcher: {kind: pbt, perturbation_interval: 300}\n",
       "'sweep.searcher.perturbation_interval': steps between exploits, above 0 and below sweep.max_steps (300)"},
      // A built-in model's length is its spec's max_steps alone.
      {std::string(kAsha) + "  max_steps: 450\n",
       "'sweep.max_steps': the length of a script's trials; a built-in model's trials take theirs from the spec's "
       "max_steps"},
  };
  for (const auto& [text, want] : bad) {
    auto r = ParseSweepSpec(text);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(r.status().message()).find(want), std::string::npos) << text << "\n" << r.status();
  }
}

TEST(SweepSpec, MetricScopeIsLastByDefaultBestOrAnAverageOfTheLastN) {
  const std::string base =
      "model: {kind: mlp}\nmax_steps: 100\nsweep:\n  parameters: {seed: {int: [1, 2]}}\n  searcher: {kind: grid}\n"
      "  metric: {name: loss";
  auto plain = ParseSweepSpec(base + "}\n");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->metric_scope, SweepSpec::MetricScope::kLast);
  auto best = ParseSweepSpec(base + ", scope: best}\n");
  ASSERT_TRUE(best.ok()) << best.status();
  EXPECT_EQ(best->metric_scope, SweepSpec::MetricScope::kBest);
  auto avg = ParseSweepSpec(base + ", scope: last-5-avg}\n");
  ASSERT_TRUE(avg.ok()) << avg.status();
  EXPECT_EQ(avg->metric_scope, SweepSpec::MetricScope::kLastAverage);
  EXPECT_EQ(avg->metric_last_n, 5);
  for (const char* bad : {"avg", "last-1-avg", "last-x-avg", "last-5", "[last]", "min"}) {
    auto r = ParseSweepSpec(base + ", scope: " + bad + "}\n");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_TRUE(std::string(r.status().message()).find("sweep.metric.scope") != std::string::npos) << r.status();
  }
}

}  // namespace
}  // namespace trainyard

namespace trainyard {
namespace {

// A script's arguments are swept whole, as a choice of lists; each trial's
// spec holds the chosen list as its script.args.
TEST(SweepSpec, AScriptsArgumentsAreSweptAsAChoiceOfLists) {
  auto s = ParseSweepSpec(
      "script: {path: /tmp/train.py, args: [--lr, '0.1']}\n"
      "sweep:\n  parameters:\n    script.args: {choice: [[--lr, '0.1'], [--lr, '0.01', --warmup]]}\n"
      "  searcher: {kind: grid}\n");
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->parameters.size(), 1u);
  ASSERT_EQ(s->parameters[0].choices.size(), 2u);
  auto trial = ApplySpecOverrides(s->base_spec, {"script.args=" + s->parameters[0].choices[1]});
  ASSERT_TRUE(trial.ok()) << trial.status();
  EXPECT_NE(trial->find("args: [--lr, 0.01, --warmup]"), std::string::npos) << *trial;  // a list, not a string
}

}  // namespace
}  // namespace trainyard
