// Training data: datasets, PyTorch-style distributed sampling and a per-rank
// loader whose position (epoch, offset) is part of the training state.
// Not thread-safe: one loader per rank, used by the training thread.
#ifndef TRAINYARD_WORKER_DATA_H_
#define TRAINYARD_WORKER_DATA_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/spec_enums.h"

namespace trainyard {

struct Batch {
  at::Tensor inputs;   // [B, sample_shape...]
  at::Tensor targets;  // [B] class indices (int64)

  // The same batch on `device` (host-to-device copies for CUDA).
  Batch To(const c10::Device& device) const { return {inputs.to(device), targets.to(device)}; }
};

// A map-style dataset: any sample can be read by index.
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Batch Get(const std::vector<int64_t>& indices) const = 0;
  // The loader's call: the samples as drawn in `epoch`, for datasets whose
  // samples are random per epoch (augmentations); the others ignore it.
  virtual Batch GetForEpoch(const std::vector<int64_t>& indices, int64_t /*epoch*/) const { return Get(indices); }
};

// Deterministic fake data that can be learned: sample i is N(0, 1) noise
// drawn from a generator seeded by (seed, i); its label is the argmax of a
// fixed random linear "teacher" applied to it. Any rank reads the same sample
// for the same index.
class SyntheticDataset final : public Dataset {
 public:
  SyntheticDataset(std::vector<int64_t> sample_shape, int64_t num_classes, int64_t num_samples, uint64_t seed);
  int64_t size() const override { return num_samples_; }
  Batch Get(const std::vector<int64_t>& indices) const override;

 private:
  std::vector<int64_t> sample_shape_;
  int64_t num_samples_;
  uint64_t seed_;
  at::Tensor teacher_;  // [num_classes, prod(sample_shape)]
};

// Deterministic token sequences for language models: sample i is a sequence
// of context + 1 tokens drawn from a generator seeded by (seed, i), where each
// next token follows a fixed random affine rule of the previous one
// (next = (a·prev + b) mod vocab) with probability 0.9 and is uniform
// otherwise — learnable, and far from trivial at the start. inputs are the
// first `context` tokens, targets the next ones ([B, T] int64 each).
class SyntheticTokens final : public Dataset {
 public:
  SyntheticTokens(int64_t context, int64_t vocab, int64_t num_samples, uint64_t seed);
  int64_t size() const override { return num_samples_; }
  Batch Get(const std::vector<int64_t>& indices) const override;

 private:
  int64_t context_, vocab_, num_samples_;
  uint64_t seed_;
  int64_t a_, b_;
};

// Samples [offset, offset + size) of another dataset, as indices 0..size-1
// (a held-out split of synthetic data, for instance).
class OffsetDataset final : public Dataset {
 public:
  OffsetDataset(std::shared_ptr<const Dataset> base, int64_t offset, int64_t size);
  int64_t size() const override { return size_; }
  Batch Get(const std::vector<int64_t>& indices) const override;
  Batch GetForEpoch(const std::vector<int64_t>& indices, int64_t epoch) const override;

 private:
  std::shared_ptr<const Dataset> base_;
  int64_t offset_, size_;
};

// MNIST from its IDX files in `dir`: train-images-idx3-ubyte and
// train-labels-idx1-ubyte (or t10k-* for the test split), each optionally
// gzip-compressed (.gz). Pixels are scaled to [0, 1] and normalized with
// MNIST's mean and standard deviation (0.1307, 0.3081), as torchvision's
// usual transform; each image is reshaped to `sample_shape` ({784} or
// {1, 28, 28}). Throws std::runtime_error naming the file on any problem.
class MnistDataset final : public Dataset {
 public:
  MnistDataset(const std::string& dir, bool train, std::vector<int64_t> sample_shape);
  int64_t size() const override { return labels_.size(0); }
  Batch Get(const std::vector<int64_t>& indices) const override;

 private:
  at::Tensor images_;  // [N, sample_shape...] float
  at::Tensor labels_;  // [N] int64
};

// Flat little-endian token ids (nanoGPT's .bin convention), uint16 or
// uint32: one file, or a directory whose *.bin shards, in name order, read
// as one stream. Sample i is a window of context + 1 tokens starting at a
// position drawn from (seed, i) within [begin, end) of the stream (a window
// may span two shards): inputs are its first `context` tokens, targets the
// next ones. Only the window's bytes are read. A token id ≥ vocab fails the
// batch, naming the file and position.
class TokenFile final : public Dataset {
 public:
  // `begin_fraction`/`end_fraction` select the part of the stream windows
  // start in (the training split and a held-out tail).
  TokenFile(const std::string& path, TokenDtype dtype, int64_t context, int64_t vocab, int64_t num_samples,
            uint64_t seed, double begin_fraction = 0.0, double end_fraction = 1.0);
  int64_t size() const override { return num_samples_; }
  Batch Get(const std::vector<int64_t>& indices) const override;
  int64_t tokens() const { return tokens_; }

 private:
  struct Shard {
    std::string path;
    int64_t first = 0;  // position of its first token in the stream
    int64_t tokens = 0;
  };
  // Reads tokens [start, start + out.size()) of the stream.
  void Read(int64_t start, std::vector<int64_t>& out) const;

  std::vector<Shard> shards_;
  int64_t width_;  // bytes per token
  int64_t context_, vocab_, num_samples_;
  uint64_t seed_;
  int64_t tokens_ = 0;
  int64_t first_ = 0, last_ = 0;  // window starts drawn from [first_, last_]
};

// The semantics of torch.utils.data.DistributedSampler: every epoch the
// indices are (optionally) shuffled with seed + epoch, padded by wrapping
// around to a multiple of the world size (or trimmed when drop_last), and
// rank r takes every world_size-th index starting at r — disjoint shards.
class DistributedSampler {
 public:
  DistributedSampler(int64_t dataset_size, int32_t rank, int32_t world_size, bool shuffle, uint64_t seed,
                     bool drop_last = false);
  std::vector<int64_t> Indices(int64_t epoch) const;
  int64_t num_samples() const { return num_samples_; }  // per rank, per epoch

 private:
  int64_t dataset_size_;
  int32_t rank_;
  int32_t world_size_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  int64_t num_samples_;
};

// Yields this rank's batches epoch after epoch. With num_workers > 0, that
// many threads read and collate the next batches ahead of the training
// thread (at most max(prefetch_batches, num_workers) in flight), as
// torch.utils.data.DataLoader's workers do; the batches and their order are
// the same as without them. The dataset's Get must then be safe to call
// from several threads at once (every dataset here is). Next, Seek and the
// position are for one thread (the training thread).
class DataLoader {
 public:
  DataLoader(std::shared_ptr<const Dataset> dataset, DistributedSampler sampler, int64_t batch_size,
             int num_workers = 0, int prefetch_batches = 2);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Rethrows a worker's error (e.g. an unreadable file) for its batch.
  Batch Next();
  // The position after the last batch Next returned (what a checkpoint
  // saves), not the workers' read-ahead.
  int64_t epoch() const { return epoch_; }
  int64_t offset() const { return offset_; }  // next index within the epoch's shard
  void Seek(int64_t epoch, int64_t offset);

 private:
  // The batch after `*epoch`/`*offset` (a new epoch when the shard is used
  // up); advances them.
  struct Planned {
    int64_t epoch = 0, end = 0;
    std::vector<int64_t> indices;
  };
  Planned Plan(int64_t* epoch, int64_t* offset, std::vector<int64_t>* indices) const;
  void StartWorkers();
  void StopWorkers();
  void WorkerLoop();

  std::shared_ptr<const Dataset> dataset_;
  DistributedSampler sampler_;
  int64_t batch_size_;
  int64_t epoch_ = 0;
  int64_t offset_ = 0;
  std::vector<int64_t> indices_;  // the current epoch's shard

  struct Prefetch;  // the workers' state
  std::unique_ptr<Prefetch> prefetch_;
};

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_DATA_H_
