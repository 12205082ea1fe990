#include "worker/parallel/local_model.h"

#include <torch/torch.h>

#include "worker/models/models.h"
#include "worker/models/optimizer.h"

namespace trainyard {

LocalModel::LocalModel(const JobSpec& spec, std::shared_ptr<Model> model, c10::Device device)
    : ParallelModel(spec, std::move(model), device, /*autocast=*/true) {
  optimizer_ = MakeOptimizer(spec.optimizer, model_->parameters(), spec.fused.optimizer);
}

void LocalModel::Backward(const at::Tensor& loss, const at::Tensor& /*output*/, bool /*sync*/) { loss.backward(); }

std::vector<at::Tensor> LocalModel::Parameters() const { return model_->parameters(); }

}  // namespace trainyard
