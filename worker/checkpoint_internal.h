// Internal to the checkpoint code (checkpoint_*.cc): the file names of a
// checkpoint directory, how the job's parameters and optimizer state are
// held across ranks (Holding), and the collective helpers saving and
// loading share. The public API is worker/checkpoint.h.
#ifndef TRAINYARD_WORKER_CHECKPOINT_INTERNAL_H_
#define TRAINYARD_WORKER_CHECKPOINT_INTERNAL_H_

#include <torch/torch.h>

#include <chrono>
#include <functional>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "worker/checkpoint.h"
#include "worker/collectives.h"
#include "worker/device.h"
#include "worker/fsdp.h"
#include "worker/models.h"
#include "worker/safetensors.h"

namespace trainyard {
class CheckpointOutput;
}

namespace trainyard::checkpoint_internal {

// ---- Layout ----------------------------------------------------------------

inline constexpr const char* kFormat = "trainyard-checkpoint-1";
inline constexpr const char* kTrainerState = "trainer_state.json";
inline constexpr const char* kShardedIndex = "sharded_index.json";
inline constexpr const char* kOptimizerFile = "optimizer.safetensors";
inline constexpr const char* kModelIndex = "model.safetensors.index.json";
inline constexpr const char* kModelFile = "model.safetensors";

inline std::string RankStateFile(int32_t rank) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "rank_state-%05d.safetensors", rank);
  return buf;
}

inline std::string ShardFile(const char* kind, int32_t writer, int32_t writers) {
  char buf[96];
  std::snprintf(buf, sizeof(buf), "%s_shard-%05d-of-%05d.safetensors", kind, writer, writers);
  return buf;
}

// ---- Optimizer state (checkpoint_optimizer_state.cc) -------------------------

// The per-parameter state tensors the job's optimizer keeps.
std::vector<std::string> OptimizerFields(const JobSpec& spec);
// One field of a parameter's state; undefined when it has none.
at::Tensor FieldOf(torch::optim::Optimizer& o, const at::Tensor& p, const std::string& field);
// AdamW's step count of a parameter (0 otherwise).
int64_t StepOf(torch::optim::Optimizer& o, const at::Tensor& p);
bool HasState(torch::optim::Optimizer& o, const std::vector<at::Tensor>& holders);
// Gives `p` zero state (kept when present) with the given step.
void EnsureState(torch::optim::Optimizer& o, OptimizerKind kind, const at::Tensor& p, int64_t step);

// ---- Who holds what --------------------------------------------------------

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
class Holding {
 public:
  explicit Holding(const TrainingState& s) : s_(s) {
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

  size_t num_params() const { return params_.size(); }
  const std::string& name(size_t p) const { return names_[p]; }
  const at::Tensor& param(size_t p) const { return params_[p]; }
  const std::vector<at::Tensor>& holders() const { return holders_; }
  int32_t writers() const { return writers_; }
  int32_t my_writer() const { return my_writer_; }

  // What writer w saves in a SHARDED checkpoint.
  std::vector<Piece> Owned(int32_t w) const {
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

  // What this rank holds (and loads into).
  std::vector<Piece> Local() const {
    if (s_.fsdp != nullptr) return Owned(s_.fsdp->shard_rank());
    std::vector<Piece> out;
    for (size_t p = 0; p < params_.size(); ++p) {
      if (params_[p].numel() > 0) out.push_back({p, 0, params_[p].numel(), p, 0});
    }
    return out;
  }

  // The group over which rank 0 assembles FULL tensors from their owners;
  // null when rank 0 holds every parameter whole.
  Collectives* full_group() const {
    return s_.fsdp != nullptr && s_.fsdp->shard_size() > 1 ? s_.fsdp->shard_group() : nullptr;
  }
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
inline at::Tensor PieceData(const TrainingState& s, const Holding& h, const Piece& piece, int field,
                            const std::vector<std::string>& fields) {
  const at::Tensor& holder = h.holders()[piece.holder];
  at::Tensor src = field < 0 ? holder.detach() : FieldOf(*s.optimizer, holder, fields[field]);
  if (!src.defined()) return at::zeros({piece.size()}, holder.options().requires_grad(false));
  return src.reshape({-1}).narrow(0, piece.holder_offset, piece.size()).contiguous();
}

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
                std::vector<at::Tensor> whole = {})
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

  // The pieces writer `w` contributes (its own, to copy for later).
  std::vector<Piece> PiecesOf(int32_t w) const {
    std::vector<Piece> out;
    for (const auto& list : by_param_) {
      for (const auto& [owner, piece] : list) {
        if (owner == w) out.push_back(piece);
      }
    }
    return out;
  }

  // Rank 0: parameter p's values (field < 0) or optimizer field, whole.
  // Other owners: send their pieces; returns an undefined tensor.
  at::Tensor Get(size_t p, int field) {
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

// ---- Agreement -------------------------------------------------------------

// The lowest rank whose `ok` is false, or -1. Collective.
inline int32_t FirstFailure(const TrainingState& s, bool ok) {
  if (!s.process_group) return ok ? -1 : s.rank;
  at::Tensor t = at::full({1}, ok ? int64_t{s.world_size} : int64_t{s.rank}, at::kLong);
  std::vector<at::Tensor> v = {t};
  c10d::AllreduceOptions opts;
  opts.reduceOp = c10d::ReduceOp::MIN;
  s.process_group->allreduce(v, opts)->wait();
  const int64_t r = t.item<int64_t>();
  return r >= s.world_size ? -1 : static_cast<int32_t>(r);
}

inline nlohmann::ordered_json TensorTable(const std::vector<TensorSpec>& tensors) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const TensorSpec& t : tensors) {
    out.push_back({{"name", t.name}, {"shape", t.shape}, {"dtype", SafetensorsDtype(t.dtype)}});
  }
  return out;
}

// Parameters are kept (and saved) in fp32 whatever the compute dtype; their
// storage may be freed (FSDP), so only metadata is read.
inline std::vector<TensorSpec> ParamSpecs(const Holding& h) {
  std::vector<TensorSpec> out;
  for (size_t p = 0; p < h.num_params(); ++p) out.push_back({h.name(p), at::kFloat, h.param(p).sizes().vec()});
  return out;
}

inline std::vector<std::pair<std::string, at::Tensor>> Buffers(const TrainingState& s) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& item : s.model->named_buffers()) out.emplace_back(item.key(), item.value().detach());
  return out;
}

// ---- Saving in phases (checkpoint_save.cc) ----------------------------------
// SaveCheckpoint runs them in a row; an asynchronous save
// (BackgroundCheckpoint) writes and commits on its own thread.

// What rank 0 needs to commit a save; plain values, usable from any thread.
struct CommitTarget {
  std::string project_dir;
  std::string staging;
  int64_t index = 0;
  int64_t step = 0;
  int32_t world_size = 1;
  int32_t total_limit = 0;
  bool checksums = true;
};

struct SaveBegun {
  std::chrono::steady_clock::time_point start;
  CheckpointType type = CheckpointType::kFull;  // kFull or kSharded
  CheckpointEvent event;                        // index, step, type; the failure when `failed`
  CommitTarget commit;
  bool failed = false;
};

// Collective: rank 0 makes the staging directory; every rank learns whether
// it could.
SaveBegun BeginSave(const TrainingState& s, CheckpointType type, const CheckpointTarget& target);
// This rank's files of the checkpoint into `staging` through `out`
// (collective for FULL assembly under FSDP). Throws on errors.
void WriteCheckpointFiles(const TrainingState& s, CheckpointType type, int64_t index, const std::string& staging,
                          CheckpointOutput& out);
// The failed event of a save whose lowest failing rank is `failed_rank`
// (`error` is this rank's own text); rank 0 removes the staging directory.
CheckpointEvent FailSave(const SaveBegun& b, int32_t rank, int32_t failed_rank, const std::string& error);
// The directory a committed save has.
std::string CommittedPath(const CommitTarget& c);
// Rank 0, after every rank wrote its files: manifest, rename, total_limit.
// Touches no training state.
CheckpointEvent CommitSave(const SaveBegun& b);

}  // namespace trainyard::checkpoint_internal

#endif  // TRAINYARD_WORKER_CHECKPOINT_INTERNAL_H_
