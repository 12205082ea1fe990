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

// Which of ATen's fused forms a model's layers use (the job's `fused`
// section); a model ignores those it has no layer for.
struct FusedOps {
  bool rms_norm = false;  // at::rms_norm for RMSNorm layers
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
  virtual void UseFusedOps(const FusedOps& /*ops*/) {}

  // A language model's output projection [vocab, hidden] (its lm_head, or
  // the token embedding when tied); undefined for other models. With
  // LeaveProjectionToLoss(true) its last stage stops before it: forward
  // returns the final hidden states [.., hidden] and the loss applies the
  // projection itself (worker/models/chunked_loss.h).
  virtual at::Tensor output_projection() { return {}; }
  void LeaveProjectionToLoss(bool on) { projection_left_to_loss_ = on; }
  bool projection_left_to_loss() const { return projection_left_to_loss_; }

  // The scaled_dot_product_attention backend the model's attention took at
  // its first forward (ATen's SDPBackend: 0 math, 1 flash, 2 efficient,
  // 3 cudnn); -1: it has no such attention or has not run.
  virtual int attention_backend() const { return -1; }

 private:
  std::string checkpointed_type_;
  bool projection_left_to_loss_ = false;
};

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_MODELS_MODEL_H_
