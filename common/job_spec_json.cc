#include <nlohmann/json.hpp>

#include <cctype>
#include <map>
#include <stdexcept>
#include <string>

#include "common/job_spec.h"

namespace trainyard {

std::string JobSpecToJson(const JobSpec& s) {
  nlohmann::ordered_json j;
  j["name"] = s.name;
  if (!s.script.empty()) {
    j["script"] = {{"path", s.script.path},        {"args", s.script.args},
                   {"python", s.script.python},    {"working_dir", s.script.working_dir},
                   {"env", s.script.env},          {"accelerate_config", s.script.accelerate_config},
                   {"progress", s.script.progress}};
  }
  if (s.model.kind == ModelKind::kGpt) {
    j["model"] = {{"kind", ModelKindName(ModelKind::kGpt)},
                  {"layers", s.model.layers},
                  {"width", s.model.width},
                  {"heads", s.model.heads},
                  {"context", s.model.context},
                  {"vocab", s.model.vocab},
                  {"tied_head", s.model.tied_head}};
  } else if (s.model.kind == ModelKind::kLlama) {
    j["model"] = {{"kind", ModelKindName(ModelKind::kLlama)}, {"context", s.model.context}};
    if (!s.model.config.empty()) j["model"]["config"] = s.model.config;
  } else if (s.model.kind == ModelKind::kResNet) {
    j["model"] = {{"kind", ModelKindName(ModelKind::kResNet)},
                  {"channels", s.model.channels},
                  {"image_size", s.model.image_size},
                  {"num_classes", s.model.num_classes}};
  } else if (s.model.kind == ModelKind::kTorchScript) {
    j["model"] = {{"kind", "torchscript:" + s.model.path},
                  {"input_size", s.model.input_size},
                  {"num_classes", s.model.num_classes}};
  } else {
    j["model"] = {{"kind", ModelKindName(s.model.kind)},
                  {"hidden", s.model.hidden},
                  {"input_size", s.model.input_size},
                  {"num_classes", s.model.num_classes}};
  }
  if (!s.model.init_from.empty()) {
    j["model"]["init_from"] = s.model.init_from;
    j["model"]["init_from_strict"] = s.model.init_from_strict;
    j["model"]["init_from_prefix"] = s.model.init_from_prefix;
  }
  j["data"] = {
      {"kind", s.data.kind == DataKind::kSynthetic ? std::string("synthetic")
                                                   : std::string(DataKindName(s.data.kind)) + ":" + s.data.path},
      {"batch_size", s.data.batch_size},
      {"num_samples", s.data.num_samples},
      {"seed", s.data.seed},
      {"shuffle", s.data.shuffle},
      {"drop_last", s.data.drop_last},
      {"num_workers", s.data.num_workers},
      {"prefetch_batches", s.data.prefetch_batches}};
  if (s.data.kind == DataKind::kTokens) j["data"]["token_dtype"] = TokenDtypeName(s.data.token_dtype);
  if (s.data.kind == DataKind::kTensors) {
    j["data"]["inputs"] = s.data.inputs;
    j["data"]["targets"] = s.data.targets;
  }
  if (s.data.kind == DataKind::kTensors || s.data.kind == DataKind::kImageFolder) {
    j["data"]["eval_fraction"] = s.data.eval_fraction;
    j["data"]["eval_path"] = s.data.eval_path;
  }
  if (s.data.kind == DataKind::kImageFolder) {
    j["data"]["resize"] = s.data.resize;
    j["data"]["crop_size"] = s.data.crop_size;
    j["data"]["random_crop"] = s.data.random_crop;
    j["data"]["random_flip"] = s.data.random_flip;
    if (!s.data.mean.empty()) {
      j["data"]["mean"] = s.data.mean;
      j["data"]["std"] = s.data.std;
    }
  }
  nlohmann::ordered_json opt = {{"kind", OptimizerKindName(s.optimizer.kind)},
                                {"lr", s.optimizer.lr},
                                {"weight_decay", s.optimizer.weight_decay}};
  if (s.optimizer.kind == OptimizerKind::kSgd) {
    opt["momentum"] = s.optimizer.momentum;
  } else {
    opt["betas"] = {s.optimizer.beta1, s.optimizer.beta2};
    opt["eps"] = s.optimizer.eps;
  }
  j["optimizer"] = opt;
  j["max_steps"] = s.max_steps;
  j["num_processes"] = s.num_processes;
  j["device"] = DeviceName(s.device);
  j["backend"] = BackendName(s.backend);
  j["distributed_type"] = DistributedTypeName(s.distributed_type);
  j["mixed_precision"] = MixedPrecisionName(s.mixed_precision);
  j["ddp"] = {{"bucket_cap_mb", s.ddp.bucket_cap_mb},
              {"comm_hook", CommHookName(s.ddp.comm_hook)},
              {"comm_wrapper", CommWrapperName(s.ddp.comm_wrapper)},
              {"find_unused_parameters", s.ddp.find_unused_parameters},
              {"gradient_as_bucket_view", s.ddp.gradient_as_bucket_view},
              {"broadcast_buffers", s.ddp.broadcast_buffers},
              {"intra_host_transport", IntraHostTransportName(s.ddp.intra_host_transport)}};
  if (s.ddp.comm_hook == CommHookType::kPowerSgd || s.ddp.comm_hook == CommHookType::kBatchedPowerSgd) {
    const PowerSgdOptions& ps = s.ddp.power_sgd;
    j["ddp"]["comm_state_option"] = {{"matrix_approximation_rank", ps.matrix_approximation_rank},
                                     {"start_powerSGD_iter", ps.start_powerSGD_iter},
                                     {"min_compression_rate", ps.min_compression_rate},
                                     {"use_error_feedback", ps.use_error_feedback},
                                     {"warm_start", ps.warm_start},
                                     {"orthogonalization_epsilon", ps.orthogonalization_epsilon},
                                     {"random_seed", ps.random_seed},
                                     {"batch_tensors_with_same_shape", ps.batch_tensors_with_same_shape}};
  }
  if (s.distributed_type == DistributedType::kFsdp) {
    const FsdpSpec& f = s.fsdp;
    j["fsdp_config"] = {{"fsdp_sharding_strategy", ShardingStrategyName(f.sharding_strategy)},
                        {"fsdp_auto_wrap_policy", WrapPolicyName(f.auto_wrap_policy)},
                        {"fsdp_min_num_params", f.min_num_params},
                        {"fsdp_offload_params", f.offload_params},
                        {"fsdp_backward_prefetch", BackwardPrefetchName(f.backward_prefetch)},
                        {"fsdp_forward_prefetch", f.forward_prefetch},
                        {"fsdp_state_dict_type", StateDictTypeName(f.state_dict_type)},
                        {"fsdp_sync_module_states", f.sync_module_states},
                        {"fsdp_use_orig_params", f.use_orig_params},
                        {"fsdp_cpu_ram_efficient_loading", f.cpu_ram_efficient_loading},
                        {"ranks_per_node", f.ranks_per_node}};
    if (!f.transformer_layer_cls_to_wrap.empty()) {
      j["fsdp_config"]["fsdp_transformer_layer_cls_to_wrap"] = f.transformer_layer_cls_to_wrap;
    }
  }
  j["seed"] = s.seed;
  j["threads_per_process"] = s.threads_per_process;
  j["metrics_every_steps"] = s.metrics_every_steps;
  j["max_restarts"] = s.max_restarts;
  j["step_timeout_s"] = s.step_timeout_s;
  j["reattach_timeout_s"] = s.reattach_timeout_s;
  j["preemptible"] = s.preemptible;
  j["preemption_grace_s"] = s.preemption_grace_s;
  j["priority"] = s.priority;
  j["max_grad_norm"] = s.max_grad_norm;
  j["gradient_accumulation_steps"] = s.gradient_accumulation_steps;
  j["activation_checkpointing"] = s.activation_checkpointing;
  j["clip_grad_value"] = s.clip_grad_value;
  j["scheduler"] = {{"kind", SchedulerKindName(s.scheduler.kind)}, {"warmup_steps", s.scheduler.warmup_steps}};
  j["loss"] = LossKindName(s.loss);
  j["eval_every_steps"] = s.eval_every_steps;
  j["eval_batches"] = s.eval_batches;
  j["launcher"] = std::string(LauncherKindName(s.launcher));
  j["slurm"] = {{"nodes", s.slurm.nodes},           {"partition", s.slurm.partition},
                {"account", s.slurm.account},       {"qos", s.slurm.qos},
                {"time_limit", s.slurm.time_limit}, {"constraint", s.slurm.constraint},
                {"extra_args", s.slurm.extra_args}};
  const CheckpointSpec& c = s.checkpoint;
  j["checkpoint"] = {{"project_dir", c.project_dir},
                     {"every_steps", c.every_steps},
                     {"total_limit", c.total_limit},
                     {"resume_from", c.resume_from},
                     {"max_shard_size", c.max_shard_size},
                     {"save_dtype", SaveDtypeName(c.save_dtype)},
                     {"type", CheckpointTypeName(c.type)},
                     {"save_final", c.save_final},
                     {"async", c.async},
                     {"snapshot_every_steps", c.snapshot_every_steps}};
  if (!s.script.empty()) {
    for (const char* key : kScriptRefusedTrainerFields) j.erase(key);
    for (const char* key : kScriptRefusedAccelerateFields) j.erase(key);
  }
  // Strings were checked to be UTF-8; replace rather than throw all the same.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

int64_t ParseSize(const std::string& text) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  if (i == 0)
    throw std::invalid_argument("size '" + text + "': expected a number with an optional unit (e.g. 1GB, 500MB)");
  const double value = std::stod(text.substr(0, i));
  std::string unit = text.substr(i);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  unit.erase(0, unit.find_first_not_of(' '));
  const std::map<std::string, double> units = {
      {"", 1},      {"B", 1},      {"KB", 1e3},      {"MB", 1e6},      {"GB", 1e9},
      {"TB", 1e12}, {"KIB", 1024}, {"MIB", 1 << 20}, {"GIB", 1 << 30}, {"TIB", 1099511627776.0}};
  auto it = units.find(unit);
  if (it == units.end()) throw std::invalid_argument("size '" + text + "': unknown unit '" + unit + "'");
  const double bytes = value * it->second;
  if (!(bytes >= 1) || bytes > 9.0e18)
    throw std::invalid_argument("size '" + text + "': must be between 1 byte and 9EB");
  return static_cast<int64_t>(bytes);
}

}  // namespace trainyard
