#include "common/spec/sweep_spec.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/spec/yaml_keys.h"
#include "common/webhook_url.h"

namespace trainyard {
namespace {

absl::Status Bad(const std::string& field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("spec field '", field, "': ", why));
}

// Refuses keys of `node` not in `known`.
absl::Status OnlyKeys(const YAML::Node& node, const std::string& field, const std::set<std::string>& known) {
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>();
    if (!known.count(key)) {
      std::string names;
      for (const std::string& k : known) names += (names.empty() ? "" : ", ") + k;
      return Bad(absl::StrCat(field, ".", key), absl::StrCat("unknown key (known: ", names, ")"));
    }
  }
  return absl::OkStatus();
}

template <typename T>
absl::StatusOr<T> Scalar(const YAML::Node& node, const std::string& field) {
  try {
    return node.as<T>();
  } catch (const YAML::Exception&) {
    return Bad(field, "not a value of the right type");
  }
}

// The refusal of an ASHA or PBT sweep (`what`) without its trials' length
// in `field` (max_steps, or sweep.max_steps for a script).
absl::Status NoLength(const std::string& field, const std::string& what) {
  if (field == "max_steps") return Bad(field, absl::StrCat(what, " sweep needs the trials' full length (max_steps)"));
  return Bad(field, absl::StrCat(what,
                                 " sweep of a script needs its trials' full length: the step the script's "
                                 "trainyard.report reaches at its end (its rungs and intervals are steps)"));
}

absl::StatusOr<SweepParameter> ParseParameter(const std::string& path, const YAML::Node& node) {
  const std::string field = "sweep.parameters." + path;
  if (!node.IsMap() || node.size() != 1) {
    return Bad(field, "one of {choice: [...]}, {uniform: [low, high]}, {log_uniform: [low, high]}, {int: [low, high]}");
  }
  SweepParameter p;
  p.path = path;
  const std::string kind = node.begin()->first.as<std::string>();
  const YAML::Node values = node.begin()->second;
  if (kind == "choice") {
    if (!values.IsSequence() || values.size() == 0) return Bad(field + ".choice", "a non-empty list of values");
    for (const auto& v : values) {
      YAML::Emitter out;
      out << YAML::Flow << v;
      p.choices.push_back(out.c_str());
    }
    return p;
  }
  if (kind == "uniform") {
    p.kind = SweepParameter::Kind::kUniform;
  } else if (kind == "log_uniform") {
    p.kind = SweepParameter::Kind::kLogUniform;
  } else if (kind == "int") {
    p.kind = SweepParameter::Kind::kInt;
  } else {
    return Bad(absl::StrCat(field, ".", kind), "unknown kind (choice, uniform, log_uniform, int)");
  }
  const std::string range = absl::StrCat(field, ".", kind);
  if (!values.IsSequence() || values.size() != 2) return Bad(range, "[low, high]");
  if (p.kind == SweepParameter::Kind::kInt) {
    auto lo = Scalar<int64_t>(values[0], range), hi = Scalar<int64_t>(values[1], range);
    if (!lo.ok()) return lo.status();
    if (!hi.ok()) return hi.status();
    p.low = static_cast<double>(*lo);
    p.high = static_cast<double>(*hi);
  } else {
    auto lo = Scalar<double>(values[0], range), hi = Scalar<double>(values[1], range);
    if (!lo.ok()) return lo.status();
    if (!hi.ok()) return hi.status();
    p.low = *lo;
    p.high = *hi;
  }
  if (!std::isfinite(p.low) || !std::isfinite(p.high) || p.low > p.high) {
    return Bad(range, absl::StrCat("low (", p.low, ") must not be above high (", p.high, ")"));
  }
  if (p.kind == SweepParameter::Kind::kLogUniform && p.low <= 0) {
    return Bad(range, absl::StrCat("a log-uniform range starts above 0 (low is ", p.low, ")"));
  }
  return p;
}

}  // namespace

int64_t GridSize(const std::vector<SweepParameter>& parameters) {
  int64_t n = 1;
  for (const SweepParameter& p : parameters) {
    int64_t k = 0;
    if (p.kind == SweepParameter::Kind::kChoice) k = static_cast<int64_t>(p.choices.size());
    if (p.kind == SweepParameter::Kind::kInt) k = static_cast<int64_t>(p.high - p.low) + 1;
    if (k == 0 || n > 1'000'000 / k) return 0;
    n *= k;
  }
  return n;
}

absl::StatusOr<SweepSpec> ParseSweepSpec(const std::string& text) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("the sweep is not valid YAML or JSON: ", e.msg));
  }
  if (!root.IsMap()) return absl::InvalidArgumentError("a sweep is a job spec (a mapping) with a 'sweep' section");
  if (auto s = CheckNoDuplicateKeys(root, "sweep"); !s.ok()) return s;
  const YAML::Node sweep = root["sweep"];
  if (!sweep.IsDefined() || !sweep.IsMap()) return Bad("sweep", "a mapping is required (parameters, metric, ...)");
  if (auto s = OnlyKeys(sweep, "sweep",
                        {"parameters", "metric", "searcher", "max_trials", "concurrency", "seed", "max_rank_hours",
                         "notify", "max_steps"});
      !s.ok()) {
    return s;
  }
  SweepSpec out;
  // The base spec: the document without its sweep section.
  YAML::Node base = YAML::Clone(root);
  base.remove("sweep");
  YAML::Emitter emitted;
  emitted << base;
  out.base_spec = emitted.c_str();
  if (root["name"].IsDefined()) {
    if (!root["name"].IsScalar()) return Bad("name", "a name: letters, digits, '-', '_' and '.'");
    out.name = root["name"].Scalar();
    // Each trial is named <name>-t<N>, which must be a job's name.
    if (out.name.empty() || out.name.size() > 100) return Bad("name", "1 … 100 characters");
    for (char c : out.name) {
      if (!(absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) {
        return Bad("name", "may contain only letters, digits, '-', '_' and '.' (each trial's job is named after it)");
      }
    }
  }
  // A trial's full length: a built-in model's is its spec's max_steps; a
  // script's is its own (its arguments), so its sweep says it:
  // sweep.max_steps, the step its trainyard.report reaches at its end.
  const bool script = root["script"].IsDefined();
  if (sweep["max_steps"].IsDefined()) {
    if (!script) {
      return Bad("sweep.max_steps",
                 "the length of a script's trials; a built-in model's trials take theirs from the spec's max_steps");
    }
    auto v = Scalar<int64_t>(sweep["max_steps"], "sweep.max_steps");
    if (!v.ok()) return v.status();
    if (*v <= 0) return Bad("sweep.max_steps", "the step the script's trainyard.report reaches at its end, above 0");
    out.max_steps = *v;
  } else if (!script) {
    out.max_steps = root["max_steps"].IsDefined() ? root["max_steps"].as<int64_t>(0) : 0;
  }
  if (script && root["max_steps"].IsDefined()) {
    return Bad("max_steps",
               "a script sets its own length (script.args); a sweep of a script takes its trials' length as "
               "sweep.max_steps (the step its trainyard.report reaches at its end)");
  }
  // The field that holds the length, for the refusals below.
  const std::string length = script ? "sweep.max_steps" : "max_steps";

  const YAML::Node params = sweep["parameters"];
  if (!params.IsDefined() || !params.IsMap() || params.size() == 0) {
    return Bad("sweep.parameters", "a mapping of dotted spec fields to their values is required");
  }
  for (const auto& kv : params) {
    const std::string path = kv.first.as<std::string>();
    if (path.empty() || path.front() == '.' || path.back() == '.' || path.find("..") != std::string::npos) {
      return Bad("sweep.parameters." + path, "a dotted path into the spec (optimizer.lr)");
    }
    // A trial's value is set at this path as `path=value`: a path holding
    // '=' (or anything but a field name's characters) would set another.
    for (char c : path) {
      if (!(absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-')) {
        return Bad("sweep.parameters", absl::StrCat("'", absl::CHexEscape(path.substr(0, 64)),
                                                    "': a dotted path of field names (letters, digits, '_', '-')"));
      }
    }
    if (path == "sweep" || path.rfind("sweep.", 0) == 0) return Bad("sweep.parameters." + path, "not a job field");
    absl::StatusOr<SweepParameter> p = ParseParameter(path, kv.second);
    if (!p.ok()) return p.status();
    out.parameters.push_back(*std::move(p));
  }

  if (const YAML::Node metric = sweep["metric"]; metric.IsDefined()) {
    if (!metric.IsMap()) return Bad("sweep.metric", "{name: loss, goal: minimize}");
    if (auto s = OnlyKeys(metric, "sweep.metric", {"name", "goal", "scope"}); !s.ok()) return s;
    if (metric["name"].IsDefined()) out.metric = metric["name"].as<std::string>("");
    if (out.metric.empty()) return Bad("sweep.metric.name", "a metric name is required (loss, eval_loss, ...)");
    for (unsigned char c : out.metric) {
      if (c <= ' ' || c == 0x7f) {
        return Bad("sweep.metric.name", "a series' name: loss, eval_loss, ... or one a script reports (no spaces)");
      }
    }
    const std::string goal = metric["goal"].IsDefined() ? metric["goal"].as<std::string>("") : "minimize";
    if (goal != "minimize" && goal != "maximize") return Bad("sweep.metric.goal", "minimize or maximize");
    out.maximize = goal == "maximize";
    if (const YAML::Node scope = metric["scope"]; scope.IsDefined()) {
      constexpr const char* kScopes =
          "last (default), best, or last-N-avg (the mean of the last N reports: last-5-avg)";
      const std::string text = scope.IsScalar() ? scope.as<std::string>("") : "";
      int n = 0;
      if (text == "last") {
        out.metric_scope = SweepSpec::MetricScope::kLast;
      } else if (text == "best") {
        out.metric_scope = SweepSpec::MetricScope::kBest;
      } else if (absl::StartsWith(text, "last-") && absl::EndsWith(text, "-avg") &&
                 absl::SimpleAtoi(text.substr(5, text.size() - 9), &n) && n >= 2 && n <= 1000) {
        out.metric_scope = SweepSpec::MetricScope::kLastAverage;
        out.metric_last_n = n;
      } else {
        return Bad("sweep.metric.scope", kScopes);
      }
    }
  }

  if (const YAML::Node searcher = sweep["searcher"]; searcher.IsDefined()) {
    if (!searcher.IsMap()) return Bad("sweep.searcher", "{kind: grid | random | asha, ...}");
    if (auto s = OnlyKeys(
            searcher, "sweep.searcher",
            {"kind", "reduction_factor", "min_steps", "perturbation_interval", "quantile", "resample_probability"});
        !s.ok()) {
      return s;
    }
    const std::string kind = searcher["kind"].IsDefined() ? searcher["kind"].as<std::string>("") : "random";
    if (kind == "grid") {
      out.searcher.kind = SweepSearcher::Kind::kGrid;
    } else if (kind == "random") {
      out.searcher.kind = SweepSearcher::Kind::kRandom;
    } else if (kind == "asha") {
      out.searcher.kind = SweepSearcher::Kind::kAsha;
    } else if (kind == "pbt") {
      out.searcher.kind = SweepSearcher::Kind::kPbt;
    } else {
      return Bad("sweep.searcher.kind", absl::StrCat("'", kind, "' is not grid, random, asha or pbt"));
    }
    if (searcher["perturbation_interval"].IsDefined()) {
      auto v = Scalar<int64_t>(searcher["perturbation_interval"], "sweep.searcher.perturbation_interval");
      if (!v.ok()) return v.status();
      out.searcher.perturbation_interval = *v;
    }
    for (auto [key, into] : {std::pair{"quantile", &out.searcher.quantile},
                             std::pair{"resample_probability", &out.searcher.resample_probability}}) {
      if (!searcher[key].IsDefined()) continue;
      auto v = Scalar<double>(searcher[key], absl::StrCat("sweep.searcher.", key));
      if (!v.ok()) return v.status();
      *into = *v;
    }
    if (searcher["reduction_factor"].IsDefined()) {
      auto v = Scalar<int>(searcher["reduction_factor"], "sweep.searcher.reduction_factor");
      if (!v.ok()) return v.status();
      out.searcher.reduction_factor = *v;
    }
    if (searcher["min_steps"].IsDefined()) {
      auto v = Scalar<int64_t>(searcher["min_steps"], "sweep.searcher.min_steps");
      if (!v.ok()) return v.status();
      out.searcher.min_steps = *v;
    }
  }
  auto int_field = [&](const char* key, int* into) -> absl::Status {
    if (!sweep[key].IsDefined()) return absl::OkStatus();
    auto v = Scalar<int>(sweep[key], absl::StrCat("sweep.", key));
    if (!v.ok()) return v.status();
    *into = *v;
    return absl::OkStatus();
  };
  if (auto s = int_field("max_trials", &out.max_trials); !s.ok()) return s;
  if (auto s = int_field("concurrency", &out.concurrency); !s.ok()) return s;
  if (sweep["seed"].IsDefined()) {
    auto v = Scalar<uint64_t>(sweep["seed"], "sweep.seed");
    if (!v.ok()) return v.status();
    out.seed = *v;
  }

  if (sweep["max_rank_hours"].IsDefined()) {
    auto v = Scalar<double>(sweep["max_rank_hours"], "sweep.max_rank_hours");
    if (!v.ok()) return v.status();
    if (!(*v >= 0 && *v <= 1e7)) return Bad("sweep.max_rank_hours", "0 (none) … 10,000,000");
    out.max_rank_hours = *v;
  }
  if (const YAML::Node notify = sweep["notify"]; notify.IsDefined()) {
    if (!notify.IsMap()) return Bad("sweep.notify", "{urls: [...], on: [SUCCEEDED, FAILED, CANCELLED, BEST]}");
    if (auto s = OnlyKeys(notify, "sweep.notify", {"urls", "on"}); !s.ok()) return s;
    auto strings = [](const YAML::Node& n, const std::string& p,
                      size_t max) -> absl::StatusOr<std::vector<std::string>> {
      if (!n.IsSequence() || n.size() > max) return Bad(p, absl::StrCat("a list of at most ", max, " strings"));
      std::vector<std::string> v;
      for (const auto& e : n) {
        if (!e.IsScalar()) return Bad(p, "a list of strings");
        v.push_back(e.Scalar());
      }
      return v;
    };
    if (notify["urls"].IsDefined()) {
      auto urls = strings(notify["urls"], "sweep.notify.urls", 8);
      if (!urls.ok()) return urls.status();
      for (size_t i = 0; i < urls->size(); ++i) {
        if (auto u = ParseWebhookUrl((*urls)[i]); !u.ok()) {
          return Bad(absl::StrCat("sweep.notify.urls[", i, "]"), std::string(u.status().message()));
        }
      }
      out.notify_urls = *urls;
    }
    if (notify["on"].IsDefined()) {
      auto on = strings(notify["on"], "sweep.notify.on", 4);
      if (!on.ok()) return on.status();
      for (std::string& e : *on) {
        e = absl::AsciiStrToUpper(e);
        if (e != "SUCCEEDED" && e != "FAILED" && e != "CANCELLED" && e != "BEST") {
          return Bad("sweep.notify.on", absl::StrCat("'", e, "': one of SUCCEEDED, FAILED, CANCELLED, BEST"));
        }
      }
      out.notify_on = *on;
    }
  }
  if (out.max_trials < 0 || out.max_trials > 10000) return Bad("sweep.max_trials", "0 … 10000");
  if (out.concurrency < 1 || out.concurrency > 1000) return Bad("sweep.concurrency", "1 … 1000");
  const bool grid = out.searcher.kind == SweepSearcher::Kind::kGrid;
  if (grid) {
    for (const SweepParameter& p : out.parameters) {
      if (p.kind == SweepParameter::Kind::kUniform || p.kind == SweepParameter::Kind::kLogUniform) {
        return Bad("sweep.parameters." + p.path, "a grid takes choice lists and int ranges, not real ranges");
      }
    }
    if (GridSize(out.parameters) == 0) return Bad("sweep.parameters", "a grid of over 1,000,000 trials");
  } else if (out.max_trials == 0) {
    return Bad("sweep.max_trials", "random and ASHA searches need a number of trials (1 … 10000)");
  }
  if (out.searcher.kind == SweepSearcher::Kind::kPbt) {
    if (out.max_steps <= 0) return NoLength(length, "a PBT");
    if (out.searcher.perturbation_interval <= 0 || out.searcher.perturbation_interval >= out.max_steps) {
      return Bad("sweep.searcher.perturbation_interval",
                 absl::StrCat("steps between exploits, above 0 and below ", length, " (", out.max_steps, ")"));
    }
    if (!(out.searcher.quantile > 0 && out.searcher.quantile <= 0.5)) {
      return Bad("sweep.searcher.quantile", "the share of the population replaced and copied, in (0, 0.5]");
    }
    if (!(out.searcher.resample_probability >= 0 && out.searcher.resample_probability <= 1)) {
      return Bad("sweep.searcher.resample_probability", "0 … 1");
    }
    if (out.max_trials < 2) return Bad("sweep.max_trials", "a PBT population of at least 2");
    if (out.concurrency < out.max_trials) {
      return Bad("sweep.concurrency",
                 absl::StrCat("a PBT population trains together: at least max_trials (", out.max_trials, ")"));
    }
  }
  if (out.searcher.kind == SweepSearcher::Kind::kAsha) {
    if (out.searcher.reduction_factor < 2 || out.searcher.reduction_factor > 100) {
      return Bad("sweep.searcher.reduction_factor", "2 … 100");
    }
    if (out.max_steps <= 0) return NoLength(length, "an ASHA");
    if (out.searcher.min_steps <= 0 || out.searcher.min_steps >= out.max_steps) {
      return Bad("sweep.searcher.min_steps",
                 absl::StrCat("the first rung, above 0 and below ", length, " (", out.max_steps, ")"));
    }
  }
  return out;
}

}  // namespace trainyard
