#include "worker/data.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <numeric>

namespace trainyard {
namespace {

// SplitMix64: decorrelates per-sample seeds.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

SyntheticDataset::SyntheticDataset(std::vector<int64_t> sample_shape, int64_t num_classes, int64_t num_samples,
                                   uint64_t seed)
    : sample_shape_(std::move(sample_shape)), num_samples_(num_samples), seed_(seed) {
  int64_t features = 1;
  for (int64_t d : sample_shape_) features *= d;
  at::Generator gen = at::detail::createCPUGenerator(Mix(seed ^ 0x7ea7c4e5ULL));
  teacher_ = at::randn({num_classes, features}, gen, at::kFloat);
}

Batch SyntheticDataset::Get(const std::vector<int64_t>& indices) const {
  std::vector<int64_t> shape = {static_cast<int64_t>(indices.size())};
  shape.insert(shape.end(), sample_shape_.begin(), sample_shape_.end());
  at::Tensor inputs = at::empty(shape, at::kFloat);
  at::Tensor flat = inputs.view({inputs.size(0), -1});
  for (size_t i = 0; i < indices.size(); ++i) {
    at::Generator gen = at::detail::createCPUGenerator(Mix(seed_ + Mix(static_cast<uint64_t>(indices[i]))));
    flat[static_cast<int64_t>(i)].normal_(0.0, 1.0, gen);
  }
  at::Tensor targets = at::matmul(flat, teacher_.t()).argmax(1);
  return {inputs, targets};
}

SyntheticTokens::SyntheticTokens(int64_t context, int64_t vocab, int64_t num_samples, uint64_t seed)
    : context_(context), vocab_(vocab), num_samples_(num_samples), seed_(seed) {
  const uint64_t r = Mix(seed ^ 0x70c3ULL);
  a_ = static_cast<int64_t>(r % static_cast<uint64_t>(vocab - 1)) + 1;
  b_ = static_cast<int64_t>((r >> 32) % static_cast<uint64_t>(vocab));
}

Batch SyntheticTokens::Get(const std::vector<int64_t>& indices) const {
  const int64_t n = static_cast<int64_t>(indices.size());
  at::Tensor seq = at::empty({n, context_ + 1}, at::kLong);
  auto acc = seq.accessor<int64_t, 2>();
  for (int64_t i = 0; i < n; ++i) {
    at::Generator gen = at::detail::createCPUGenerator(Mix(seed_ + Mix(static_cast<uint64_t>(indices[i]))));
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

DistributedSampler::DistributedSampler(int64_t dataset_size, int32_t rank, int32_t world_size, bool shuffle,
                                       uint64_t seed, bool drop_last)
    : dataset_size_(dataset_size), rank_(rank), world_size_(world_size), shuffle_(shuffle), seed_(seed),
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

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DistributedSampler sampler, int64_t batch_size)
    : dataset_(std::move(dataset)), sampler_(std::move(sampler)), batch_size_(batch_size) {
  indices_ = sampler_.Indices(epoch_);
}

void DataLoader::Seek(int64_t epoch, int64_t offset) {
  epoch_ = epoch;
  offset_ = offset;
  indices_ = sampler_.Indices(epoch_);
}

Batch DataLoader::Next() {
  if (offset_ >= static_cast<int64_t>(indices_.size())) {
    ++epoch_;
    offset_ = 0;
    indices_ = sampler_.Indices(epoch_);
  }
  const int64_t end = std::min<int64_t>(offset_ + batch_size_, static_cast<int64_t>(indices_.size()));
  std::vector<int64_t> batch(indices_.begin() + offset_, indices_.begin() + end);
  offset_ = end;
  return dataset_->Get(batch);
}

}  // namespace trainyard
