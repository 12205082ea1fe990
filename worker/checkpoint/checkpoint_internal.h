// Internal to the checkpoint code (checkpoint_*.cc): the file names of a
// checkpoint directory, the optimizer state's fields, and the collective
// helpers saving and loading share. How parameters are held across ranks is
// worker/checkpoint_holding.h, FULL tensors are assembled by
// worker/checkpoint_full_assembler.h. The public API is worker/checkpoint.h.
#ifndef TRAINYARD_WORKER_CHECKPOINT_CHECKPOINT_INTERNAL_H_
#define TRAINYARD_WORKER_CHECKPOINT_CHECKPOINT_INTERNAL_H_

#include <torch/torch.h>

#include <chrono>
#include <functional>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "worker/base/device.h"
#include "worker/base/safetensors.h"
#include "worker/checkpoint/checkpoint.h"
#include "worker/collectives/collectives.h"
#include "worker/models/model.h"

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

#endif  // TRAINYARD_WORKER_CHECKPOINT_CHECKPOINT_INTERNAL_H_
