// TensorsDataset: samples from named tensors in safetensors files — the
// bridge for data prepared in Python (`safetensors.torch.save_file({"inputs":
// x, "targets": y}, path)`). Sample i is row i (the first dimension) of the
// inputs and targets tensors; a directory's *.safetensors files, in name
// order, hold consecutive samples. Only a sample's bytes are read. Inputs
// of a floating type are given as float32 (the models' dtype), integer ones
// (token ids) as int64; targets are integer class indices, given as int64.
#ifndef TRAINYARD_WORKER_DATA_TENSORS_DATASET_H_
#define TRAINYARD_WORKER_DATA_TENSORS_DATASET_H_

#include <cstdint>
#include <string>
#include <vector>

#include "worker/base/safetensors.h"
#include "worker/data/data.h"

namespace trainyard {

class TensorsDataset final : public Dataset {
 public:
  // Throws std::runtime_error naming the file and tensor when a file lacks
  // a tensor, the two differ in sample count, files differ in sample shape,
  // or the targets are not integers.
  TensorsDataset(const std::string& path, const std::string& inputs, const std::string& targets);
  int64_t size() const override { return size_; }
  Batch Get(const std::vector<int64_t>& indices) const override;
  // One input sample's shape (the inputs tensor's shape without its first
  // dimension).
  const std::vector<int64_t>& sample_shape() const { return input_shape_; }

 private:
  struct File {
    std::string path;
    SafetensorsHeader header;
    int64_t first = 0;  // index of its first sample
    int64_t count = 0;
  };
  at::Tensor Rows(const std::string& name, const std::vector<int64_t>& shape, const std::vector<int64_t>& indices,
                  at::ScalarType out) const;

  std::string inputs_, targets_;
  std::vector<File> files_;
  std::vector<int64_t> input_shape_, target_shape_;
  at::ScalarType input_dtype_ = at::kFloat;
  int64_t size_ = 0;
};

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_DATA_TENSORS_DATASET_H_
