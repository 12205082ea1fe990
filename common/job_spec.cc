#include "common/job_spec.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <stdexcept>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/launch_sections.h"
#include "common/model_layers.h"
#include "common/spec_reader.h"

namespace trainyard {
namespace {

using namespace spec_reader;  // NOLINT: the parser is written in the reader's terms

constexpr int64_t kMaxInt = std::numeric_limits<int32_t>::max();
constexpr char kDataKinds[] = "synthetic, mnist:DIR, tokens:FILE_OR_DIR, tensors:FILE_OR_DIR, image_folder:DIR";

void ParseModel(const YAML::Node& node, const std::string& path, ModelSpec* m) {
  if (node.IsScalar()) {  // shorthand: `model: mlp`
    YAML::Node map(YAML::NodeType::Map);
    map["kind"] = node.Scalar();
    ParseModel(map, path, m);
    return;
  }
  MapReader r(node, path);
  if (YAML::Node k = r.Child("kind"); k && k.IsScalar() && Lower(k.Scalar()).rfind("torchscript:", 0) == 0) {
    m->kind = ModelKind::kTorchScript;
    m->path = k.Scalar().substr(std::strlen("torchscript:"));
    if (!ValidUtf8(m->path)) Fail(r.PathOf("kind"), "must be valid UTF-8");
    if (m->path.empty() || m->path.size() > kMaxPath)
      Fail(r.PathOf("kind"), "torchscript:PATH needs the path of a saved TorchScript module");
  } else {
    r.Enum<ModelKind>("kind", &m->kind, kModelKindNames);
    if (m->kind == ModelKind::kTorchScript)
      Fail(r.PathOf("kind"), "torchscript:PATH needs the path of a saved TorchScript module");
  }
  if (YAML::Node h = r.Child("hidden")) {
    const std::string p = r.PathOf("hidden");
    if (!h.IsSequence()) Fail(p, "must be a list of layer widths, got " + Describe(h));
    if (h.size() > 64) Fail(p, "must have at most 64 layers");
    m->hidden.clear();
    for (size_t i = 0; i < h.size(); ++i) {
      const std::string pi = absl::StrCat(p, "[", i, "]");
      int64_t w = 0;
      try {
        w = h[i].as<int64_t>();
      } catch (const YAML::Exception&) {
        Fail(pi, "must be an integer, got " + Describe(h[i]));
      }
      if (w < 1 || w > (1 << 16)) Fail(pi, absl::StrCat("must be between 1 and 65536, got ", w));
      m->hidden.push_back(w);
    }
  }
  r.Int("input_size", &m->input_size, 1, 1 << 20);
  r.Int("num_classes", &m->num_classes, 2, 1 << 20);
  r.Int("layers", &m->layers, 1, 256);
  r.Int("width", &m->width, 8, 1 << 14);
  r.Int("heads", &m->heads, 1, 256);
  r.Int("context", &m->context, 2, 1 << 16);
  r.Int("vocab", &m->vocab, 2, 1 << 20);
  r.Bool("tied_head", &m->tied_head);
  r.Int("channels", &m->channels, 1, 4096);
  r.Int("image_size", &m->image_size, 8, 1024);
  r.String("config", &m->config, kMaxPath);
  r.String("init_from", &m->init_from, kMaxPath);
  r.Bool("init_from_strict", &m->init_from_strict);
  r.String("init_from_prefix", &m->init_from_prefix, kMaxName);
  r.RejectUnknown();
  if (m->init_from.empty()) {
    for (const char* key : {"init_from_strict", "init_from_prefix"}) {
      if (r.Has(key)) Fail(r.PathOf(key), "applies with init_from (a safetensors file or directory)");
    }
  }
  for (const char* key : {"channels", "image_size"}) {
    if (m->kind != ModelKind::kResNet && r.Has(key)) Fail(r.PathOf(key), "applies to the resnet model only");
  }
  if (m->kind == ModelKind::kTorchScript || m->kind == ModelKind::kResNet) {
    for (const char* key : {"hidden", "input_size"}) {
      if (key == std::string("input_size") && m->kind == ModelKind::kTorchScript) continue;  // its flat input width
      if (r.Has(key)) Fail(r.PathOf(key), absl::StrCat("does not apply to the ", ModelKindName(m->kind), " model"));
    }
  }
  const bool gpt = m->kind == ModelKind::kGpt;
  const bool llama = m->kind == ModelKind::kLlama;
  for (const char* key : {"layers", "width", "heads", "vocab", "tied_head"}) {
    if (llama && r.Has(key)) {
      Fail(r.PathOf(key), "does not apply to the llama model: its architecture is its config.json's (model.config)");
    }
    if (!gpt && r.Has(key)) Fail(r.PathOf(key), "applies to the gpt model only");
  }
  if (!gpt && !llama && r.Has("context")) Fail(r.PathOf("context"), "applies to the gpt and llama models only");
  for (const char* key : {"hidden", "input_size", "num_classes"}) {
    if (gpt && r.Has(key))
      Fail(r.PathOf(key), "does not apply to the gpt model (it uses layers, width, heads, context, vocab)");
    if (llama && r.Has(key)) Fail(r.PathOf(key), "does not apply to the llama model (it uses config and context)");
  }
  if (!llama && r.Has("config")) Fail(r.PathOf("config"), "applies to the llama model only (its config.json)");
  if (llama && m->config.empty() && m->init_from.empty()) {
    Fail(Join(path, "config"),
         "the llama model needs its architecture: config (a config.json) or init_from (a Hugging Face model "
         "directory with config.json)");
  }
  if (gpt && m->width % m->heads != 0) {
    Fail(Join(path, "heads"), absl::StrCat("must divide width (", m->width, "), got ", m->heads));
  }
  if (m->kind == ModelKind::kCnn && m->input_size != 784) {
    Fail(Join(path, "input_size"), "the cnn model takes 1x28x28 images: input_size must be 784");
  }
}

void ParseData(const YAML::Node& node, const std::string& path, DataSpec* d) {
  MapReader r(node, path);
  if (YAML::Node k = r.Child("kind"); k && k.IsScalar() && k.Scalar().find(':') != std::string::npos) {
    const std::string v = k.Scalar();
    const std::string prefix = Lower(v.substr(0, v.find(':')));
    d->path = v.substr(v.find(':') + 1);
    if (!ValidUtf8(v)) Fail(r.PathOf("kind"), "must be valid UTF-8");
    const std::optional<DataKind> kind = ValueOf(kDataKindNames, prefix);
    if (kind && *kind != DataKind::kSynthetic) {
      d->kind = *kind;
    } else {
      Fail(r.PathOf("kind"), absl::StrCat("unknown value '", v, "'; accepted: ", kDataKinds));
    }
    if (d->path.empty() || d->path.size() > kMaxPath)
      Fail(r.PathOf("kind"), absl::StrCat(prefix, ":PATH needs a path"));
    if (r.Has("path")) Fail(r.PathOf("path"), "give the path in kind (" + prefix + ":PATH) or here, not both");
  } else {
    r.Enum<DataKind>("kind", &d->kind, kDataKindNames);
    r.String("path", &d->path, kMaxPath);
    if (d->kind != DataKind::kSynthetic && d->path.empty()) {
      Fail(r.PathOf("path"),
           absl::StrCat("data kind ", DataKindName(d->kind), " needs a path; accepted kinds: ", kDataKinds));
    }
    if (d->kind == DataKind::kSynthetic && r.Has("path")) Fail(r.PathOf("path"), "synthetic data has no path");
  }
  r.Enum<TokenDtype>("token_dtype", &d->token_dtype, kTokenDtypeNames);
  if (d->kind != DataKind::kTokens && r.Has("token_dtype"))
    Fail(r.PathOf("token_dtype"), "applies to data kind tokens");
  r.String("inputs", &d->inputs, kMaxName);
  r.String("targets", &d->targets, kMaxName);
  r.Double("eval_fraction", &d->eval_fraction, 0.0, 0.9);
  r.String("eval_path", &d->eval_path, kMaxPath);
  r.Int("resize", &d->resize, 0, 8192);
  r.Int("crop_size", &d->crop_size, 0, 8192);
  r.Bool("random_crop", &d->random_crop);
  r.Bool("random_flip", &d->random_flip);
  r.Doubles("mean", &d->mean, 3, -1e3, 1e3);
  r.Doubles("std", &d->std, 3, 1e-6, 1e3);
  if (d->kind != DataKind::kTensors) {
    for (const char* key : {"inputs", "targets"}) {
      if (r.Has(key)) Fail(r.PathOf(key), "applies to data kind tensors");
    }
  }
  if (d->kind != DataKind::kTensors && d->kind != DataKind::kImageFolder) {
    for (const char* key : {"eval_fraction", "eval_path"}) {
      if (r.Has(key)) Fail(r.PathOf(key), "applies to data kinds tensors and image_folder");
    }
  }
  if (d->kind != DataKind::kImageFolder) {
    for (const char* key : {"resize", "crop_size", "random_crop", "random_flip", "mean", "std"}) {
      if (r.Has(key)) Fail(r.PathOf(key), "applies to data kind image_folder");
    }
  }
  if (r.Has("mean") != r.Has("std")) Fail(r.PathOf(r.Has("mean") ? "std" : "mean"), "give mean and std together");
  if (d->eval_fraction > 0 && !d->eval_path.empty()) {
    Fail(r.PathOf("eval_fraction"), "give eval_fraction or eval_path, not both");
  }
  r.Int("batch_size", &d->batch_size, 1, 1 << 16);
  r.Int("num_samples", &d->num_samples, 1, int64_t{1} << 34);
  r.Int("seed", &d->seed, 0, std::numeric_limits<int64_t>::max());
  r.Bool("shuffle", &d->shuffle);
  r.Bool("drop_last", &d->drop_last);
  r.Int("num_workers", &d->num_workers, 0, 64);
  r.Int("prefetch_batches", &d->prefetch_batches, 1, 1024);
  r.RejectUnknown();
}

void ParseScheduler(const YAML::Node& node, const std::string& path, SchedulerSpec* sc) {
  if (node.IsScalar()) {  // shorthand: scheduler: cosine
    YAML::Node map(YAML::NodeType::Map);
    map["kind"] = node.Scalar();
    ParseScheduler(map, path, sc);
    return;
  }
  MapReader r(node, path);
  r.Enum<SchedulerKind>("kind", &sc->kind, kSchedulerKindNames);
  r.Int("warmup_steps", &sc->warmup_steps, 0, int64_t{1} << 40);
  r.RejectUnknown();
}

void ParseOptimizer(const YAML::Node& node, const std::string& path, OptimizerSpec* o) {
  MapReader r(node, path);
  r.Enum<OptimizerKind>("kind", &o->kind, kOptimizerKindNames);
  r.Double("lr", &o->lr, 0.0, 1e3);
  r.Double("weight_decay", &o->weight_decay, 0.0, 1e3);
  r.Double("momentum", &o->momentum, 0.0, 1.0);
  if (YAML::Node b = r.Child("betas")) {
    const std::string p = r.PathOf("betas");
    if (!b.IsSequence() || b.size() != 2) Fail(p, "must be a list of two numbers [beta1, beta2]");
    try {
      o->beta1 = b[0].as<double>();
      o->beta2 = b[1].as<double>();
    } catch (const YAML::Exception&) {
      Fail(p, "must be a list of two numbers [beta1, beta2]");
    }
    if (!(o->beta1 >= 0 && o->beta1 < 1 && o->beta2 >= 0 && o->beta2 < 1)) {
      Fail(p, "each beta must be in [0, 1)");
    }
  }
  r.Double("eps", &o->eps, 0.0, 1.0);
  r.RejectUnknown();
  if (o->kind == OptimizerKind::kSgd && r.Has("betas")) Fail(r.PathOf("betas"), "applies to adamw only");
  if (o->kind == OptimizerKind::kSgd && r.Has("eps")) Fail(r.PathOf("eps"), "applies to adamw only");
  if (o->kind == OptimizerKind::kAdamW && r.Has("momentum")) Fail(r.PathOf("momentum"), "applies to sgd only");
}

void ParseDdp(const YAML::Node& node, const std::string& path, DdpSpec* d) {
  MapReader r(node, path);
  r.Double("bucket_cap_mb", &d->bucket_cap_mb, 0.001, 4096);
  r.Enum<CommHookType>("comm_hook", &d->comm_hook, kCommHookNames);
  r.Enum<CommWrapper>("comm_wrapper", &d->comm_wrapper, kCommWrapperNames);
  const bool power_sgd = d->comm_hook == CommHookType::kPowerSgd || d->comm_hook == CommHookType::kBatchedPowerSgd;
  if (d->comm_wrapper != CommWrapper::kNone && !power_sgd) {
    Fail(r.PathOf("comm_wrapper"), absl::StrCat("'", CommWrapperName(d->comm_wrapper),
                                                "' wraps a stateful hook (power_sgd, batched_power_sgd); "
                                                "with comm_hook '",
                                                CommHookName(d->comm_hook), "' use comm_hook: fp16 or bf16 instead"));
  }
  if (YAML::Node opts = r.Child("comm_state_option")) {
    const std::string p = r.PathOf("comm_state_option");
    if (!opts.IsMap()) Fail(p, "must be a mapping of PowerSGD options, got " + Describe(opts));
    if (opts.size() > 0 && !power_sgd) {
      Fail(p, absl::StrCat("comm_hook '", CommHookName(d->comm_hook),
                           "' is stateless and takes no options; they apply to power_sgd and batched_power_sgd"));
    }
    MapReader o(opts, p);
    PowerSgdOptions& ps = d->power_sgd;
    o.Int("matrix_approximation_rank", &ps.matrix_approximation_rank, 1, 1 << 16);
    o.Int("start_powerSGD_iter", &ps.start_powerSGD_iter, 0, int64_t{1} << 40);
    o.Double("min_compression_rate", &ps.min_compression_rate, 0.0, 1e12);
    o.Bool("use_error_feedback", &ps.use_error_feedback);
    o.Bool("warm_start", &ps.warm_start);
    o.Double("orthogonalization_epsilon", &ps.orthogonalization_epsilon, 0.0, 1.0);
    o.Int("random_seed", &ps.random_seed, 0, std::numeric_limits<int64_t>::max());
    o.Bool("batch_tensors_with_same_shape", &ps.batch_tensors_with_same_shape);
    o.RejectUnknown();
    if ((ps.use_error_feedback || ps.warm_start) && ps.start_powerSGD_iter <= 1) {
      Fail(o.PathOf("start_powerSGD_iter"),
           "must be > 1 when use_error_feedback or warm_start is on (DDP rebuilds its buckets after the first "
           "step), as in PyTorch");
    }
    if (ps.batch_tensors_with_same_shape && d->comm_hook == CommHookType::kBatchedPowerSgd) {
      Fail(o.PathOf("batch_tensors_with_same_shape"),
           "applies to power_sgd; batched_power_sgd already compresses the whole bucket as one matrix");
    }
  }
  r.Bool("find_unused_parameters", &d->find_unused_parameters);
  r.Bool("gradient_as_bucket_view", &d->gradient_as_bucket_view);
  r.Bool("broadcast_buffers", &d->broadcast_buffers);
  r.Enum<IntraHostTransport>("intra_host_transport", &d->intra_host_transport, kIntraHostTransportNames);
  r.RejectUnknown();
  if (d->comm_hook != CommHookType::kNone && d->intra_host_transport == IntraHostTransport::kSharedMemory) {
    Fail(r.PathOf("intra_host_transport"),
         "'shm' carries uncompressed fp32 gradients; comm hooks compress for the process group: use auto or "
         "process_group with a comm_hook");
  }
}

// `activation_checkpointing`: Accelerate's fsdp_activation_checkpointing,
// the same switch as the spec's top-level activation_checkpointing.
void ParseFsdp(const YAML::Node& node, const std::string& path, FsdpSpec* f, bool* activation_checkpointing) {
  MapReader r(node, path);
  if (YAML::Node n = r.Child("fsdp_sharding_strategy")) {
    // Accelerate takes the name or its number (1..5).
    const std::string p = r.PathOf("fsdp_sharding_strategy");
    const auto& names = kShardingStrategyNames;
    if (!n.IsScalar()) Fail(p, "must be a strategy name or number, got " + Describe(n));
    const std::string v = n.Scalar();
    bool found = false;
    std::string accepted;
    for (size_t i = 0; i < std::size(names); ++i) {
      if (v == std::to_string(i + 1) || Lower(v) == Lower(names[i].name)) {
        f->sharding_strategy = names[i].value;
        found = true;
      }
      absl::StrAppend(&accepted, i ? ", " : "", names[i].name, " (", i + 1, ")");
    }
    if (!found) Fail(p, absl::StrCat("unknown value '", v, "'; accepted: ", accepted));
  }
  r.Enum<WrapPolicy>("fsdp_auto_wrap_policy", &f->auto_wrap_policy, kWrapPolicyNames);
  if (YAML::Node n = r.Child("fsdp_transformer_layer_cls_to_wrap")) {
    const std::string p = r.PathOf("fsdp_transformer_layer_cls_to_wrap");
    std::vector<std::string> names;
    if (n.IsScalar()) {  // Accelerate writes "Block" or "BlockA,BlockB"
      names = SplitCommaList(n.Scalar());
    } else if (n.IsSequence()) {
      for (const auto& e : n) {
        if (!e.IsScalar()) Fail(p, "must list layer type names");
        names.push_back(e.Scalar());
      }
    } else {
      Fail(p, "must be a layer type name, a comma-separated list or a list, got " + Describe(n));
    }
    if (names.empty() || names.size() > 64) Fail(p, "must name between 1 and 64 layer types");
    for (const std::string& name : names) {
      if (name.size() > kMaxName || !ValidUtf8(name)) Fail(p, "layer type names are UTF-8, at most 128 characters");
    }
    f->transformer_layer_cls_to_wrap = names;
  }
  r.Int("fsdp_min_num_params", &f->min_num_params, 1, int64_t{1} << 50);
  r.Bool("fsdp_offload_params", &f->offload_params);
  const auto& prefetch = kBackwardPrefetchNames;
  r.Enum<BackwardPrefetch>("fsdp_backward_prefetch", &f->backward_prefetch, prefetch);
  r.Enum<BackwardPrefetch>("fsdp_backward_prefetch_policy", &f->backward_prefetch, prefetch);
  if (r.Has("fsdp_backward_prefetch") && r.Has("fsdp_backward_prefetch_policy")) {
    Fail(r.PathOf("fsdp_backward_prefetch_policy"), "give fsdp_backward_prefetch or its older name, not both");
  }
  r.Bool("fsdp_forward_prefetch", &f->forward_prefetch);
  r.Bool("fsdp_activation_checkpointing", activation_checkpointing);
  r.Enum<StateDictType>("fsdp_state_dict_type", &f->state_dict_type, kStateDictTypeNames, {"LOCAL_STATE_DICT"});
  r.Bool("fsdp_sync_module_states", &f->sync_module_states);
  r.Bool("fsdp_use_orig_params", &f->use_orig_params);
  r.Bool("fsdp_cpu_ram_efficient_loading", &f->cpu_ram_efficient_loading);
  r.Int("ranks_per_node", &f->ranks_per_node, 0, 1 << 16);
  r.RejectUnknown();
  if (f->cpu_ram_efficient_loading && !f->sync_module_states) {
    Fail(r.PathOf("fsdp_sync_module_states"),
         "must be true with fsdp_cpu_ram_efficient_loading (only rank 0 loads weights), as in Accelerate");
  }
}

void ParseCheckpoint(const YAML::Node& node, const std::string& path, CheckpointSpec* c) {
  MapReader r(node, path);
  r.String("project_dir", &c->project_dir, kMaxPath);
  r.Int("every_steps", &c->every_steps, 0, int64_t{1} << 40);
  r.Int("total_limit", &c->total_limit, 0, 1 << 20);
  r.String("resume_from", &c->resume_from, kMaxPath);
  r.String("max_shard_size", &c->max_shard_size, 32);
  try {
    ParseSize(c->max_shard_size);
  } catch (const std::invalid_argument& e) {
    Fail(r.PathOf("max_shard_size"), e.what());
  }
  r.Enum<CheckpointType>("type", &c->type, kCheckpointTypeNames);
  r.Enum<SaveDtype>("save_dtype", &c->save_dtype, kSaveDtypeNames);
  r.Bool("save_final", &c->save_final);
  r.Bool("async", &c->async);
  r.Int("snapshot_every_steps", &c->snapshot_every_steps, 0, int64_t{1} << 40);
  r.RejectUnknown();
  for (const auto& [key, value] :
       {std::pair<const char*, const std::string*>{"project_dir", &c->project_dir}, {"resume_from", &c->resume_from}}) {
    if (value->find('\0') != std::string::npos) Fail(r.PathOf(key), "must not contain NUL characters");
  }
}

// Rules between fields (each field's own range is checked as it is read);
// throws SpecError naming the field at fault.
void CheckCrossField(const JobSpec& s, const SpecLimits& limits) {
  if (s.num_processes < 1 || s.num_processes > limits.max_num_processes) {
    Fail("num_processes", absl::StrCat("must be between 1 and ", limits.max_num_processes, ", got ", s.num_processes));
  }
  if (s.num_processes % s.slurm.nodes != 0) {
    Fail("slurm.nodes", absl::StrCat("must divide num_processes (", s.num_processes, "), got ", s.slurm.nodes));
  }
  if (s.scheduler.warmup_steps > s.max_steps) {
    Fail("scheduler.warmup_steps",
         absl::StrCat("must be at most max_steps (", s.max_steps, "), got ", s.scheduler.warmup_steps));
  }
  if (s.loss == LossKind::kMse && s.model.kind != ModelKind::kTorchScript) {
    Fail("loss", "mse applies to torchscript models (the built-in models are classifiers)");
  }
  if (s.fsdp.ranks_per_node > 0 && s.num_processes % s.fsdp.ranks_per_node != 0) {
    Fail("fsdp_config.ranks_per_node",
         absl::StrCat("must divide num_processes (", s.num_processes, "), got ", s.fsdp.ranks_per_node));
  }
  if (s.fsdp.auto_wrap_policy == WrapPolicy::kTransformerBased) {
    const std::vector<std::string> types = ModelLayerTypes(s.model.kind);
    if (s.fsdp.transformer_layer_cls_to_wrap.empty()) {
      Fail("fsdp_config.fsdp_transformer_layer_cls_to_wrap",
           absl::StrCat("is required with TRANSFORMER_BASED_WRAP for the ", ModelKindName(s.model.kind),
                        " model (it has no repeated transformer layer to infer); its layer types: ",
                        absl::StrJoin(types, ", ")));
    }
    for (const std::string& name : s.fsdp.transformer_layer_cls_to_wrap) {
      if (std::find(types.begin(), types.end(), name) == types.end()) {
        Fail("fsdp_config.fsdp_transformer_layer_cls_to_wrap",
             absl::StrCat("the ", ModelKindName(s.model.kind), " model has no layer of type '", name,
                          "'; its layer types: ", absl::StrJoin(types, ", ")));
      }
    }
  }
  if (s.distributed_type == DistributedType::kFsdp && s.ddp.comm_hook != CommHookType::kNone) {
    Fail("ddp.comm_hook", "applies to distributed_type DDP, not FSDP");
  }
  if (s.backend == Backend::kNccl && s.device != Device::kCuda) {
    Fail("backend", "'nccl' carries CUDA tensors only: it needs device cuda (use gloo or auto for cpu)");
  }
  if (s.mixed_precision == MixedPrecision::kFp16 && s.device == Device::kCpu &&
      s.distributed_type == DistributedType::kFsdp) {
    Fail("mixed_precision", "'fp16' with FSDP needs device cuda: LibTorch has no fp16 matrix kernels on CPU; use bf16");
  }
  // Models and data that do not fit together fail here, not in the workers.
  if ((s.data.kind == DataKind::kTensors || s.data.kind == DataKind::kImageFolder) && s.eval_every_steps > 0 &&
      s.data.eval_fraction == 0 && s.data.eval_path.empty()) {
    Fail("data.eval_fraction", absl::StrCat("evaluation (eval_every_steps) on ", DataKindName(s.data.kind),
                                            " data needs eval_fraction or eval_path"));
  }
  const bool token_model = s.model.kind == ModelKind::kGpt || s.model.kind == ModelKind::kLlama;
  if (s.data.kind == DataKind::kImageFolder &&
      (token_model || s.model.kind == ModelKind::kTorchScript || s.model.kind == ModelKind::kMlp)) {
    Fail("data.kind",
         absl::StrCat("image_folder:DIR feeds the image models (resnet, cnn), not ", ModelKindName(s.model.kind)));
  }
  if (s.data.kind == DataKind::kImageFolder && s.model.kind == ModelKind::kCnn && s.data.crop_size != 0 &&
      s.data.crop_size != 28) {
    Fail("data.crop_size", absl::StrCat("the cnn model takes 28x28 images, got crop_size ", s.data.crop_size));
  }
  if (s.data.kind == DataKind::kImageFolder && s.model.kind == ModelKind::kResNet && s.data.crop_size != 0 &&
      s.data.crop_size != s.model.image_size) {
    Fail("data.crop_size", absl::StrCat("the resnet model takes ", s.model.image_size, "x", s.model.image_size,
                                        " images (model.image_size), got crop_size ", s.data.crop_size));
  }
  if (s.data.kind == DataKind::kTokens && !token_model) {
    Fail("data.kind", "tokens:FILE feeds the token models (gpt, llama) only");
  }
  if (token_model && (s.data.kind == DataKind::kMnist || s.data.kind == DataKind::kTensors)) {
    Fail("data.kind", absl::StrCat(DataKindName(s.data.kind), " data does not feed the ", ModelKindName(s.model.kind),
                                   " model: it takes token ids (tokens:FILE or synthetic)"));
  }
  if (s.data.kind == DataKind::kMnist &&
      (s.model.kind == ModelKind::kResNet ||
       ((s.model.kind == ModelKind::kMlp || s.model.kind == ModelKind::kTorchScript) && s.model.input_size != 784))) {
    Fail("data.kind", "mnist:DIR images have 784 pixels; the model takes other inputs");
  }
  if (s.activation_checkpointing && !ModelWrapLayer(s.model.kind)) {
    Fail("activation_checkpointing", absl::StrCat("applies to the transformer models (gpt, llama): the ",
                                                  ModelKindName(s.model.kind), " model has no layer to recompute"));
  }
  if (s.activation_checkpointing && s.model.kind == ModelKind::kResNet) {
    Fail("activation_checkpointing",
         "applies to the transformer models (gpt, llama): recomputing a resnet block would update its BatchNorm "
         "statistics twice");
  }
  if (s.distributed_type == DistributedType::kNo && s.num_processes != 1) {
    Fail("num_processes", absl::StrCat("distributed_type NO runs one process; got ", s.num_processes));
  }
}

JobSpec ParseRoot(const YAML::Node& root, const SpecLimits& limits) {
  JobSpec s;
  MapReader r(root, "");
  r.String("name", &s.name, kMaxName);
  if (s.name.empty()) Fail("name", "must not be empty");
  for (char c : s.name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) {
      Fail("name", "may contain only letters, digits, '-', '_' and '.'");
    }
  }
  if (YAML::Node n = r.Child("script")) {
    ParseScript(n, "script", &s.script);
    // The script does its own training: a field only Trainyard's trainer
    // reads would be silently ignored, so it is refused instead.
    for (const char* key : kScriptRefusedTrainerFields) {
      if (root[key]) Fail(key, "applies to built-in models; a script job's script sets it (script.args)");
    }
    for (const char* key : kScriptRefusedAccelerateFields) {
      if (root[key]) Fail(key, "a script job takes it from its Accelerate config (--accelerate-config)");
    }
  }
  if (YAML::Node n = r.Child("model")) ParseModel(n, "model", &s.model);
  if (YAML::Node n = r.Child("data")) ParseData(n, "data", &s.data);
  if (YAML::Node n = r.Child("optimizer")) ParseOptimizer(n, "optimizer", &s.optimizer);
  if (YAML::Node n = r.Child("ddp")) ParseDdp(n, "ddp", &s.ddp);
  r.Bool("activation_checkpointing", &s.activation_checkpointing);
  if (YAML::Node n = r.Child("fsdp_config")) {
    const bool top = s.activation_checkpointing;
    ParseFsdp(n, "fsdp_config", &s.fsdp, &s.activation_checkpointing);
    if (r.Has("activation_checkpointing") && s.activation_checkpointing != top) {
      Fail("fsdp_config.fsdp_activation_checkpointing", "contradicts activation_checkpointing; give one of them");
    }
  }
  r.Int("max_steps", &s.max_steps, 1, int64_t{1} << 40);
  r.Int("num_processes", &s.num_processes, 1, limits.max_num_processes);
  r.Enum<Device>("device", &s.device, kDeviceNames);
  r.Enum<Backend>("backend", &s.backend, kBackendNames);
  r.Enum<DistributedType>("distributed_type", &s.distributed_type, kDistributedTypeNames);
  r.Enum<MixedPrecision>("mixed_precision", &s.mixed_precision, kMixedPrecisionNames);
  r.Int("seed", &s.seed, 0, std::numeric_limits<int64_t>::max());
  r.Int("threads_per_process", &s.threads_per_process, 1, 256);
  r.Int("metrics_every_steps", &s.metrics_every_steps, 1, kMaxInt);
  r.Int("max_restarts", &s.max_restarts, 0, 1000);
  r.Double("step_timeout_s", &s.step_timeout_s, 0.0, 7 * 86400.0);
  r.Double("reattach_timeout_s", &s.reattach_timeout_s, 1.0, 86400.0);
  r.Bool("preemptible", &s.preemptible);
  r.Double("preemption_grace_s", &s.preemption_grace_s, 1.0, 86400.0);
  r.String("priority", &s.priority, kMaxName);
  for (const char* key : {"owner", "group", "user"}) {
    if (r.Has(key)) Fail(key, "a job belongs to the user who submits it (their token); a spec cannot name one");
  }
  r.Double("max_grad_norm", &s.max_grad_norm, 0.0, 1e9);
  if (YAML::Node n = r.Child("checkpoint")) ParseCheckpoint(n, "checkpoint", &s.checkpoint);
  r.Int("gradient_accumulation_steps", &s.gradient_accumulation_steps, 1, 1 << 16);
  r.Double("clip_grad_value", &s.clip_grad_value, 0.0, 1e9);
  if (YAML::Node n = r.Child("scheduler")) ParseScheduler(n, "scheduler", &s.scheduler);
  r.Enum<LossKind>("loss", &s.loss, kLossKindNames);
  r.Int("eval_every_steps", &s.eval_every_steps, 0, int64_t{1} << 40);
  r.Int("eval_batches", &s.eval_batches, 1, 1 << 20);
  r.Enum<LauncherKind>("launcher", &s.launcher, kLauncherKindNames);
  if (YAML::Node n = r.Child("slurm")) ParseSlurm(n, "slurm", &s.slurm);
  r.RejectUnknown();
  if (s.fsdp.auto_wrap_policy == WrapPolicy::kTransformerBased && s.fsdp.transformer_layer_cls_to_wrap.empty()) {
    // As Accelerate: the model's own transformer layer when none is named.
    if (const std::optional<std::string> layer = ModelWrapLayer(s.model.kind)) {
      s.fsdp.transformer_layer_cls_to_wrap = {*layer};
    }
  }
  // Mistral's and Qwen2's decoder layers are the llama model's.
  if (s.model.kind == ModelKind::kLlama) {
    for (std::string& name : s.fsdp.transformer_layer_cls_to_wrap) {
      if (name == "MistralDecoderLayer" || name == "Qwen2DecoderLayer") name = "LlamaDecoderLayer";
    }
  }
  CheckCrossField(s, limits);
  return s;
}

}  // namespace

SpecLimits AcceptedSpecLimits() {
  SpecLimits limits;
  limits.max_num_processes = kMaxNumProcessesCeiling;
  limits.max_spec_bytes = std::numeric_limits<size_t>::max();
  return limits;
}

absl::Status ValidateJobSpec(const JobSpec& spec, const SpecLimits& limits) {
  try {
    CheckCrossField(spec, limits);
  } catch (const SpecError& e) {
    return absl::InvalidArgumentError(e.message);
  }
  return absl::OkStatus();
}

absl::StatusOr<JobSpec> ParseJobSpec(const std::string& text, const SpecLimits& limits) {
  if (text.size() > limits.max_spec_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec is ", text.size(), " bytes; the limit is ", limits.max_spec_bytes));
  }
  if (!ValidUtf8(text)) return absl::InvalidArgumentError("spec is not valid UTF-8 text");
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("spec is not valid YAML or JSON: ", e.what()));
  }
  if (!root || root.IsNull()) return absl::InvalidArgumentError("spec is empty");
  try {
    return ParseRoot(root, limits);
  } catch (const SpecError& e) {
    return absl::InvalidArgumentError(e.message);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("spec could not be read: ", e.what()));
  }
}

}  // namespace trainyard
