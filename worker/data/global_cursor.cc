#include "worker/data/global_cursor.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <numeric>
#include <stdexcept>

namespace trainyard {

GlobalCursorSampler::GlobalCursorSampler(int64_t dataset_size, bool shuffle, uint64_t seed)
    : dataset_size_(dataset_size), shuffle_(shuffle), seed_(seed) {
  if (dataset_size < 1) throw std::invalid_argument("global cursor: the dataset is empty");
}

std::vector<int64_t> GlobalCursorSampler::Positions(int64_t cursor, int32_t member, int32_t members, int64_t batch) {
  if (members < 1 || member < 0 || member >= members) throw std::invalid_argument("global cursor: bad member");
  std::vector<int64_t> out(static_cast<size_t>(batch));
  for (int64_t j = 0; j < batch; ++j) out[static_cast<size_t>(j)] = cursor + member + j * members;
  return out;
}

const std::vector<int64_t>& GlobalCursorSampler::Order(int64_t epoch) const {
  auto it = orders_.find(epoch);
  if (it != orders_.end()) return *it->second;
  auto order = std::make_shared<std::vector<int64_t>>(static_cast<size_t>(dataset_size_));
  if (shuffle_) {
    // As DistributedSampler: randperm seeded with seed + epoch.
    at::Generator gen = at::detail::createCPUGenerator(seed_ + static_cast<uint64_t>(epoch));
    at::Tensor perm = at::randperm(dataset_size_, gen, at::kLong);
    std::copy(perm.data_ptr<int64_t>(), perm.data_ptr<int64_t>() + dataset_size_, order->begin());
  } else {
    std::iota(order->begin(), order->end(), 0);
  }
  while (orders_.size() >= 2) orders_.erase(orders_.begin());
  return *orders_.emplace(epoch, std::move(order)).first->second;
}

int64_t GlobalCursorSampler::IndexAt(int64_t position) const {
  return Order(position / dataset_size_)[static_cast<size_t>(position % dataset_size_)];
}

}  // namespace trainyard
