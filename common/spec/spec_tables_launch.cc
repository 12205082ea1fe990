// The field tables of the slurm and script sections (spec_tables.h).
#include <cctype>
#include <cstring>
#include <iterator>
#include <limits>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include "common/progress_pattern.h"
#include "common/spec/spec_rules.h"
#include "common/spec/spec_tables.h"
#include "common/spec/table_helpers.h"

namespace trainyard::spec {

// ---- slurm, script ----

// Characters of Slurm option values we pass through: no whitespace, quotes
// or shell syntax (they go to sbatch as single arguments, never to a shell).
static bool SlurmSafe(const std::string& v) {
  for (char c : v) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || std::strchr("-_.:,=+/@%[]()|&!*", c) != nullptr)) {
      return false;
    }
  }
  return true;
}

static Field<SlurmSpec> SlurmString(std::string name, std::string SlurmSpec::*m, std::string doc) {
  Field<SlurmSpec> f = Str(name, m, kMaxName, std::move(doc));
  f.accepted = "letters, digits and -_.:,=+/@%[]()|&!*";
  f.read = [name, m](MapReader& r, SlurmSpec* s, const ReadContext&) {
    r.String(name, &(s->*m), kMaxName);
    if (!SlurmSafe(s->*m)) Fail(r.PathOf(name), "may contain only letters, digits and -_.:,=+/@%[]()|&!*");
  };
  return f;
}

// The sbatch options a job may add (slurm.extra_args): what it asks of the
// cluster (memory, GPUs, nodes, time, mail). Not those that change what runs,
// as whom, in which environment or directory, or where output goes
// (--export, --chdir, --output, --wrap, --uid, --container...): the batch
// script runs as the service account, and such an option makes it run the
// user's code. An operator adds any option for every job: --slurm-sbatch-arg.
constexpr const char* kSbatchAllowed[] = {"--acctg-freq",
                                          "--begin",
                                          "--comment",
                                          "--constraint",
                                          "--contiguous",
                                          "--core-spec",
                                          "--cores-per-socket",
                                          "--cpu-freq",
                                          "--cpus-per-gpu",
                                          "--cpus-per-task",
                                          "--deadline",
                                          "--dependency",
                                          "--distribution",
                                          "--exclude",
                                          "--exclusive",
                                          "--gpu-bind",
                                          "--gpus",
                                          "--gpus-per-node",
                                          "--gpus-per-socket",
                                          "--gpus-per-task",
                                          "--gres",
                                          "--gres-flags",
                                          "--hint",
                                          "--licenses",
                                          "--mail-type",
                                          "--mail-user",
                                          "--mem",
                                          "--mem-bind",
                                          "--mem-per-cpu",
                                          "--mem-per-gpu",
                                          "--mincpus",
                                          "--network",
                                          "--nice",
                                          "--no-requeue",
                                          "--nodelist",
                                          "--overcommit",
                                          "--oversubscribe",
                                          "--requeue",
                                          "--reservation",
                                          "--sockets-per-node",
                                          "--spread-job",
                                          "--switches",
                                          "--thread-spec",
                                          "--threads-per-core",
                                          "--time-min",
                                          "--tmp",
                                          "--use-min-nodes",
                                          "--wckey"};

static bool SbatchAllowed(std::string_view arg) {
  const std::string_view name = arg.substr(0, arg.find('='));
  for (const char* a : kSbatchAllowed) {
    if (name == a) return true;
  }
  return false;
}

const Section<SlurmSpec>& SlurmTable() {
  using S = SlurmSpec;
  static const Section<S> sec = [] {
    Section<S> s;
    Field<S> extra = Own(
        "extra_args", &S::extra_args, "list of strings", "at most 64 options, each `--name[=value]`",
        "Further sbatch options.", [](MapReader& r, S* s, const ReadContext&) {
          YAML::Node n = r.Child("extra_args");
          if (!n) return;
          const std::string p = r.PathOf("extra_args");
          if (!n.IsSequence())
            Fail(p, "must be a list of sbatch options like --exclusive or --mem=8G, got " + Describe(n));
          if (n.size() > 64) Fail(p, "must have at most 64 entries");
          for (const auto& e : n) {
            if (!e.IsScalar() || e.Scalar().size() > kMaxName || e.Scalar().rfind("--", 0) != 0 ||
                !SlurmSafe(e.Scalar())) {
              Fail(p,
                   "each entry must be one sbatch option starting with -- (letters, digits and "
                   "-_.:,=+/@%[]()|&!*), got " +
                       Describe(e));
            }
            if (!SbatchAllowed(e.Scalar())) {
              Fail(p,
                   absl::StrCat(e.Scalar().substr(0, e.Scalar().find('=')),
                                " is not an sbatch option a job may pass: it would change what runs, as whom, in "
                                "which environment or directory, or where output goes, which the launcher sets (an "
                                "operator may add any option for every job with trainyard-server --slurm-sbatch-arg). "
                                "Allowed: ",
                                absl::StrJoin(kSbatchAllowed, ", ")));
            }
            s->extra_args.push_back(e.Scalar());
          }
        });
    extra.random = [](Rng& g, S* s) {
      s->extra_args.assign(static_cast<size_t>(g.Int(0, 3)), "");
      for (std::string& a : s->extra_args) {
        a = std::string(kSbatchAllowed[g.Int(0, std::size(kSbatchAllowed) - 1)]);
      }
    };
    s.fields = {
        Int("nodes", &S::nodes, 1, 1 << 16, "sbatch --nodes (must divide `num_processes`)."),
        SlurmString("partition", &S::partition, "--partition"),
        SlurmString("account", &S::account, "--account"),
        SlurmString("qos", &S::qos, "--qos"),
        SlurmString("time_limit", &S::time_limit, "--time"),
        SlurmString("constraint", &S::constraint, "--constraint"),
        std::move(extra),
    };
    return s;
  }();
  return sec;
}

const Section<ScriptSpec>& ScriptTable() {
  using S = ScriptSpec;
  static const Section<S> sec = [] {
    Section<S> s;
    Field<S> progress = Str("progress", &S::progress, 1024, "An RE2 pattern reading progress from rank 0's output.");
    progress.read = [](MapReader& r, S* s, const ReadContext&) {
      r.String("progress", &s->progress, 1024);
      if (!s->progress.empty()) {
        if (auto p = ProgressPattern::Compile(s->progress); !p.ok())
          Fail(r.PathOf("progress"), std::string(p.status().message()));
      }
    };
    progress.random = [](Rng& g, S* s) { s->progress = g.Coin() ? "" : "step (?P<step>\\d+)"; };
    Field<S> args = Own("args", &S::args, "list of strings", "at most 1024", "The script's arguments.",
                        [](MapReader& r, S* s, const ReadContext&) {
                          if (YAML::Node n = r.Child("args")) {
                            s->args =
                                StringList(n, r.PathOf("args"), 1024, kMaxPath, "each entry must be a string, got ");
                          }
                        });
    args.random = [](Rng& g, S* s) {
      s->args.assign(static_cast<size_t>(g.Int(0, 3)), "");
      for (std::string& a : s->args) a = g.Word(0, 10, kWordChars);
    };
    Field<S> env =
        Own("env", &S::env, "mapping", "at most 256 `NAME: value` (not `TRAINYARD_*`)",
            "Added to each rank's environment.", [](MapReader& r, S* s, const ReadContext&) {
              YAML::Node n = r.Child("env");
              if (!n) return;
              const std::string p = r.PathOf("env");
              if (!n.IsMap()) Fail(p, "must be a mapping of NAME: value, got " + Describe(n));
              if (n.size() > 256) Fail(p, "must have at most 256 entries");
              for (const auto& kv : n) {
                const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "";
                bool ok = !key.empty() && key.size() <= 128 && !std::isdigit(static_cast<unsigned char>(key[0]));
                for (char c : key) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
                if (!ok)
                  Fail(p, "names must be letters, digits and '_' (not starting with a digit), got '" + key + "'");
                if (key.rfind("TRAINYARD_", 0) == 0) Fail(p + "." + key, "TRAINYARD_ variables are set by Trainyard");
                if (!kv.second.IsScalar() || kv.second.Scalar().size() > kMaxPath) {
                  Fail(p + "." + key, "must be a string, got " + Describe(kv.second));
                }
                s->env[key] = kv.second.Scalar();
              }
            });
    env.random = [](Rng& g, S* s) {
      s->env.clear();
      for (int64_t i = g.Int(0, 3); i > 0; --i) s->env["V" + g.Word(1, 6, "ABCXYZ_019")] = g.Word(0, 8, kWordChars);
    };
    s.fields = {
        Str("path", &S::path, kMaxPath, "The script (required), under the allowed roots.").Random([](Rng& g, S* s) {
          s->path = g.Word(1, 20, kPathChars);
        }),
        Str("python", &S::python, kMaxPath, "The interpreter; empty: the server's --script-python."),
        Str("working_dir", &S::working_dir, kMaxPath, "Empty: the script's directory."),
        Str("accelerate_config", &S::accelerate_config, 1 << 20,
            "The Accelerate config (YAML) of the ranks' "
            "variables."),
        std::move(progress),
        std::move(args),
        std::move(env),
    };
    s.after = [](MapReader& r, S* s, const ReadContext&) { CheckScript(r, *s); };
    return s;
  }();
  return sec;
}

}  // namespace trainyard::spec
