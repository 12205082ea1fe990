#include "worker/checkpoint/checkpoint_holding.h"

#include <torch/torch.h>

#include <algorithm>

#include "worker/checkpoint/checkpoint_internal.h"
#include "worker/models/models.h"
#include "worker/parallel/fsdp.h"

namespace trainyard::checkpoint_internal {

Holding::Holding(const TrainingState& s) : s_(s) {
  for (const auto& item : s.model->named_parameters()) {
    names_.push_back(item.key());
    params_.push_back(item.value());
  }
  if (s.fsdp != nullptr) {
    holders_ = s.fsdp->ShardParameters();
    writers_ = s.fsdp->shard_size();
    my_writer_ = s.fsdp->replica_rank() == 0 ? s.fsdp->shard_rank() : -1;
  } else {
    holders_ = params_;
    writers_ = s.world_size;
    my_writer_ = s.rank;
    int64_t total = 0;
    for (const at::Tensor& p : params_) {
      offsets_.push_back(total);
      total += p.numel();
    }
    total_ = total;
  }
}

std::vector<Piece> Holding::Owned(int32_t w) const {
  std::vector<Piece> out;
  if (s_.fsdp != nullptr) {
    const auto& units = s_.fsdp->units();
    for (size_t u = 0; u < units.size(); ++u) {
      const FsdpUnitInfo& info = units[u];
      const int64_t lo = w * info.shard_numel, hi = lo + info.shard_numel;
      for (size_t i = 0; i < info.params.size(); ++i) {
        const int64_t a = info.offsets[i], b = a + params_[info.params[i]].numel();
        const int64_t x = std::max(lo, a), y = std::min(hi, b);
        if (x < y) out.push_back({info.params[i], x - a, y - a, u, x - lo});
      }
    }
    return out;
  }
  const int64_t chunk = (total_ + writers_ - 1) / std::max(writers_, 1);
  const int64_t lo = w * chunk, hi = std::min(total_, lo + chunk);
  for (size_t p = 0; p < params_.size(); ++p) {
    const int64_t a = offsets_[p], b = a + params_[p].numel();
    const int64_t x = std::max(lo, a), y = std::min(hi, b);
    if (x < y) out.push_back({p, x - a, y - a, p, x - a});
  }
  return out;
}

std::vector<Piece> Holding::Local() const {
  if (s_.fsdp != nullptr) return Owned(s_.fsdp->shard_rank());
  std::vector<Piece> out;
  for (size_t p = 0; p < params_.size(); ++p) {
    if (params_[p].numel() > 0) out.push_back({p, 0, params_[p].numel(), p, 0});
  }
  return out;
}

Collectives* Holding::full_group() const {
  return s_.fsdp != nullptr && s_.fsdp->shard_size() > 1 ? s_.fsdp->shard_group() : nullptr;
}

at::Tensor PieceData(const TrainingState& s, const Holding& h, const Piece& piece, int field,
                     const std::vector<std::string>& fields) {
  const at::Tensor& holder = h.holders()[piece.holder];
  at::Tensor src = field < 0 ? holder.detach() : FieldOf(*s.optimizer, holder, fields[field]);
  if (!src.defined()) return at::zeros({piece.size()}, holder.options().requires_grad(false));
  return src.reshape({-1}).narrow(0, piece.holder_offset, piece.size()).contiguous();
}

std::vector<TensorSpec> ParamSpecs(const Holding& h) {
  std::vector<TensorSpec> out;
  for (size_t p = 0; p < h.num_params(); ++p) out.push_back({h.name(p), at::kFloat, h.param(p).sizes().vec()});
  return out;
}

}  // namespace trainyard::checkpoint_internal
