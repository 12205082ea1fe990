// Model: what every model a job can train is to the rest of the worker — a
// module whose forward is the composition of its layers (the units FSDP
// wraps by and activation checkpointing recomputes). Each kind lives in its
// own file pair; worker/models.h builds one from a ModelSpec.
#ifndef TRAINYARD_WORKER_MODELS_MODEL_H_
#define TRAINYARD_WORKER_MODELS_MODEL_H_

#include <torch/nn/module.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace trainyard {

// One stage of a model's forward: what FSDP wraps by. `module` holds the
// parameters the stage uses (a parameter used by several stages is shared).
struct Layer {
  std::string type;  // module type name, e.g. "Linear", "Conv2d", "Block"
  std::shared_ptr<torch::nn::Module> module;
  std::function<at::Tensor(const at::Tensor&)> forward;
};

// A classifier: input [batch, ...] → logits [batch, num_classes]. Its
// forward is the composition of its layers, in order.
class Model : public torch::nn::Module {
 public:
  at::Tensor forward(const at::Tensor& input) {
    at::Tensor x = input;
    for (const Layer& layer : stages()) x = layer.forward(x);
    return x;
  }
  virtual std::vector<Layer> layers() = 0;
  // The layers as training runs them: those of the type given to
  // CheckpointActivations recompute their forward in backward.
  std::vector<Layer> stages();
  // Activation checkpointing for every layer of `layer_type` ("" : none).
  void CheckpointActivations(std::string layer_type) { checkpointed_type_ = std::move(layer_type); }
  // Shape of one input sample, e.g. {784} or {1, 28, 28}.
  virtual std::vector<int64_t> sample_shape() const = 0;

 private:
  std::string checkpointed_type_;
};

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_MODELS_MODEL_H_
