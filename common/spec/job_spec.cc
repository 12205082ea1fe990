#include "common/spec/job_spec.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/spec/model_traits.h"
#include "common/spec/spec_reader.h"
#include "common/spec/spec_tables.h"
#include "common/spec/step_capture.h"
#include "common/spec/yaml_keys.h"

namespace trainyard {
namespace {

using namespace spec_reader;  // NOLINT: the parser is written in the reader's terms

// fault_tolerance and elastic against the rest of the spec.
void CheckFaultTolerance(const JobSpec& s) {
  if (s.elastic.enabled() && !s.replicas()) {
    Fail("elastic.min_processes", "an elastic job needs fault_tolerance.mode replica (its ranks come and go)");
  }
  if (!s.replicas()) return;
  if (!s.script.empty()) {
    Fail("fault_tolerance.mode",
         "replica applies to built-in models: a script's ranks cannot rebuild their process group, so a script job "
         "restarts as a whole group (whole_group)");
  }
  if (s.distributed_type != DistributedType::kDdp && s.distributed_type != DistributedType::kFsdp) {
    Fail("fault_tolerance.mode",
         absl::StrCat("replica needs distributed_type DDP (each rank a replica) or FSDP with a HYBRID strategy (each "
                      "shard group a replica), got ",
                      DistributedTypeName(s.distributed_type)));
  }
  if (s.num_processes < 2) Fail("fault_tolerance.mode", "replica needs num_processes of at least 2");
  const int32_t unit = s.ranks_per_replica();
  if (s.distributed_type == DistributedType::kFsdp && unit == s.num_processes) {
    Fail("fsdp_config.fsdp_sharding_strategy",
         s.fsdp.sharding_strategy == ShardingStrategy::kHybridShard ||
                 s.fsdp.sharding_strategy == ShardingStrategy::kHybridShardZero2
             ? absl::StrCat("with fault_tolerance.mode replica each shard group is a replica: set "
                            "fsdp_config.ranks_per_node below num_processes (",
                            s.num_processes, ") so that there are at least two")
             : std::string("with fault_tolerance.mode replica each shard group is a replica: use HYBRID_SHARD or "
                           "HYBRID_SHARD_ZERO2 with fsdp_config.ranks_per_node, or NO_SHARD (FULL_SHARD and "
                           "SHARD_GRAD_OP shard over every rank: one replica)"));
  }
  const int32_t replicas = s.num_processes / unit;
  if (s.fault_tolerance.min_replicas > replicas) {
    Fail("fault_tolerance.min_replicas",
         unit == 1 ? absl::StrCat("must be at most num_processes (", s.num_processes, "), got ",
                                  s.fault_tolerance.min_replicas)
                   : absl::StrCat("must be at most the number of shard groups (", replicas, ": num_processes ",
                                  s.num_processes, " / fsdp_config.ranks_per_node ", unit, "), got ",
                                  s.fault_tolerance.min_replicas));
  }
  if (s.elastic.enabled() && s.elastic.min_processes % unit != 0) {
    Fail("elastic.min_processes", absl::StrCat("an elastic job grows and shrinks by whole shard groups: must be a "
                                               "multiple of fsdp_config.ranks_per_node (",
                                               unit, "), got ", s.elastic.min_processes));
  }
  if (s.ddp.comm_hook == CommHookType::kPowerSgd || s.ddp.comm_hook == CommHookType::kBatchedPowerSgd) {
    Fail("ddp.comm_hook", absl::StrCat(CommHookName(s.ddp.comm_hook),
                                       " keeps error feedback per rank, which a replacement replica cannot take "
                                       "over; with fault_tolerance.mode replica use no, fp16 or bf16"));
  }
  if (s.elastic.min_processes > s.num_processes) {
    Fail("elastic.min_processes",
         absl::StrCat("must be at most num_processes (", s.num_processes, "), got ", s.elastic.min_processes));
  }
  if (s.elastic.enabled() && s.elastic.min_processes / unit < s.fault_tolerance.min_replicas) {
    Fail("elastic.min_processes",
         absl::StrCat("must hold at least fault_tolerance.min_replicas (", s.fault_tolerance.min_replicas, ") ",
                      unit == 1 ? "ranks" : absl::StrCat("shard groups of ", unit, " ranks"),
                      ": a job shrunk below it would restart as a whole group; got ", s.elastic.min_processes));
  }
}

}  // namespace

int32_t JobSpec::hybrid_ranks_per_node() const {
  if (fsdp.ranks_per_node > 0) return num_processes % fsdp.ranks_per_node == 0 ? fsdp.ranks_per_node : num_processes;
  // Slurm places num_processes / nodes ranks on each node: a shard group
  // per node, as torchrun's HYBRID_SHARD mesh.
  if (slurm.nodes > 1 && num_processes % slurm.nodes == 0) return num_processes / slurm.nodes;
  return num_processes;
}

int32_t JobSpec::ranks_per_replica() const {
  if (distributed_type != DistributedType::kFsdp) return 1;
  switch (fsdp.sharding_strategy) {
    case ShardingStrategy::kNoShard: return 1;
    case ShardingStrategy::kHybridShard:
    case ShardingStrategy::kHybridShardZero2: return hybrid_ranks_per_node();
    case ShardingStrategy::kFullShard:
    case ShardingStrategy::kShardGradOp: return num_processes;
  }
  return num_processes;
}

namespace {

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
  if (s.loss == LossKind::kMse && TraitsOf(s.model.kind).classifier) {
    Fail("loss", "mse applies to torchscript models (the built-in models are classifiers)");
  }
  if (s.fsdp.ranks_per_node > 0 && s.num_processes % s.fsdp.ranks_per_node != 0) {
    Fail("fsdp_config.ranks_per_node",
         absl::StrCat("must divide num_processes (", s.num_processes, "), got ", s.fsdp.ranks_per_node));
  }
  if (s.fsdp.auto_wrap_policy == WrapPolicy::kTransformerBased) {
    const std::vector<std::string> types = TraitsOf(s.model.kind).layer_types;
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
  const ModelTraits& model = TraitsOf(s.model.kind);
  if (!model.Takes(s.data.kind)) {
    if (s.data.kind == DataKind::kImageFolder) {
      Fail("data.kind", absl::StrCat("image_folder:DIR feeds the image models (resnet, resnet50, cnn), not ",
                                     ModelKindName(s.model.kind)));
    }
    if (s.data.kind == DataKind::kTokens) Fail("data.kind", "tokens:FILE feeds the token models (gpt, llama) only");
    if (model.input == ModelInput::kTokens) {
      Fail("data.kind", absl::StrCat(DataKindName(s.data.kind), " data does not feed the ", ModelKindName(s.model.kind),
                                     " model: it takes token ids (tokens:FILE or synthetic)"));
    }
    Fail("data.kind", "mnist:DIR images have 784 pixels; the model takes other inputs");
  }
  if (s.data.kind == DataKind::kImageFolder && s.model.kind == ModelKind::kCnn && s.data.crop_size != 0 &&
      s.data.crop_size != 28) {
    Fail("data.crop_size", absl::StrCat("the cnn model takes 28x28 images, got crop_size ", s.data.crop_size));
  }
  if (s.data.kind == DataKind::kImageFolder && s.model.kind != ModelKind::kCnn && model.input == ModelInput::kImage &&
      s.data.crop_size != 0 && s.data.crop_size != s.model.image_size) {
    Fail("data.crop_size",
         absl::StrCat("the ", ModelKindName(s.model.kind), " model takes ", s.model.image_size, "x", s.model.image_size,
                      " images (model.image_size), got crop_size ", s.data.crop_size));
  }
  if (s.data.kind == DataKind::kMnist && model.input == ModelInput::kFlat && s.model.input_size != 784) {
    Fail("data.kind", "mnist:DIR images have 784 pixels; the model takes other inputs");
  }
  if (s.activation_checkpointing && !model.wrap_layer) {
    Fail("activation_checkpointing", absl::StrCat("applies to the transformer models (gpt, llama): the ",
                                                  ModelKindName(s.model.kind), " model has no layer to recompute"));
  }
  if (s.activation_checkpointing && !model.recomputes_wrap_layer) {
    Fail("activation_checkpointing",
         "applies to the transformer models (gpt, llama): recomputing a resnet or resnet50 block would update its "
         "BatchNorm statistics twice");
  }
  if (s.device == Device::kCpu &&
      (s.fused.attention == AttentionBackend::kEfficient || s.fused.attention == AttentionBackend::kCudnn)) {
    Fail("fused.attention", absl::StrCat("the ", AttentionBackendName(s.fused.attention),
                                         " backend runs on CUDA only; on the CPU: auto, flash or math"));
  }
  if (s.fused.cuda_graph == StepCapture::kOn) {
    if (const std::string why = StepCaptureRefusal(s); !why.empty()) {
      Fail("fused.cuda_graph", absl::StrCat("on: the step cannot be captured: ", why, " (auto runs it uncaptured)"));
    }
  }
  if (s.distributed_type == DistributedType::kNo && s.num_processes != 1) {
    Fail("num_processes", absl::StrCat("distributed_type NO runs one process; got ", s.num_processes));
  }
  CheckFaultTolerance(s);
}

// As Accelerate: the model's own transformer layer when none is named; the
// llama model's layer for Mistral's and Qwen2's (the same layer).
void FillWrapLayers(JobSpec* s) {
  if (s->fsdp.auto_wrap_policy == WrapPolicy::kTransformerBased && s->fsdp.transformer_layer_cls_to_wrap.empty()) {
    if (const std::optional<std::string>& layer = TraitsOf(s->model.kind).wrap_layer) {
      s->fsdp.transformer_layer_cls_to_wrap = {*layer};
    }
  }
  if (s->model.kind == ModelKind::kLlama) {
    for (std::string& name : s->fsdp.transformer_layer_cls_to_wrap) {
      if (name == "MistralDecoderLayer" || name == "Qwen2DecoderLayer") name = "LlamaDecoderLayer";
    }
  }
}

JobSpec ParseRoot(const YAML::Node& root, const SpecLimits& limits) {
  JobSpec s;
  spec::ReadSection(spec::JobSpecTable(), root, "", &s, spec::ReadContext{limits, root});
  FillWrapLayers(&s);
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
  if (auto s = CheckNoDuplicateKeys(root, "spec"); !s.ok()) return s;
  try {
    return ParseRoot(root, limits);
  } catch (const SpecError& e) {
    return absl::InvalidArgumentError(e.message);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("spec could not be read: ", e.what()));
  }
}

}  // namespace trainyard
