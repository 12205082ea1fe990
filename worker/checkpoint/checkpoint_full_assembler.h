// FullAssembler: how rank 0 gets the whole tensors of a FULL checkpoint,
// one at a time, from the pieces their owners hold (point-to-point over a
// group; FSDP), or as they are (DDP). Part of the checkpoint code.
#ifndef TRAINYARD_WORKER_CHECKPOINT_CHECKPOINT_FULL_ASSEMBLER_H_
#define TRAINYARD_WORKER_CHECKPOINT_CHECKPOINT_FULL_ASSEMBLER_H_

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "worker/checkpoint/checkpoint_holding.h"

namespace trainyard::checkpoint_internal {

// This rank's data of a piece (field < 0: the parameter values).
using PieceSource = std::function<at::Tensor(const Piece& piece, int field)>;

// Rank 0 gets whole tensors, one at a time, from their owners' pieces.
// Everything it needs of the Holding is taken at construction, so it may be
// used later on another thread with a PieceSource of host copies.
class FullAssembler {
 public:
  // `group` numbers its ranks as the Holding numbers writers (rank r =
  // writer r); null when rank 0 holds every parameter whole. `whole` is
  // the live parameters to write as they are (DDP) or empty.
  FullAssembler(const Holding& h, int32_t rank, c10::intrusive_ptr<c10d::ProcessGroup> group, PieceSource source,
                std::vector<at::Tensor> whole = {});

  // The pieces writer `w` contributes (its own, to copy for later).
  std::vector<Piece> PiecesOf(int32_t w) const;

  // Rank 0: parameter p's values (field < 0) or optimizer field, whole.
  // Other owners: send their pieces; returns an undefined tensor.
  at::Tensor Get(size_t p, int field);

 private:
  const int32_t rank_;
  const int32_t my_writer_;
  const size_t num_params_;
  c10::intrusive_ptr<c10d::ProcessGroup> group_;
  PieceSource source_;
  std::vector<at::Tensor> whole_;
  std::vector<std::vector<int64_t>> sizes_;
  std::vector<std::vector<std::pair<int32_t, Piece>>> by_param_;
};

}  // namespace trainyard::checkpoint_internal

#endif  // TRAINYARD_WORKER_CHECKPOINT_CHECKPOINT_FULL_ASSEMBLER_H_
