#include "common/accelerate_config.h"
#include "common/accelerate_keys.h"
#include "common/hf_layers.h"
#include "common/model_layers.h"
#include "common/spec/spec_reader.h"
#include "common/spec/yaml_keys.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <map>
#include <set>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace trainyard {
namespace {

constexpr char kRoot[] = "accelerate_config";

// A config with more warnings than this is almost certainly not one that
// `accelerate config` wrote; the rest are summed up in one line so that a
// submission cannot flood the job's events.
constexpr size_t kMaxWarnings = 64;

using accelerate_keys::AcceptedKeys;
using accelerate_keys::FindIgnored;
using accelerate_keys::IgnoredKey;
using accelerate_keys::IsEmpty;
using accelerate_keys::kFsdp1Only;
using spec_reader::Lower;

std::string Upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

absl::Status FieldError(const std::string& path, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("spec field '", path, "': ", what));
}

// A node as the person wrote it, for messages: the scalar, or flow YAML.
std::string Show(const YAML::Node& node) {
  if (!node || node.IsNull()) return "null";
  if (node.IsScalar()) return node.Scalar();
  YAML::Emitter out;
  out << YAML::Flow << node;
  return out.c_str();
}

bool ScalarIs(const YAML::Node& n, const char* value) { return n && n.IsScalar() && Lower(n.Scalar()) == value; }

// What a value means, for telling whether the config changes a value the
// spec set: case-insensitive, booleans and integers by value, layer lists
// item by item, and Accelerate's aliases folded (MULTI_CPU and MULTI_GPU are
// DDP; sharding strategy 1 is FULL_SHARD).
std::string Meaning(const std::string& key, const YAML::Node& n) {
  if (!n || n.IsNull()) return "null";
  if (n.IsSequence()) {
    std::vector<std::string> items;
    for (const auto& e : n) items.push_back(Meaning(key, e));
    return absl::StrJoin(items, ",");
  }
  if (!n.IsScalar()) return Show(n);
  std::string v = Lower(n.Scalar());
  if (key == "fsdp_transformer_layer_cls_to_wrap") {
    v.erase(std::remove(v.begin(), v.end(), ' '), v.end());
    return v;
  }
  if (key == "distributed_type" && (v == "multi_cpu" || v == "multi_gpu")) return "ddp";
  if (key == "fsdp_sharding_strategy") {
    const char* names[] = {"full_shard", "shard_grad_op", "no_shard", "hybrid_shard", "hybrid_shard_zero2"};
    for (int i = 0; i < 5; ++i) {
      if (v == std::to_string(i + 1)) return names[i];
    }
  }
  bool b = false;
  if (YAML::convert<bool>::decode(n, b)) return b ? "true" : "false";
  int64_t i = 0;
  if (YAML::convert<int64_t>::decode(n, i)) return std::to_string(i);
  return v;
}

absl::StatusOr<int64_t> IntValue(const YAML::Node& n, const std::string& path) {
  int64_t v = 0;
  if (!n.IsScalar() || !YAML::convert<int64_t>::decode(n, v))
    return FieldError(path, "must be an integer, got " + Show(n));
  return v;
}

// Applies one Accelerate config to the YAML tree of a spec.
class ConfigMerge {
 public:
  explicit ConfigMerge(YAML::Node spec) : spec_(std::move(spec)) {}

  absl::Status Apply(const YAML::Node& config) {
    if (!config.IsMap()) return FieldError(kRoot, "must be a mapping of Accelerate's keys, got " + Describe(config));
    for (const auto& kv : config) {
      if (!kv.first.IsScalar()) return FieldError(kRoot, "keys must be strings, got " + Show(kv.first));
      if (auto s = ApplyKey(kv.first.Scalar(), kv.second); !s.ok()) return s;
    }
    // MULTI_GPU means GPUs unless the config asks for the CPU: a server
    // without them says so at submit instead of training on the CPU.
    if (distributed_type_ == "MULTI_GPU" && !use_cpu_) {
      const std::string path = absl::StrCat(kRoot, ".distributed_type");
      Set(spec_, "device", YAML::Node("cuda"), "device", path, YAML::Node("MULTI_GPU"));
    }
    InferLayerClasses();
    return absl::OkStatus();
  }

  // Renames the field of a ParseJobSpec error to the config's key when the
  // config supplied that field's value.
  absl::Status Attribute(const absl::Status& error) const {
    const std::string kPrefix = "spec field '";
    const std::string message(error.message());
    if (!absl::StartsWith(message, kPrefix)) return error;
    const size_t end = message.find('\'', kPrefix.size());
    if (end == std::string::npos) return error;
    const std::string field(message.substr(kPrefix.size(), end - kPrefix.size()));
    for (auto it = owned_.rbegin(); it != owned_.rend(); ++it) {  // longest matching prefix first
      const std::string& path = it->first;
      if (field == path ||
          (absl::StartsWith(field, path) && (field[path.size()] == '.' || field[path.size()] == '['))) {
        return absl::InvalidArgumentError(
            absl::StrCat(kPrefix, it->second, field.substr(path.size()), message.substr(end)));
      }
    }
    return error;
  }

  const YAML::Node& spec() const { return spec_; }
  // The config's distributed_type in upper case, or "" when it has none.
  const std::string& distributed_type() const { return distributed_type_; }

  // Records a warning; past kMaxWarnings only counts it.
  void Warn(std::string warning) {
    ++warned_;
    if (warned_ <= kMaxWarnings) warnings_.push_back(std::move(warning));
  }

  // The warnings, with one line standing for those past kMaxWarnings.
  std::vector<std::string> warnings() const {
    std::vector<std::string> out = warnings_;
    if (warned_ > kMaxWarnings) {
      out.push_back(absl::StrCat(warned_ - kMaxWarnings, " further accelerate_config warnings omitted"));
    }
    return out;
  }

 private:
  static std::string Describe(const YAML::Node& n) {
    if (!n || n.IsNull()) return "null";
    if (n.IsSequence()) return "a list";
    if (n.IsMap()) return "a mapping";
    return "'" + n.Scalar() + "'";
  }

  absl::Status Ignore(const IgnoredKey& ignored, const std::string& path, const YAML::Node& value) {
    const std::string full = absl::StrCat(kRoot, ".", path);
    if (ignored.accepts != nullptr && !ignored.accepts(value)) {
      return FieldError(full, absl::StrCat(ignored.refusal, "; got ", Show(value)));
    }
    Warn(absl::StrCat(full, " is ignored: ", ignored.why));
    return absl::OkStatus();
  }

  // Sets map[key] = value, recording that the spec's `spec_path` now holds the
  // config's `config_path`, and a warning when it replaces another value.
  // `shown` is the config's own value, when it differs from what is set.
  void Set(YAML::Node map, const std::string& key, const YAML::Node& value, const std::string& spec_path,
           const std::string& config_path, const YAML::Node& shown) {
    const YAML::Node& const_map = map;
    if (const YAML::Node old = const_map[key]; old && Meaning(key, old) != Meaning(key, value)) {
      Warn(absl::StrCat(config_path, " (", Show(shown), ") overrides the spec's ", spec_path, " (", Show(old), ")"));
    }
    map[key] = YAML::Clone(value);
    owned_[spec_path] = config_path;
  }

  absl::Status ApplyKey(const std::string& key, const YAML::Node& value) {
    const std::string path = absl::StrCat(kRoot, ".", key);
    if (key == "distributed_type") {
      if (auto s = CheckDistributedType(value, path); !s.ok()) return s;
      distributed_type_ = Upper(value.Scalar());
      Set(spec_, key, value, key, path, value);
    } else if (key == "mixed_precision") {
      if (ScalarIs(value, "fp8")) {
        return FieldError(path, "'fp8' is not supported by this version; accepted: no, bf16, fp16");
      }
      Set(spec_, key, value, key, path, value);
    } else if (key == "num_processes" || key == "gradient_accumulation_steps") {
      Set(spec_, key, value, key, path, value);  // ParseJobSpec checks the value
    } else if (key == "fsdp_config") {
      return MergeFsdp(value, path);
    } else if (key == "use_cpu") {
      bool cpu = false;
      if (!value.IsScalar() || !YAML::convert<bool>::decode(value, cpu)) {
        return FieldError(path, "must be true or false, got " + Show(value));
      }
      use_cpu_ = cpu;
      if (cpu) Set(spec_, "device", YAML::Node("cpu"), "device", path, value);
    } else if (key == "num_machines") {
      auto n = IntValue(value, path);
      if (!n.ok()) return n.status();
      if (*n < 1) return FieldError(path, absl::StrCat("must be at least 1, got ", *n));
      if (*n > 1) {
        // Machines are Slurm's nodes: num_processes stays the world size.
        if (!spec_["slurm"]) spec_["slurm"] = YAML::Node(YAML::NodeType::Map);
        Set(spec_["slurm"], "nodes", value, "slurm.nodes", path, value);
      }
    } else if (key == "machine_rank") {
      auto n = IntValue(value, path);
      if (!n.ok()) return n.status();
      if (*n < 0) return FieldError(path, absl::StrCat("must be >= 0, got ", *n));
      if (*n != 0) {
        Warn(absl::StrCat(path, " is ignored: it is ", *n,
                          " but the job runs on one machine (num_machines 1), whose rank is 0"));
      }
    } else if (const IgnoredKey* ignored = FindIgnored(key)) {
      return Ignore(*ignored, key, value);
    } else {
      return FieldError(path, absl::StrCat("unknown key; accepted keys: ", AcceptedKeys()));
    }
    return absl::OkStatus();
  }

  static absl::Status CheckDistributedType(const YAML::Node& value, const std::string& path) {
    static const char* const kAccepted[] = {"NO", "MULTI_CPU", "MULTI_GPU", "FSDP"};
    // Accelerate's other types: real, but not implemented here.
    static const char* const kUnsupported[] = {"DEEPSPEED", "MEGATRON_LM", "XLA",        "TPU",       "MULTI_XPU",
                                               "MULTI_NPU", "MULTI_MLU",   "MULTI_MUSA", "MULTI_HPU", "MULTI_SDAA"};
    const std::string accepted = absl::StrJoin(kAccepted, ", ");
    if (!value.IsScalar()) return FieldError(path, absl::StrCat("must be one of: ", accepted, "; got ", Show(value)));
    const std::string v = Upper(value.Scalar());
    for (const char* a : kAccepted) {
      if (v == a) return absl::OkStatus();
    }
    for (const char* u : kUnsupported) {
      if (v == u) {
        return FieldError(path,
                          absl::StrCat("'", value.Scalar(), "' is not supported by Trainyard; accepted: ", accepted));
      }
    }
    return FieldError(path, absl::StrCat("unknown value '", value.Scalar(), "'; accepted: ", accepted));
  }

  absl::Status MergeFsdp(const YAML::Node& config, const std::string& config_path) {
    if (IsEmpty(config)) return absl::OkStatus();  // Accelerate writes fsdp_config: {} when FSDP is off
    if (!config.IsMap()) return FieldError(config_path, "must be a mapping, got " + Describe(config));
    // Handles into the tree are only ever copy-constructed: assigning to a
    // yaml-cpp node overwrites the node it refers to.
    const YAML::Node& const_spec = spec_;
    if (!const_spec["fsdp_config"]) {
      spec_["fsdp_config"] = YAML::Node(YAML::NodeType::Map);
      owned_["fsdp_config"] = config_path;
    }
    YAML::Node fsdp = const_spec["fsdp_config"];
    if (!fsdp.IsMap()) return FieldError("fsdp_config", "must be a mapping, got " + Describe(fsdp));
    auto version = FsdpVersion(config, config_path);
    if (!version.ok()) return version.status();
    for (const auto& kv : config) {
      if (!kv.first.IsScalar()) return FieldError(config_path, "keys must be strings, got " + Show(kv.first));
      const std::string key = kv.first.Scalar();
      if (key == "fsdp_version") continue;
      if (*version == 2) {
        if (auto s = MergeFsdp2Key(fsdp, key, kv.second, config_path); !s.ok()) return s;
        if (handled_) continue;
      }
      if (const IgnoredKey* ignored = FindIgnored("fsdp_config." + key)) {
        if (auto s = Ignore(*ignored, "fsdp_config." + key, kv.second); !s.ok()) return s;
        continue;
      }
      const std::string path = absl::StrCat(config_path, ".", key);
      const YAML::Node value =
          key == "fsdp_transformer_layer_cls_to_wrap" && model_is_gpt() ? GptLayers(kv.second, path) : kv.second;
      if (key == "fsdp_backward_prefetch" || key == "fsdp_backward_prefetch_policy") {
        // One setting under two names: the spec's, under either, gives way.
        const std::string other =
            key == "fsdp_backward_prefetch" ? "fsdp_backward_prefetch_policy" : "fsdp_backward_prefetch";
        const YAML::Node& const_fsdp = fsdp;
        if (YAML::Node old = const_fsdp[other]) {
          if (Meaning(key, old) != Meaning(key, value)) {
            Warn(absl::StrCat(path, " (", Show(value), ") overrides the spec's fsdp_config.", other, " (", Show(old),
                              ")"));
          }
          fsdp.remove(other);
        }
      }
      Set(fsdp, key, value, "fsdp_config." + key, path, kv.second);
    }
    return absl::OkStatus();
  }

  // fsdp_version: 1 (FSDP1's options, the default) or 2 (FSDP2's, mapped
  // onto the same sharding: see MergeFsdp2Key).
  absl::StatusOr<int> FsdpVersion(const YAML::Node& config, const std::string& config_path) {
    const YAML::Node v = config["fsdp_version"];
    if (!v || v.IsNull()) return 1;
    const std::string path = absl::StrCat(config_path, ".fsdp_version");
    auto n = IntValue(v, path);
    if (!n.ok()) return n.status();
    if (*n != 1 && *n != 2) return FieldError(path, absl::StrCat("accepted: 1, 2; got ", *n));
    if (*n == 2) {
      Warn(absl::StrCat(path,
                        " 2: FSDP2's options are mapped onto Trainyard's FSDP (fsdp_reshard_after_forward "
                        "true = FULL_SHARD, false = SHARD_GRAD_OP)"));
    }
    return static_cast<int>(*n);
  }

  // One key of an FSDP2 config. Sets handled_ when the key is dealt with
  // here; otherwise it means what it means under FSDP1.
  absl::Status MergeFsdp2Key(YAML::Node fsdp, const std::string& key, const YAML::Node& value,
                             const std::string& config_path) {
    const std::string path = absl::StrCat(config_path, ".", key);
    handled_ = true;
    if (key == "fsdp_reshard_after_forward") {
      bool reshard = true;
      if (!value.IsScalar() || !YAML::convert<bool>::decode(value, reshard)) {
        return FieldError(path,
                          "true (FULL_SHARD) or false (SHARD_GRAD_OP); resharding to a smaller group "
                          "(an integer) is not supported by this version; got " +
                              Show(value));
      }
      const YAML::Node strategy(reshard ? "FULL_SHARD" : "SHARD_GRAD_OP");
      const YAML::Node& const_fsdp = fsdp;
      if (reshard_set_ && Meaning("fsdp_sharding_strategy", const_fsdp["fsdp_sharding_strategy"]) !=
                              Meaning("fsdp_sharding_strategy", strategy)) {
        return FieldError(path, "contradicts the config's fsdp_sharding_strategy; give one of them");
      }
      reshard_set_ = true;
      Set(fsdp, "fsdp_sharding_strategy", strategy, "fsdp_config.fsdp_sharding_strategy", path, value);
      return absl::OkStatus();
    }
    if (key == "fsdp_sharding_strategy") {
      const YAML::Node& const_fsdp = fsdp;
      if (reshard_set_ && Meaning(key, const_fsdp[key]) != Meaning(key, value)) {
        return FieldError(path, "contradicts the config's fsdp_reshard_after_forward; give one of them");
      }
      reshard_set_ = true;
      handled_ = false;  // set as under FSDP1
      return absl::OkStatus();
    }
    if (key == "fsdp_cpu_ram_efficient_loading") {
      // FSDP2 loads on rank 0 and broadcasts without a separate switch.
      bool on = false;
      if (value.IsScalar() && YAML::convert<bool>::decode(value, on) && on) {
        Set(fsdp, "fsdp_sync_module_states", YAML::Node(true), "fsdp_config.fsdp_sync_module_states", path, value);
      }
      handled_ = false;
      return absl::OkStatus();
    }
    for (const char* only : kFsdp1Only) {
      if (key == only) {
        Warn(absl::StrCat(path, " is ignored: FSDP2 (fsdp_version 2) has no such option"));
        return absl::OkStatus();
      }
    }
    handled_ = false;
    return absl::OkStatus();
  }

  // TRANSFORMER_BASED_WRAP without fsdp_transformer_layer_cls_to_wrap: the
  // model's own transformer layer, as Accelerate takes it from the model
  // (the gpt model's Block, the resnet model's BasicBlock).
  void InferLayerClasses() {
    const YAML::Node& const_spec = spec_;
    const YAML::Node fsdp = const_spec["fsdp_config"];
    if (!fsdp || !fsdp.IsMap() || !ScalarIs(fsdp["fsdp_auto_wrap_policy"], "transformer_based_wrap") ||
        fsdp["fsdp_transformer_layer_cls_to_wrap"]) {
      return;
    }
    const std::optional<std::string> layer = ModelWrapLayer(model_kind());
    if (!layer) return;  // ParseJobSpec names what is missing
    Warn(absl::StrCat(kRoot, ".fsdp_config.fsdp_transformer_layer_cls_to_wrap is not given: the ", model_kind(),
                      " model's layer ", *layer, " is wrapped"));
  }

  std::string model_kind() const {
    const YAML::Node& const_spec = spec_;
    const YAML::Node model = const_spec["model"];
    const YAML::Node kind = model && model.IsMap() ? model["kind"] : model;
    return kind && kind.IsScalar() ? Lower(kind.Scalar()) : "mlp";
  }

  bool model_is_gpt() const {
    const YAML::Node& const_spec = spec_;
    const YAML::Node model = const_spec["model"];
    const YAML::Node kind = model && model.IsMap() ? model["kind"] : model;
    return kind && kind.IsScalar() && Lower(kind.Scalar()) == "gpt";
  }

  // The layer list with Hugging Face layer classes replaced by the gpt
  // model's Block, one warning each. A malformed value is returned as is,
  // for ParseJobSpec to name.
  YAML::Node GptLayers(const YAML::Node& value, const std::string& path) {
    std::vector<std::string> names;
    if (value.IsScalar()) {  // "BertLayer" or "A,B", as Accelerate writes it
      names = spec_reader::SplitCommaList(value.Scalar());
    } else if (value.IsSequence()) {
      for (const auto& e : value) {
        if (!e.IsScalar()) return value;
        names.push_back(e.Scalar());
      }
    } else {
      return value;
    }
    bool replaced = false;
    YAML::Node out(YAML::NodeType::Sequence);
    std::set<std::string> seen;
    for (const std::string& name : names) {
      std::string layer = name;
      if (IsHuggingFaceLayer(name)) {
        layer = "Block";
        replaced = true;
        Warn(absl::StrCat(path, ": ", name, " → the gpt model's Block (", name,
                          " is a Hugging Face transformers class; the gpt model's transformer layer is Block)"));
      }
      if (seen.insert(layer).second) out.push_back(layer);
    }
    return replaced ? out : value;
  }

  YAML::Node spec_;
  std::vector<std::string> warnings_;
  size_t warned_ = 0;  // including those not kept
  std::string distributed_type_;
  bool use_cpu_ = false;
  bool handled_ = false;      // MergeFsdp2Key dealt with its key
  bool reshard_set_ = false;  // FSDP2: the sharding strategy was given
  // Spec paths whose value the config supplied -> the config's path.
  std::map<std::string, std::string> owned_;
};

// Emits `node` as YAML, quoting the scalars that were quoted where they came
// from (yaml-cpp tags them "!"): a quoted 'no' stays a string for readers
// that resolve YAML 1.1 booleans.
void EmitKeepingQuotes(const YAML::Node& node, YAML::Emitter& out) {
  if (node.IsMap()) {
    out << YAML::BeginMap;
    for (const auto& kv : node) {
      out << YAML::Key;
      EmitKeepingQuotes(kv.first, out);
      out << YAML::Value;
      EmitKeepingQuotes(kv.second, out);
    }
    out << YAML::EndMap;
  } else if (node.IsSequence()) {
    out << YAML::BeginSeq;
    for (const auto& e : node) EmitKeepingQuotes(e, out);
    out << YAML::EndSeq;
  } else if (node.IsScalar()) {
    if (node.Tag() == "!") out << YAML::DoubleQuoted;
    out << node.Scalar();
  } else {
    out << YAML::Null;
  }
}

}  // namespace

absl::StatusOr<JobSpec> ParseJobSpecWithAccelerateConfig(const std::string& spec_text,
                                                         const std::string& accelerate_yaml, const SpecLimits& limits,
                                                         std::vector<std::string>* warnings) {
  if (spec_text.size() > limits.max_spec_bytes) return ParseJobSpec(spec_text, limits);  // its size error
  if (accelerate_yaml.size() > limits.max_spec_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("accelerate config is ", accelerate_yaml.size(), " bytes; the limit is ", limits.max_spec_bytes));
  }
  // Most specs name no accelerate config: they are parsed once, not here
  // and again (a spec of a megabyte takes yaml-cpp a tenth of a second).
  if (accelerate_yaml.empty() && spec_text.find(kRoot) == std::string::npos) return ParseJobSpec(spec_text, limits);
  YAML::Node root;
  try {
    root = YAML::Load(spec_text);
  } catch (const YAML::Exception&) {
    return ParseJobSpec(spec_text, limits);  // its message for invalid YAML
  }
  const YAML::Node& const_root = root;
  YAML::Node config;
  if (root.IsMap() && const_root[kRoot]) {
    if (!accelerate_yaml.empty()) {
      return FieldError(kRoot,
                        "the spec embeds an accelerate config and a separate one was given too; give one of them");
    }
    config = YAML::Clone(const_root[kRoot]);
    root.remove(kRoot);
  } else if (!accelerate_yaml.empty()) {
    try {
      config = YAML::Load(accelerate_yaml);
    } catch (const YAML::Exception& e) {
      return absl::InvalidArgumentError(absl::StrCat("accelerate config is not valid YAML: ", e.what()));
    }
    if (auto s = CheckNoDuplicateKeys(config, "accelerate config"); !s.ok()) return s;
  } else {
    // A spec without num_processes runs one process: the job's "launching 1
    // rank" says so (no note about an Accelerate config it never named).
    return ParseJobSpec(spec_text, limits);
  }
  if (!root.IsMap()) return ParseJobSpec(spec_text, limits);  // its message for a spec that is not a mapping

  if (const_root["script"]) {
    // A script job: the config is the script's, as `accelerate launch
    // --config_file` would read it; only its process count is the spec's
    // when the spec names none. A config file's path is no config: refused
    // here, not by Accelerate in every rank at run time.
    if (!config.IsMap()) {
      return FieldError(kRoot, absl::StrCat("must be a mapping of Accelerate's keys, got ",
                                            config.IsSequence() ? "a list"
                                            : config.IsScalar() ? "'" + config.Scalar() +
                                                                      "' (a config file: trainctl submit "
                                                                      "--accelerate-config FILE sends it)"
                                                                : "null"));
    }
    try {
      if (!const_root["num_processes"] && config.IsMap() && config["num_processes"] &&
          config["num_processes"].IsScalar()) {
        root["num_processes"] = config["num_processes"].Scalar();
      }
      YAML::Emitter spec_out, config_out;
      spec_out << root;
      if (accelerate_yaml.empty()) {
        EmitKeepingQuotes(config, config_out);
      }
      SpecLimits merged_limits = limits;
      merged_limits.max_spec_bytes = std::max(limits.max_spec_bytes, spec_out.size());
      auto spec = ParseJobSpec(spec_out.c_str(), merged_limits);
      if (!spec.ok()) return spec.status();
      // The file as given (Accelerate reads `mixed_precision: no` unquoted as
      // a boolean: quoting is meaning); an embedded mapping re-emitted with
      // its quotes.
      spec->script.accelerate_config = accelerate_yaml.empty() ? std::string(config_out.c_str()) : accelerate_yaml;
      return spec;
    } catch (const YAML::Exception& e) {
      return absl::InvalidArgumentError(absl::StrCat("accelerate config could not be read: ", e.what()));
    }
  }

  try {
    ConfigMerge merge(root);
    if (auto s = merge.Apply(config); !s.ok()) return s;
    YAML::Emitter out;
    out << merge.spec();
    // The merged text holds both inputs, each within the limit already.
    SpecLimits merged_limits = limits;
    merged_limits.max_spec_bytes = std::max(limits.max_spec_bytes, out.size());
    auto spec = ParseJobSpec(out.c_str(), merged_limits);
    if (!spec.ok()) return merge.Attribute(spec.status());
    const std::string& type = merge.distributed_type();
    if ((type == "MULTI_GPU" && spec->device == Device::kCpu) ||
        (type == "MULTI_CPU" && spec->device == Device::kCuda)) {
      merge.Warn(absl::StrCat(kRoot, ".distributed_type ", type, " runs as DDP on the spec's device ",
                              DeviceName(spec->device)));
    }
    if (warnings != nullptr) {
      for (std::string& w : merge.warnings()) warnings->push_back(std::move(w));
    }
    return spec;
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("accelerate config could not be applied: ", e.what()));
  }
}

}  // namespace trainyard
