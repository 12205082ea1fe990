#include "worker/parallel/fsdp_model.h"

#include <torch/torch.h>

#include <torch/csrc/distributed/c10d/comm.hpp>

#include "worker/models/models.h"
#include "worker/models/optimizer.h"
#include "worker/parallel/fsdp.h"

namespace trainyard {
namespace {

FsdpOptions FsdpOptionsOf(const JobSpec& spec, c10::Device device) {
  FsdpOptions fo;
  fo.strategy = spec.fsdp.sharding_strategy;
  fo.wrap_policy = spec.fsdp.auto_wrap_policy;
  fo.min_num_params = spec.fsdp.min_num_params;
  fo.layer_types = spec.fsdp.transformer_layer_cls_to_wrap;
  fo.sync_module_states = spec.fsdp.sync_module_states;
  fo.offload_params = spec.fsdp.offload_params;
  fo.forward_prefetch = spec.fsdp.forward_prefetch;
  fo.param_dtype = spec.mixed_precision == MixedPrecision::kBf16   ? at::kBFloat16
                   : spec.mixed_precision == MixedPrecision::kFp16 ? at::kHalf
                                                                   : at::kFloat;
  fo.backward_prefetch = spec.fsdp.backward_prefetch;
  fo.compute_device = device;
  return fo;
}

}  // namespace

FsdpModel::FsdpModel(const JobSpec& spec, std::shared_ptr<Model> model, c10::Device device, int32_t world_size,
                     const DistContext& dist)
    : ParallelModel(spec, std::move(model), device, /*autocast=*/false),
      pg_(dist.process_group),
      fsdp_(std::make_unique<FullyShardedModel>(model_, FsdpOptionsOf(spec, device), dist.shard_group,
                                                spec.replicas() ? nullptr : dist.replicate_group, world_size)) {
  if (spec.replicas()) fsdp_->Rebind(dist.shard_group, dist.replicate_group, world_size);
  if (spec.ddp.broadcast_buffers) buffers_ = model_->buffers();
  optimizer_ = MakeOptimizer(spec.optimizer, fsdp_->ShardParameters(), spec.fused.optimizer);
}

FsdpModel::~FsdpModel() = default;

void FsdpModel::Rebind(const DistContext& dist) {
  pg_ = dist.process_group;
  fsdp_->Rebind(dist.shard_group, dist.replicate_group, pg_ ? pg_->getSize() : 1);
}

void FsdpModel::BeforeForward(bool /*sync*/) {
  if (!pg_ || buffers_.empty()) return;
  // Rank 0's buffers win before each forward, as DDP's broadcast_buffers.
  torch::NoGradGuard no_grad;
  c10d::broadcast_coalesced(pg_, buffers_, 250 * 1024 * 1024, 0);
}

at::Tensor FsdpModel::RunForward(const at::Tensor& inputs) { return fsdp_->Forward(inputs); }

void FsdpModel::Backward(const at::Tensor& loss, const at::Tensor& /*output*/, bool /*sync*/) {
  // Every micro-batch's gradients are reduce-scattered into the shards.
  fsdp_->PrepareBackward();
  loss.backward();
  fsdp_->FinishBackward();
}

void FsdpModel::EndEvaluation() { fsdp_->FinishBackward(); }

std::vector<at::Tensor> FsdpModel::Parameters() const { return fsdp_->ShardParameters(); }

double FsdpModel::ClipGradNorm(double max_norm) { return fsdp_->ClipGradNorm(max_norm); }

}  // namespace trainyard
