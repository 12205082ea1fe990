// Model FLOPs for MFU: the floating-point operations of a forward pass as
// PyTorch's profiler counts them (its with_flops formulas for the
// operators it knows: matrix products, 2-D convolutions, elementwise
// multiply and add), observed on the calling thread while the forward
// runs. A training step is taken as three forward passes (the backward pass
// costs twice the forward), as PyTorch's FlopCounterMode counts matrix
// products.
#ifndef TRAINYARD_WORKER_MODEL_FLOPS_H_
#define TRAINYARD_WORKER_MODEL_FLOPS_H_

#include <cstdint>
#include <functional>

namespace trainyard {

// Runs `forward` on this thread and returns the FLOPs its operators did.
double CountForwardFlops(const std::function<void()>& forward);

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_MODEL_FLOPS_H_
