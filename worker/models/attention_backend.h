// The attention backend: which of ATen's scaled_dot_product_attention
// kernels a process may use (the job's fused.attention, as PyTorch's
// torch.nn.attention.sdpa_kernel), and which one runs for given inputs
// (at::_fused_sdp_choice), reported in the job's events and /metrics.
#ifndef TRAINYARD_WORKER_MODELS_ATTENTION_BACKEND_H_
#define TRAINYARD_WORKER_MODELS_ATTENTION_BACKEND_H_

#include <ATen/core/Tensor.h>

#include "common/spec_enums.h"

namespace trainyard {

// For this process: kAuto allows every backend in ATen's priority order;
// another allows that one alone (inputs it cannot take then fail with
// ATen's "No available kernel" naming why).
void UseAttentionBackend(AttentionBackend backend);

// ATen's SDPBackend (0 math, 1 flash, 2 efficient, 3 cudnn, 4 overrideable;
// -1: none takes them) for causal attention over q [B, H, T, D] and k, v
// [B, H_kv, T, D].
int SdpaBackendFor(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool enable_gqa);

// "math", "flash", "efficient", "cudnn", "overrideable"; "none" otherwise.
const char* SdpaBackendName(int backend);

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_MODELS_ATTENTION_BACKEND_H_
