#include "worker/data/synthetic_dataset.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "common/splitmix.h"

namespace trainyard {

SyntheticDataset::SyntheticDataset(std::vector<int64_t> sample_shape, int64_t num_classes, int64_t num_samples,
                                   uint64_t seed)
    : sample_shape_(std::move(sample_shape)), num_samples_(num_samples), seed_(seed) {
  int64_t features = 1;
  for (int64_t d : sample_shape_) features *= d;
  at::Generator gen = at::detail::createCPUGenerator(SplitMix64(seed ^ 0x7ea7c4e5ULL));
  teacher_ = at::randn({num_classes, features}, gen, at::kFloat);
  const int64_t first = sample_shape_.empty() ? 1 : sample_shape_[0];
  prototype_ = at::randn({num_classes, first}, gen, at::kFloat).mul_(kSignal);
}

Batch SyntheticDataset::Get(const std::vector<int64_t>& indices) const {
  std::vector<int64_t> shape = {static_cast<int64_t>(indices.size())};
  shape.insert(shape.end(), sample_shape_.begin(), sample_shape_.end());
  at::Tensor inputs = at::empty(shape, at::kFloat);
  at::Tensor flat = inputs.view({inputs.size(0), -1});
  for (size_t i = 0; i < indices.size(); ++i) {
    at::Generator gen =
        at::detail::createCPUGenerator(SplitMix64(seed_ + SplitMix64(static_cast<uint64_t>(indices[i]))));
    flat[static_cast<int64_t>(i)].normal_(0.0, 1.0, gen);
  }
  at::Tensor targets = at::matmul(flat, teacher_.t()).argmax(1);
  // The label's prototype, [B, first, 1, ...] broadcast over the rest.
  std::vector<int64_t> proto_shape(shape.size(), 1);
  proto_shape[0] = shape[0];
  if (shape.size() > 1) proto_shape[1] = shape[1];
  inputs.add_(prototype_.index_select(0, targets).view(proto_shape));
  return {inputs, targets};
}

}  // namespace trainyard
