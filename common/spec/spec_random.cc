#include "common/spec/spec_random.h"

#include <algorithm>

#include "common/spec/model_traits.h"
#include "common/spec/spec_tables.h"
#include "common/spec/step_capture.h"

namespace trainyard {
namespace {

// The rules between fields (job_spec.cc, spec_rules.cc), made to hold.
void ScriptRules(spec::Rng& g, JobSpec* s) {
  if (g.Coin(0.8)) s->script = ScriptSpec{};
  if (s->script.empty()) return;
  const JobSpec d;
  s->model = d.model, s->data = d.data, s->optimizer = d.optimizer, s->scheduler = d.scheduler, s->fused = d.fused;
  s->loss = d.loss, s->max_steps = d.max_steps, s->seed = d.seed, s->max_grad_norm = d.max_grad_norm;
  s->clip_grad_value = d.clip_grad_value, s->gradient_accumulation_steps = d.gradient_accumulation_steps;
  s->eval_every_steps = d.eval_every_steps, s->eval_batches = d.eval_batches;
  s->distributed_type = d.distributed_type, s->mixed_precision = d.mixed_precision, s->fsdp = d.fsdp;
  s->backend = d.backend;
}

void ModelRules(ModelSpec* m) {
  if (m->kind == ModelKind::kGpt) {
    m->width = m->heads * std::max<int64_t>(m->width / m->heads, (8 + m->heads - 1) / m->heads);
  }
  if (m->kind == ModelKind::kLlama && m->config.empty() && m->init_from.empty()) m->config = "config.json";
  if (m->kind == ModelKind::kCnn) m->input_size = 784;
}

void DataRules(JobSpec* js) {
  const JobSpec& s = *js;
  DataSpec* d = &js->data;
  const ModelTraits& model = TraitsOf(s.model.kind);
  if (!model.Takes(d->kind)) d->kind = DataKind::kSynthetic, d->path.clear();
  if (d->kind == DataKind::kImageFolder) {
    const int64_t side = s.model.kind == ModelKind::kCnn ? 28 : s.model.image_size;
    if (d->crop_size != side) d->crop_size = 0;
    if (!d->mean.empty() && d->std.empty()) d->std = {1, 1, 1};
  }
  if (d->kind == DataKind::kMnist && model.input == ModelInput::kFlat) js->model.input_size = 784;
  if (d->eval_fraction > 0) d->eval_path.clear();
  const bool held_out = d->kind == DataKind::kTensors || d->kind == DataKind::kImageFolder;
  if (held_out && s.eval_every_steps > 0 && d->eval_fraction == 0 && d->eval_path.empty()) d->eval_fraction = 0.25;
}

void DistributedRules(spec::Rng& g, JobSpec* s) {
  if (s->distributed_type == DistributedType::kNo) s->num_processes = 1;
  if (s->num_processes % s->slurm.nodes != 0) s->slurm.nodes = 1;
  DdpSpec& ddp = s->ddp;
  if (s->distributed_type == DistributedType::kFsdp) ddp.comm_hook = CommHookType::kNone;
  const bool power_sgd = ddp.comm_hook == CommHookType::kPowerSgd || ddp.comm_hook == CommHookType::kBatchedPowerSgd;
  if (!power_sgd) ddp.comm_wrapper = CommWrapper::kNone;
  PowerSgdOptions& ps = ddp.power_sgd;
  if ((ps.use_error_feedback || ps.warm_start) && ps.start_powerSGD_iter <= 1) ps.start_powerSGD_iter = 2;
  if (ddp.comm_hook == CommHookType::kBatchedPowerSgd) ps.batch_tensors_with_same_shape = false;
  if (ddp.comm_hook != CommHookType::kNone && ddp.intra_host_transport == IntraHostTransport::kSharedMemory) {
    ddp.intra_host_transport = IntraHostTransport::kAuto;
  }
  FsdpSpec& f = s->fsdp;
  if (f.cpu_ram_efficient_loading) f.sync_module_states = true;
  if (f.ranks_per_node > 0 && s->num_processes % f.ranks_per_node != 0) f.ranks_per_node = 0;
  f.transformer_layer_cls_to_wrap.clear();
  if (f.auto_wrap_policy == WrapPolicy::kTransformerBased) {
    const ModelTraits& model = TraitsOf(s->model.kind);
    for (const std::string& layer : model.layer_types) {
      if (g.Coin()) f.transformer_layer_cls_to_wrap.push_back(layer);
    }
    if (f.transformer_layer_cls_to_wrap.empty()) f.transformer_layer_cls_to_wrap = {model.layer_types.back()};
  }
  if (s->backend == Backend::kNccl && s->device != Device::kCuda) s->backend = Backend::kAuto;
  if (s->mixed_precision == MixedPrecision::kFp16 && s->device == Device::kCpu &&
      s->distributed_type == DistributedType::kFsdp) {
    s->mixed_precision = MixedPrecision::kBf16;
  }
}

// fault_tolerance and elastic against the rest (job_spec.cc CheckFaultTolerance).
void FaultToleranceRules(JobSpec* s) {
  const DdpSpec& ddp = s->ddp;
  const int32_t unit = s->ranks_per_replica();
  const bool replicable =
      s->script.empty() && s->num_processes >= 2 && unit < s->num_processes &&
      (s->distributed_type == DistributedType::kDdp || s->distributed_type == DistributedType::kFsdp) &&
      ddp.comm_hook != CommHookType::kPowerSgd && ddp.comm_hook != CommHookType::kBatchedPowerSgd;
  if (!replicable) s->fault_tolerance.mode = FaultToleranceMode::kWholeGroup;
  s->fault_tolerance.min_replicas = std::min(s->fault_tolerance.min_replicas, s->num_processes / unit);
  s->elastic.min_processes = s->replicas() ? std::min(s->elastic.min_processes, s->num_processes) : 0;
  if (s->elastic.enabled()) {
    // Whole replicas, and at least min_replicas of them.
    s->elastic.min_processes = std::max(s->elastic.min_processes / unit, s->fault_tolerance.min_replicas) * unit;
  }
}

}  // namespace

JobSpec RandomJobSpec(uint64_t seed) {
  spec::Rng g(seed);
  JobSpec s;
  spec::RandomSection(spec::JobSpecTable(), g, &s);
  ScriptRules(g, &s);
  ModelRules(&s.model);
  DataRules(&s);
  DistributedRules(g, &s);
  FaultToleranceRules(&s);
  s.scheduler.warmup_steps = std::min(s.scheduler.warmup_steps, s.max_steps);
  if (s.loss == LossKind::kMse && TraitsOf(s.model.kind).classifier) s.loss = LossKind::kCrossEntropy;
  if (s.activation_checkpointing && !TraitsOf(s.model.kind).recomputes_wrap_layer) s.activation_checkpointing = false;
  const bool cuda_only =
      s.fused.attention == AttentionBackend::kEfficient || s.fused.attention == AttentionBackend::kCudnn;
  if (s.device == Device::kCpu && cuda_only) s.fused.attention = AttentionBackend::kAuto;
  if (s.fused.cuda_graph == StepCapture::kOn && !StepCaptureRefusal(s).empty()) s.fused.cuda_graph = StepCapture::kAuto;
  spec::Tidy(spec::JobSpecTable(), &s);
  return s;
}

std::optional<std::string> SpecDifference(const JobSpec& a, const JobSpec& b) {
  return spec::DiffSection(spec::JobSpecTable(), a, b, "");
}

}  // namespace trainyard
