// SyntheticDataset: learnable fake classification data (data.kind synthetic).
#ifndef TRAINYARD_WORKER_SYNTHETIC_DATASET_H_
#define TRAINYARD_WORKER_SYNTHETIC_DATASET_H_

#include <cstdint>
#include <vector>

#include "worker/data.h"

namespace trainyard {

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

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_SYNTHETIC_DATASET_H_
