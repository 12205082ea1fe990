// Activation checkpointing (torch.utils.checkpoint, reentrant form): a
// layer's forward runs without keeping its activations, and runs again in
// backward, under the same autocast state, to compute its gradients. Peak
// memory holds one layer's activations instead of every layer's; the cost
// is a second forward of each checkpointed layer.
#ifndef TRAINYARD_WORKER_MODELS_ACTIVATION_CHECKPOINT_H_
#define TRAINYARD_WORKER_MODELS_ACTIVATION_CHECKPOINT_H_

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>

namespace trainyard {

using LayerForward = std::function<at::Tensor(const at::Tensor&)>;

// `forward` wrapped: the same outputs and, after backward, the same
// gradients (of its input and of the parameters it uses) as `forward`
// itself, bitwise on CPU. `forward` must be deterministic (no dropout), and
// its input must require grad (as a transformer layer's does), or no
// gradient reaches its parameters.
LayerForward Checkpointed(LayerForward forward);

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_MODELS_ACTIVATION_CHECKPOINT_H_
