#include "worker/parallel/ddp_model.h"

#include <torch/torch.h>

#include "worker/models/models.h"
#include "worker/models/optimizer.h"
#include "worker/parallel/ddp.h"

namespace trainyard {

DdpModel::DdpModel(const JobSpec& spec, std::shared_ptr<Model> model, c10::Device device, const DistContext& dist)
    : ParallelModel(spec, std::move(model), device, /*autocast=*/true),
      ddp_(std::make_unique<DistributedDataParallel>(model_->parameters(), model_->buffers(), dist.process_group,
                                                     spec.ddp, dist.shm, /*broadcast_initial=*/!spec.replicas())) {
  optimizer_ = MakeOptimizer(spec.optimizer, model_->parameters(), spec.fused.optimizer);
}

DdpModel::~DdpModel() = default;

void DdpModel::BeforeForward(bool sync) {
  ddp_->SyncBuffers();
  if (sync) ddp_->PrepareForward();
}

void DdpModel::Backward(const at::Tensor& loss, const at::Tensor& output, bool sync) {
  // With find_unused_parameters the Reducer walks the graph from the
  // outputs, and from the loss when it applies the output projection itself.
  if (sync) {
    const bool find = spec_.ddp.find_unused_parameters;
    const at::Tensor& root = model_->projection_left_to_loss() ? loss : output;
    ddp_->PrepareBackward(find ? std::vector<at::Tensor>{root} : std::vector<at::Tensor>{});
  }
  loss.backward();
}

void DdpModel::Rebind(const DistContext& dist) {
  ddp_.reset();  // its Reducer's hooks leave the parameters first
  if (dist.process_group) {
    ddp_ = std::make_unique<DistributedDataParallel>(model_->parameters(), model_->buffers(), dist.process_group,
                                                     spec_.ddp, dist.shm, /*broadcast_initial=*/false);
  }
}

std::vector<at::Tensor> DdpModel::Parameters() const { return model_->parameters(); }

}  // namespace trainyard
