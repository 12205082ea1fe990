// Model FLOPs for MFU: the floating-point operations of a forward pass as
// PyTorch's profiler counts them (its with_flops formulas for the
// operators it knows: matrix products, 2-D convolutions, elementwise
// multiply and add; and FlopCounterMode's for the fused attention kernels),
// observed on the calling thread while the forward runs. A training step
// is taken as three forward passes (the backward pass costs twice the
// forward), as PyTorch's FlopCounterMode counts matrix products.
#ifndef TRAINYARD_WORKER_MODELS_MODEL_FLOPS_H_
#define TRAINYARD_WORKER_MODELS_MODEL_FLOPS_H_

#include <cstdint>
#include <functional>
#include <string>

#include "common/spec_enums.h"

namespace trainyard {

// Runs `forward` on this thread and returns the FLOPs its operators did.
double CountForwardFlops(const std::function<void()>& forward);

// The dense peak FLOP/s of a device, by its name as CUDA reports it
// (DeviceName of worker/device.h), at the job's precision: bf16/fp16 tensor
// cores for mixed precision, plain fp32 otherwise (LibTorch's default
// matmuls do not use TF32). The vendors' data-sheet numbers, without
// sparsity, for H100 (SXM, PCIe, NVL), H200, A100, L40S, L4, A10 and V100
// (fp16 only); 0 for any other device and for the CPU.
double PeakFlops(const std::string& device_name, MixedPrecision precision);

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_MODELS_MODEL_FLOPS_H_
