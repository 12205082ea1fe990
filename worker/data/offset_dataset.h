// OffsetDataset: a contiguous part of another dataset (a held-out split).
#ifndef TRAINYARD_WORKER_DATA_OFFSET_DATASET_H_
#define TRAINYARD_WORKER_DATA_OFFSET_DATASET_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "worker/data/data.h"

namespace trainyard {

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

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_DATA_OFFSET_DATASET_H_
