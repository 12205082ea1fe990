#include "worker/parallel/parallel_model.h"

#include <torch/torch.h>

#include <cmath>
#include <set>

#include "common/model_layers.h"
#include "worker/models/attention_backend.h"
#include "worker/models/autocast.h"
#include "worker/models/model_flops.h"
#include "worker/models/models.h"
#include "worker/models/optimizer.h"
#include "worker/parallel/ddp_model.h"
#include "worker/parallel/fsdp_model.h"
#include "worker/parallel/local_model.h"

namespace trainyard {

ParallelModel::ParallelModel(const JobSpec& spec, std::shared_ptr<Model> model, c10::Device device, bool autocast)
    : spec_(spec),
      model_(std::move(model)),
      device_(device),
      // bf16 on CPU and CUDA, fp16 on CUDA (on CPU fp16 is loss scaling
      // around fp32 compute: LibTorch's CPU autocast has no fp16).
      autocast_(autocast && (spec.mixed_precision == MixedPrecision::kBf16 ||
                             (device.is_cuda() && spec.mixed_precision == MixedPrecision::kFp16))) {}

ParallelModel::~ParallelModel() = default;

at::Tensor ParallelModel::RunForward(const at::Tensor& inputs) { return model_->forward(inputs); }

at::Tensor ParallelModel::Forward(const at::Tensor& inputs, bool sync) {
  BeforeForward(sync);
  at::Tensor output;
  auto forward = [&] {
    const at::ScalarType dtype = spec_.mixed_precision == MixedPrecision::kFp16 ? at::kHalf : at::kBFloat16;
    AutocastGuard guard(device_.type(), dtype, autocast_);
    output = RunForward(inputs);
  };
  if (forward_flops_per_sample_ < 0 && inputs.size(0) > 0) {
    // Once: the model's FLOPs, from the first forward pass; with the output
    // projection left to the loss, its product too (2 FLOPs per
    // multiply-add, as the count takes a matrix product).
    double flops = CountForwardFlops(forward);
    if (model_->projection_left_to_loss()) {
      flops += 2.0 * static_cast<double>(output.numel()) * static_cast<double>(model_->output_projection().size(0));
    }
    forward_flops_per_sample_ = flops / static_cast<double>(inputs.size(0));
  } else {
    forward();
  }
  return output;
}

at::Tensor ParallelModel::UnderAutocast(const std::function<at::Tensor()>& loss) const {
  const at::ScalarType dtype = spec_.mixed_precision == MixedPrecision::kFp16 ? at::kHalf : at::kBFloat16;
  AutocastGuard guard(device_.type(), dtype, autocast_);
  return loss();
}

void ParallelModel::Train(bool on) { model_->train(on); }

std::vector<at::Tensor> ParallelModel::Gradients() const {
  std::vector<at::Tensor> grads;
  for (const at::Tensor& p : Parameters()) grads.push_back(p.grad());
  return grads;
}

double ParallelModel::ClipGradNorm(double max_norm) {
  return torch::nn::utils::clip_grad_norm_(Parameters(), max_norm);
}

double ParallelModel::ClipGradients(double max_norm, double clip_value) {
  const double norm = max_norm > 0 ? ClipGradNorm(max_norm) : std::nan("");
  // Element-wise, so clamping shards is clamping the whole gradient.
  if (clip_value > 0) torch::nn::utils::clip_grad_value_(Parameters(), clip_value);
  return norm;
}

void ParallelModel::OptimizerStep(double lr, bool finite) {
  SetLearningRate(*optimizer_, lr);
  if (finite) optimizer_->step();
}

void ParallelModel::ReleaseGradients() {
  // DDP then copies the next gradients into its buckets once (with bucket
  // views the Reducer points each gradient back at its bucket).
  for (auto& group : optimizer_->param_groups()) {
    for (at::Tensor& p : group.params()) p.mutable_grad() = at::Tensor();
  }
}

void ParallelModel::Rebind(const DistContext& /*dist*/) {
  throw std::logic_error("only a DDP model trains as a replica");
}

ModelMemory ParallelModel::Memory() const {
  std::set<const c10::StorageImpl*> seen;
  auto bytes = [&](const at::Tensor& t) -> int64_t {
    if (!t.defined() || !t.has_storage()) return 0;
    return seen.insert(t.storage().unsafeGetStorageImpl()).second ? static_cast<int64_t>(t.storage().nbytes()) : 0;
  };
  // The module's parameters and what the optimizer steps on (the same
  // tensors unless sharded: counted once).
  std::vector<at::Tensor> params = model_->parameters();
  for (const at::Tensor& p : Parameters()) params.push_back(p);
  ModelMemory m;
  for (const at::Tensor& p : params) m.params += bytes(p);
  for (const at::Tensor& p : params) m.grads += bytes(p.grad());
  for (const at::Tensor& t : OptimizerStateTensors(*optimizer_)) m.optimizer += bytes(t);
  return m;
}

void UseFusedKernels(const JobSpec& spec, Model* model) {
  UseAttentionBackend(spec.fused.attention);
  model->UseFusedOps(FusedOps{.rms_norm = spec.fused.rms_norm});
  // Not under FSDP: the projection's weight is gathered for its stage only.
  const bool chunked = spec.fused.chunked_loss && spec.loss == LossKind::kCrossEntropy &&
                       spec.distributed_type != DistributedType::kFsdp && model->output_projection().defined();
  model->LeaveProjectionToLoss(chunked);
}

std::unique_ptr<ParallelModel> MakeParallelModel(const JobSpec& spec, int32_t world_size, c10::Device device,
                                                 const DistContext& dist) {
  // Built on the host from the seed (identical on every rank), then moved.
  std::shared_ptr<Model> model = BuildModel(spec.model, spec.seed);
  if (spec.activation_checkpointing) model->CheckpointActivations(ModelWrapLayer(spec.model.kind).value());
  UseFusedKernels(spec, model.get());
  if (!device.is_cpu()) model->to(device);
  if (spec.distributed_type == DistributedType::kFsdp) {
    return std::make_unique<FsdpModel>(spec, std::move(model), device, world_size, dist);
  }
  if (dist.process_group && spec.distributed_type == DistributedType::kDdp) {
    return std::make_unique<DdpModel>(spec, std::move(model), device, dist);
  }
  return std::make_unique<LocalModel>(spec, std::move(model), device);
}

}  // namespace trainyard
