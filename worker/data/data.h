// Training data: a batch, and the map-style Dataset every dataset
// implements (one file pair each: worker/synthetic_dataset.h,
// worker/token_file.h, worker/mnist_dataset.h, worker/image_folder.h, ...).
// worker/distributed_sampler.h shards a dataset's indices over the ranks and
// worker/data_loader.h yields one rank's batches.
#ifndef TRAINYARD_WORKER_DATA_DATA_H_
#define TRAINYARD_WORKER_DATA_DATA_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

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

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_DATA_DATA_H_
