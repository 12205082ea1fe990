#include "worker/data/distributed_sampler.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace trainyard {

DistributedSampler::DistributedSampler(int64_t dataset_size, int32_t rank, int32_t world_size, bool shuffle,
                                       uint64_t seed, bool drop_last)
    : dataset_size_(dataset_size),
      rank_(rank),
      world_size_(world_size),
      shuffle_(shuffle),
      seed_(seed),
      drop_last_(drop_last) {
  if (world_size < 1 || rank < 0 || rank >= world_size) throw std::invalid_argument("sampler: bad rank/world size");
  if (drop_last_ && dataset_size_ % world_size_ != 0) {
    num_samples_ = dataset_size_ / world_size_;
  } else {
    num_samples_ = (dataset_size_ + world_size_ - 1) / world_size_;
  }
  if (num_samples_ < 1) throw std::invalid_argument("sampler: the dataset is smaller than the world size");
}

std::vector<int64_t> DistributedSampler::Indices(int64_t epoch) const {
  std::vector<int64_t> all(static_cast<size_t>(dataset_size_));
  if (shuffle_) {
    at::Generator gen = at::detail::createCPUGenerator(seed_ + static_cast<uint64_t>(epoch));
    at::Tensor perm = at::randperm(dataset_size_, gen, at::kLong);
    std::copy(perm.data_ptr<int64_t>(), perm.data_ptr<int64_t>() + dataset_size_, all.begin());
  } else {
    std::iota(all.begin(), all.end(), 0);
  }
  const int64_t total = num_samples_ * world_size_;
  // Pad by wrapping around, as PyTorch does, or trim for drop_last.
  for (int64_t i = dataset_size_; i < total; ++i) all.push_back(all[static_cast<size_t>(i % dataset_size_)]);
  all.resize(static_cast<size_t>(total));
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(num_samples_));
  for (int64_t i = rank_; i < total; i += world_size_) mine.push_back(all[static_cast<size_t>(i)]);
  return mine;
}

}  // namespace trainyard
