// Holding: how a job's parameters and optimizer state are held across
// ranks, as the checkpoint code (checkpoint_*.cc) saves and loads them: on
// this rank (to load into), by every SHARDED writer (FSDP: its flat shards;
// DDP: an even split of the flattened parameters), and which ranks take part
// in assembling FULL tensors.
#ifndef TRAINYARD_WORKER_CHECKPOINT_CHECKPOINT_HOLDING_H_
#define TRAINYARD_WORKER_CHECKPOINT_CHECKPOINT_HOLDING_H_

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "worker/base/safetensors.h"
#include "worker/checkpoint/checkpoint.h"

namespace trainyard {
class Collectives;
}

namespace trainyard::checkpoint_internal {

// Elements [begin, end) of flattened parameter `param`, stored at
// `holder_offset` of optimizer parameter `holder`.
struct Piece {
  size_t param = 0;
  int64_t begin = 0, end = 0;
  size_t holder = 0;
  int64_t holder_offset = 0;
  int64_t size() const { return end - begin; }
};

// How the job's parameters are held: on this rank (to load into), by every
// SHARDED writer, and which ranks take part in assembling FULL tensors.
// Keeps a reference to `s`.
class Holding {
 public:
  explicit Holding(const TrainingState& s);

  size_t num_params() const { return params_.size(); }
  const std::string& name(size_t p) const { return names_[p]; }
  const at::Tensor& param(size_t p) const { return params_[p]; }
  const std::vector<at::Tensor>& holders() const { return holders_; }
  int32_t writers() const { return writers_; }
  int32_t my_writer() const { return my_writer_; }

  // What writer w saves in a SHARDED checkpoint.
  std::vector<Piece> Owned(int32_t w) const;
  // What this rank holds (and loads into).
  std::vector<Piece> Local() const;
  // The group over which rank 0 assembles FULL tensors from their owners;
  // null when rank 0 holds every parameter whole.
  Collectives* full_group() const;
  // Takes part in assembling FULL tensors.
  bool assembles() const { return s_.rank == 0 || (full_group() != nullptr && my_writer_ >= 0); }

 private:
  const TrainingState& s_;
  std::vector<std::string> names_;
  std::vector<at::Tensor> params_;
  std::vector<at::Tensor> holders_;
  std::vector<int64_t> offsets_;
  int64_t total_ = 0;
  int32_t writers_ = 1;
  int32_t my_writer_ = 0;
};

// A piece's data on this rank: the parameter values (field < 0) or one
// optimizer field; zeros when the holder has no state for it.
at::Tensor PieceData(const TrainingState& s, const Holding& h, const Piece& piece, int field,
                     const std::vector<std::string>& fields);

// Parameters are kept (and saved) in fp32 whatever the compute dtype; their
// storage may be freed (FSDP), so only metadata is read.
std::vector<TensorSpec> ParamSpecs(const Holding& h);

}  // namespace trainyard::checkpoint_internal

#endif  // TRAINYARD_WORKER_CHECKPOINT_CHECKPOINT_HOLDING_H_
