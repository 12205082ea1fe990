// SyntheticDataset: learnable fake classification data (data.kind synthetic).
#ifndef TRAINYARD_WORKER_DATA_SYNTHETIC_DATASET_H_
#define TRAINYARD_WORKER_DATA_SYNTHETIC_DATASET_H_

#include <cstdint>
#include <vector>

#include "worker/data/data.h"

namespace trainyard {

// Deterministic fake data that can be learned: sample i starts as N(0, 1)
// noise drawn from a generator seeded by (seed, i); its label is the argmax
// of a fixed random linear "teacher" applied to that noise, and the label's
// fixed "prototype" (kSignal x N(0, 1) per entry of the first dimension,
// repeated over the others: a colour per channel for images, a value per
// feature for vectors) is then added. The teacher is what an MLP learns;
// the prototype is what a convolution or attention model, which cannot see a
// random pattern over all pixels, learns from. Any rank reads the same sample
// for the same index.
class SyntheticDataset final : public Dataset {
 public:
  static constexpr double kSignal = 0.2;

  SyntheticDataset(std::vector<int64_t> sample_shape, int64_t num_classes, int64_t num_samples, uint64_t seed);
  int64_t size() const override { return num_samples_; }
  Batch Get(const std::vector<int64_t>& indices) const override;

 private:
  std::vector<int64_t> sample_shape_;
  int64_t num_samples_;
  uint64_t seed_;
  at::Tensor teacher_;    // [num_classes, prod(sample_shape)]
  at::Tensor prototype_;  // [num_classes, sample_shape[0]]
};

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_DATA_SYNTHETIC_DATASET_H_
