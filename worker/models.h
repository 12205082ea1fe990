// Models a job can train, built from its ModelSpec. Every rank builds the
// same initial weights from the job's seed.
#ifndef TRAINYARD_WORKER_MODELS_H_
#define TRAINYARD_WORKER_MODELS_H_

#include <torch/nn/module.h>

#include <memory>

#include "common/job_spec.h"

namespace trainyard {

// A classifier: input [batch, ...] → logits [batch, num_classes].
class Model : public torch::nn::Module {
 public:
  virtual at::Tensor forward(const at::Tensor& input) = 0;
  // Shape of one input sample, e.g. {784} or {1, 28, 28}.
  virtual std::vector<int64_t> sample_shape() const = 0;
};

// Builds the model with weights drawn from `seed` (identical on every rank).
std::shared_ptr<Model> BuildModel(const ModelSpec& spec, uint64_t seed);

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_MODELS_H_
