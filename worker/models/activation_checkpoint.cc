#include "worker/models/activation_checkpoint.h"

#include <ATen/autocast_mode.h>
#include <torch/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <utility>
#include <vector>

namespace trainyard {
namespace {

// The autocast state of the devices a layer may run on.
struct AutocastState {
  bool cpu = false, cuda = false;
  at::ScalarType cpu_dtype = at::kBFloat16, cuda_dtype = at::kHalf;

  static AutocastState Now() {
    AutocastState s;
    s.cpu = at::autocast::is_autocast_enabled(c10::DeviceType::CPU);
    s.cuda = at::autocast::is_autocast_enabled(c10::DeviceType::CUDA);
    s.cpu_dtype = at::autocast::get_autocast_dtype(c10::DeviceType::CPU);
    s.cuda_dtype = at::autocast::get_autocast_dtype(c10::DeviceType::CUDA);
    return s;
  }
  void Set() const {
    at::autocast::set_autocast_enabled(c10::DeviceType::CPU, cpu);
    at::autocast::set_autocast_enabled(c10::DeviceType::CUDA, cuda);
    at::autocast::set_autocast_dtype(c10::DeviceType::CPU, cpu_dtype);
    at::autocast::set_autocast_dtype(c10::DeviceType::CUDA, cuda_dtype);
  }
};

// What backward needs to run the layer again.
struct Recompute final : torch::CustomClassHolder {
  LayerForward forward;
  AutocastState autocast;
};

class CheckpointFunction final : public torch::autograd::Function<CheckpointFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& input,
                            c10::intrusive_ptr<Recompute> recompute) {
    // Grad mode is off here: the layer's activations are not kept.
    recompute->autocast = AutocastState::Now();
    ctx->save_for_backward({input});
    ctx->saved_data["recompute"] = c10::IValue::make_capsule(recompute);
    return recompute->forward(input);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    auto recompute = c10::static_intrusive_pointer_cast<Recompute>(ctx->saved_data["recompute"].toCapsule());
    const at::Tensor saved = ctx->get_saved_variables()[0];
    at::Tensor input = saved.detach();
    input.requires_grad_(saved.requires_grad());
    const AutocastState outer = AutocastState::Now();
    recompute->autocast.Set();
    at::Tensor output;
    {
      torch::AutoGradMode grad(true);
      output = recompute->forward(input);
    }
    outer.Set();
    // The layer's own backward: its parameters' gradients accumulate (their
    // hooks, DDP's and FSDP's, fire as without checkpointing), and the
    // input's gradient goes on down the outer graph.
    if (output.requires_grad()) torch::autograd::backward({output}, {grad_outputs[0]});
    return {input.requires_grad() ? input.grad() : at::Tensor(), at::Tensor()};
  }
};

}  // namespace

LayerForward Checkpointed(LayerForward forward) {
  auto recompute = c10::make_intrusive<Recompute>();
  recompute->forward = std::move(forward);
  return [recompute](const at::Tensor& x) { return CheckpointFunction::apply(x, recompute); };
}

}  // namespace trainyard
