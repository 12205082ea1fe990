// DistributedSampler: which samples each rank reads, epoch by epoch.
#ifndef TRAINYARD_WORKER_DATA_DISTRIBUTED_SAMPLER_H_
#define TRAINYARD_WORKER_DATA_DISTRIBUTED_SAMPLER_H_

#include <cstdint>
#include <vector>

namespace trainyard {

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
  bool shuffle() const { return shuffle_; }
  uint64_t seed() const { return seed_; }

 private:
  int64_t dataset_size_;
  int32_t rank_;
  int32_t world_size_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  int64_t num_samples_;
};

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_DATA_DISTRIBUTED_SAMPLER_H_
