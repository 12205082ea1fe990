// MnistDataset: MNIST from its IDX files (data.kind mnist).
#ifndef TRAINYARD_WORKER_DATA_MNIST_DATASET_H_
#define TRAINYARD_WORKER_DATA_MNIST_DATASET_H_

#include <string>
#include <vector>

#include "worker/data/data.h"

namespace trainyard {

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

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_DATA_MNIST_DATASET_H_
