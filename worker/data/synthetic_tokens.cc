#include "worker/data/synthetic_tokens.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "common/splitmix.h"

namespace trainyard {

SyntheticTokens::SyntheticTokens(int64_t context, int64_t vocab, int64_t num_samples, uint64_t seed)
    : context_(context), vocab_(vocab), num_samples_(num_samples), seed_(seed) {
  const uint64_t r = SplitMix64(seed ^ 0x70c3ULL);
  a_ = static_cast<int64_t>(r % static_cast<uint64_t>(vocab - 1)) + 1;
  b_ = static_cast<int64_t>((r >> 32) % static_cast<uint64_t>(vocab));
}

Batch SyntheticTokens::Get(const std::vector<int64_t>& indices) const {
  const int64_t n = static_cast<int64_t>(indices.size());
  at::Tensor seq = at::empty({n, context_ + 1}, at::kLong);
  auto acc = seq.accessor<int64_t, 2>();
  for (int64_t i = 0; i < n; ++i) {
    at::Generator gen =
        at::detail::createCPUGenerator(SplitMix64(seed_ + SplitMix64(static_cast<uint64_t>(indices[i]))));
    at::Tensor noise = at::rand({context_ + 1}, gen);
    at::Tensor uniform = at::randint(vocab_, {context_ + 1}, gen, at::kLong);
    auto nz = noise.accessor<float, 1>();
    auto un = uniform.accessor<int64_t, 1>();
    acc[i][0] = un[0];
    for (int64_t t = 1; t <= context_; ++t) {
      acc[i][t] = nz[t] < 0.9f ? (a_ * acc[i][t - 1] + b_) % vocab_ : un[t];
    }
  }
  return {seq.narrow(1, 0, context_).contiguous(), seq.narrow(1, 1, context_).contiguous()};
}

}  // namespace trainyard
