#include "worker/base/tensor_hash.h"

#include <ATen/ATen.h>

#include <cstring>

namespace trainyard {

uint64_t HashTensors(const std::vector<at::Tensor>& tensors) {
  constexpr uint64_t kPrime = 1099511628211ULL;
  uint64_t h = 1469598103934665603ULL;
  for (const at::Tensor& t : tensors) {
    if (!t.defined()) continue;
    const at::Tensor c = t.detach().to(at::kCPU).contiguous();
    const auto* p = static_cast<const unsigned char*>(c.data_ptr());
    const size_t n = c.nbytes();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      uint64_t word;
      std::memcpy(&word, p + i, 8);
      h = (h ^ word) * kPrime;
    }
    for (; i < n; ++i) h = (h ^ p[i]) * kPrime;
  }
  return h;
}

}  // namespace trainyard
