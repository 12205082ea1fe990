#include "worker/models/attention_backend.h"

#include <ATen/Context.h>
#include <ATen/SDPBackend.h>
#include <ATen/ops/_fused_sdp_choice.h>

namespace trainyard {

void UseAttentionBackend(AttentionBackend backend) {
  at::Context& ctx = at::globalContext();
  const bool all = backend == AttentionBackend::kAuto;
  ctx.setSDPUseFlash(all || backend == AttentionBackend::kFlash);
  ctx.setSDPUseMemEfficient(all || backend == AttentionBackend::kEfficient);
  ctx.setSDPUseCuDNN(all || backend == AttentionBackend::kCudnn);
  ctx.setSDPUseMath(all || backend == AttentionBackend::kMath);
}

int SdpaBackendFor(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool enable_gqa) {
  return static_cast<int>(at::_fused_sdp_choice(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0, /*is_causal=*/true,
                                                /*scale=*/std::nullopt, enable_gqa));
}

const char* SdpaBackendName(int backend) {
  switch (static_cast<at::SDPBackend>(backend)) {
    case at::SDPBackend::math: return "math";
    case at::SDPBackend::flash_attention: return "flash";
    case at::SDPBackend::efficient_attention: return "efficient";
    case at::SDPBackend::cudnn_attention: return "cudnn";
    case at::SDPBackend::overrideable: return "overrideable";
    default: return "none";
  }
}

}  // namespace trainyard
