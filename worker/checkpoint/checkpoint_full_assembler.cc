#include "worker/checkpoint/checkpoint_full_assembler.h"

#include <torch/torch.h>

#include "worker/base/device.h"

namespace trainyard::checkpoint_internal {

FullAssembler::FullAssembler(const Holding& h, int32_t rank, c10::intrusive_ptr<c10d::ProcessGroup> group,
                             PieceSource source, std::vector<at::Tensor> whole)
    : rank_(rank),
      my_writer_(h.my_writer()),
      num_params_(h.num_params()),
      group_(std::move(group)),
      source_(std::move(source)),
      whole_(std::move(whole)),
      by_param_(h.num_params()) {
  for (size_t p = 0; p < num_params_; ++p) sizes_.push_back(h.param(p).sizes().vec());
  if (!group_) {
    for (const Piece& piece : h.Local()) by_param_[piece.param].push_back({0, piece});
    return;
  }
  for (int32_t w = 0; w < h.writers(); ++w) {
    for (const Piece& piece : h.Owned(w)) by_param_[piece.param].push_back({w, piece});
  }
}

std::vector<Piece> FullAssembler::PiecesOf(int32_t w) const {
  std::vector<Piece> out;
  for (const auto& list : by_param_) {
    for (const auto& [owner, piece] : list) {
      if (owner == w) out.push_back(piece);
    }
  }
  return out;
}

at::Tensor FullAssembler::Get(size_t p, int field) {
  const int tag = static_cast<int>((field + 1) * num_params_ + p);
  if (rank_ != 0) {
    for (const auto& [w, piece] : by_param_[p]) {
      if (w != my_writer_) continue;
      // Host tensors: the pieces travel through the group's Gloo backend
      // whatever the device (and one tensor at a time through host memory).
      std::vector<at::Tensor> t = {ToHost(source_(piece, field))};
      group_->send(t, 0, tag)->wait();
    }
    return at::Tensor();
  }
  // DDP holds parameters whole in fp32: no copy. FSDP's module parameters
  // may be low-precision views; the fp32 shards are the truth.
  if (!group_ && field < 0 && !whole_.empty()) return ToHost(whole_[p].detach());
  at::Tensor out = at::empty(sizes_[p], at::TensorOptions(at::kFloat));  // host memory
  at::Tensor flat = out.view({-1});
  std::vector<c10::intrusive_ptr<c10d::Work>> pending;
  std::vector<std::vector<at::Tensor>> buffers;
  buffers.reserve(by_param_[p].size());
  for (const auto& [w, piece] : by_param_[p]) {
    at::Tensor dst = flat.narrow(0, piece.begin, piece.size());
    if (w == 0) {
      dst.copy_(source_(piece, field));
    } else {
      buffers.push_back({dst});
      pending.push_back(group_->recv(buffers.back(), w, tag));
    }
  }
  for (auto& work : pending) work->wait();
  return out;
}

}  // namespace trainyard::checkpoint_internal
