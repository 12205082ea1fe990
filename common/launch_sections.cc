#include "common/launch_sections.h"

#include <cctype>
#include <cstring>
#include <utility>

#include "common/progress_pattern.h"
#include "common/spec_reader.h"

namespace trainyard::spec_reader {

namespace {

// Characters of Slurm option values we pass through: no whitespace, quotes
// or shell syntax (they go to sbatch as single arguments, never to a shell).
bool SlurmSafe(const std::string& v) {
  for (char c : v) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || std::strchr("-_.:,=+/@%[]()|&!*", c) != nullptr)) {
      return false;
    }
  }
  return true;
}

}  // namespace

void ParseSlurm(const YAML::Node& node, const std::string& path, SlurmSpec* s) {
  MapReader r(node, path);
  r.Int("nodes", &s->nodes, 1, 1 << 16);
  for (const auto& [key, out] : {std::pair<const char*, std::string*>{"partition", &s->partition},
                                 {"account", &s->account},
                                 {"qos", &s->qos},
                                 {"time_limit", &s->time_limit},
                                 {"constraint", &s->constraint}}) {
    r.String(key, out, kMaxName);
    if (!SlurmSafe(*out)) {
      Fail(r.PathOf(key), "may contain only letters, digits and -_.:,=+/@%[]()|&!*");
    }
  }
  if (YAML::Node n = r.Child("extra_args")) {
    const std::string p = r.PathOf("extra_args");
    if (!n.IsSequence()) Fail(p, "must be a list of sbatch options like --exclusive or --mem=8G, got " + Describe(n));
    if (n.size() > 64) Fail(p, "must have at most 64 entries");
    for (const auto& e : n) {
      if (!e.IsScalar() || e.Scalar().size() > kMaxName || e.Scalar().rfind("--", 0) != 0 || !SlurmSafe(e.Scalar())) {
        Fail(p, "each entry must be one sbatch option starting with -- (letters, digits and -_.:,=+/@%[]()|&!*), got " +
                    Describe(e));
      }
      s->extra_args.push_back(e.Scalar());
    }
  }
  r.RejectUnknown();
}

void ParseScript(const YAML::Node& node, const std::string& path, ScriptSpec* s) {
  MapReader r(node, path);
  r.String("path", &s->path, kMaxPath);
  if (s->path.empty()) Fail(r.PathOf("path"), "is required: the Python script each rank runs");
  r.String("python", &s->python, kMaxPath);
  r.String("working_dir", &s->working_dir, kMaxPath);
  r.String("accelerate_config", &s->accelerate_config, 1 << 20);
  r.String("progress", &s->progress, 1024);
  if (!s->progress.empty()) {
    if (auto p = ProgressPattern::Compile(s->progress); !p.ok())
      Fail(r.PathOf("progress"), std::string(p.status().message()));
  }
  if (YAML::Node n = r.Child("args")) {
    const std::string p = r.PathOf("args");
    if (!n.IsSequence()) Fail(p, "must be a list of strings, got " + Describe(n));
    if (n.size() > 1024) Fail(p, "must have at most 1024 entries");
    for (const auto& e : n) {
      if (!e.IsScalar() || e.Scalar().size() > kMaxPath) Fail(p, "each entry must be a string, got " + Describe(e));
      s->args.push_back(e.Scalar());
    }
  }
  if (YAML::Node n = r.Child("env")) {
    const std::string p = r.PathOf("env");
    if (!n.IsMap()) Fail(p, "must be a mapping of NAME: value, got " + Describe(n));
    if (n.size() > 256) Fail(p, "must have at most 256 entries");
    for (const auto& kv : n) {
      const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "";
      bool ok = !key.empty() && key.size() <= 128 && !std::isdigit(static_cast<unsigned char>(key[0]));
      for (char c : key) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
      if (!ok) Fail(p, "names must be letters, digits and '_' (not starting with a digit), got '" + key + "'");
      if (key.rfind("TRAINYARD_", 0) == 0) Fail(p + "." + key, "TRAINYARD_ variables are set by Trainyard");
      if (!kv.second.IsScalar() || kv.second.Scalar().size() > kMaxPath) {
        Fail(p + "." + key, "must be a string, got " + Describe(kv.second));
      }
      s->env[key] = kv.second.Scalar();
    }
  }
  r.RejectUnknown();
}

}  // namespace trainyard::spec_reader
