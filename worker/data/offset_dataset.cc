#include "worker/data/offset_dataset.h"

namespace trainyard {

OffsetDataset::OffsetDataset(std::shared_ptr<const Dataset> base, int64_t offset, int64_t size)
    : base_(std::move(base)), offset_(offset), size_(size) {}

Batch OffsetDataset::Get(const std::vector<int64_t>& indices) const {
  std::vector<int64_t> shifted;
  shifted.reserve(indices.size());
  for (int64_t i : indices) shifted.push_back(offset_ + i);
  return base_->Get(shifted);
}

Batch OffsetDataset::GetForEpoch(const std::vector<int64_t>& indices, int64_t epoch) const {
  std::vector<int64_t> shifted(indices);
  for (int64_t& i : shifted) i += offset_;
  return base_->GetForEpoch(shifted, epoch);
}

}  // namespace trainyard
