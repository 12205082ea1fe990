// Checkpoints of a rank's whole training state, and resuming from them.
//
// Layout of <project_dir>/checkpoints/checkpoint_<N>/ (sealed by
// CheckpointDir: staging directory, fsync, manifest last, rename):
//   trainer_state.json       step, data position, optimizer step, type,
//                            world size and strategy that wrote it, the
//                            parameter table (rank 0)
//   rank_state-0000r.safetensors
//                            per rank: RNG state, DDP comm-hook state
//                            (PowerSGD error feedback, P/Q, iteration),
//                            registered extra state
//   FULL:    model.safetensors, or model-0000k-of-0000n.safetensors plus
//            model.safetensors.index.json (Hugging Face layout; the module's
//            own dotted names), and optimizer.safetensors ("<param>.<field>")
//            — written by rank 0 one tensor at a time; under FSDP each tensor
//            is assembled on rank 0 from its owners' pieces (point-to-point),
//            so no rank ever holds more than one full tensor extra.
//   SHARDED: model_shard-0000w-of-0000W.safetensors and
//            optimizer_shard-...: what writer w owns, as 1-D slices of the
//            flattened tensors (FSDP: its flat shard; DDP: an even split),
//            plus sharded_index.json: every tensor's global shape and dtype
//            and which file holds which element range. No gather.
//
// Either layout loads on any world size and under DDP or any FSDP strategy:
// each rank reads only the element ranges it holds.
#ifndef TRAINYARD_WORKER_CHECKPOINT_CHECKPOINT_H_
#define TRAINYARD_WORKER_CHECKPOINT_CHECKPOINT_H_

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "common/step_metrics.h"

namespace torch::optim {
class Optimizer;
class OptimizerParamState;
}  // namespace torch::optim

namespace trainyard {

class Model;
class FullyShardedModel;
class DistributedDataParallel;
class DataLoader;

// The optimizer's state for `param` (AdamWParamState, SGDParamState), or
// null before its first step. Keys differ across LibTorch releases; this is
// the one place that knows them.
torch::optim::OptimizerParamState* OptimizerStateOf(torch::optim::Optimizer& optimizer, const at::Tensor& param);

// State saved with every checkpoint and restored on resume, per rank
// (Accelerate's register_for_checkpointing).
class Checkpointable {
 public:
  virtual ~Checkpointable() = default;
  virtual std::map<std::string, at::Tensor> State() const = 0;
  virtual void LoadState(const std::map<std::string, at::Tensor>& state) = 0;
};

// One rank's training, as the checkpoint code sees it. Pointers are not
// owned; fsdp and ddp are null when not used.
struct TrainingState {
  const JobSpec* spec = nullptr;
  int32_t rank = 0;
  int32_t world_size = 1;
  c10::intrusive_ptr<c10d::ProcessGroup> process_group;  // null when world_size == 1
  // FSDP: a Gloo group of its own for assembling FULL checkpoints on the
  // background writer threads (rank r = writer r); null: assembled at the
  // step boundary.
  c10::intrusive_ptr<c10d::ProcessGroup> checkpoint_group;
  Model* model = nullptr;
  FullyShardedModel* fsdp = nullptr;
  DistributedDataParallel* ddp = nullptr;
  torch::optim::Optimizer* optimizer = nullptr;
  DataLoader* loader = nullptr;
  std::map<std::string, Checkpointable*> extra;
  int64_t step = 0;
};

// Where the ranks of a job agree to write: checkpoint `index` of
// `project_dir`, staged under `staging_tag` (the same on every rank).
struct CheckpointTarget {
  std::string project_dir;
  int64_t index = 0;
  std::string staging_tag;
  int32_t total_limit = -1;  // checkpoints to keep (0: all); -1: the job's checkpoint.total_limit
  bool checksums = true;     // XXH3 of every file in the manifest (CheckpointDir::Commit)
};

// Saves a checkpoint. Collective: every rank calls it at the same step
// boundary with the same target. Never throws for I/O trouble: a failure on
// any rank (disk full, unwritable directory) leaves nothing that looks
// complete and is returned, identically on every rank (the failing rank's
// own text there, "failed on rank r" elsewhere). Rank 0 applies total_limit.
CheckpointEvent SaveCheckpoint(const TrainingState& state, CheckpointType type, const CheckpointTarget& target);

// Resolves `resume_from`: "latest" → the newest complete checkpoint of
// project_dir ("" when there is none; skipped directories and why are added
// to `notes`); a path → that directory, which must be a complete checkpoint
// (checksums verified), else std::runtime_error says why.
std::string ResolveCheckpoint(const std::string& project_dir, const std::string& resume_from,
                              std::vector<std::string>* notes);

struct ResumeInfo {
  int64_t step = 0;
  int64_t checkpoint_index = -1;
  bool full = false;               // a FULL checkpoint (not SHARDED)
  std::vector<std::string> notes;  // what could not be restored exactly, and why
};

// Restores the training state from a checkpoint directory on this rank
// (reads only; no collective). Throws std::runtime_error naming the tensor
// or file on any mismatch (missing tensor, other shape or dtype).
ResumeInfo LoadCheckpoint(const TrainingState& state, const std::string& dir);

// Initial weights (model.init_from): sets this rank's part of every
// parameter and buffer from a safetensors file or a Hugging Face weights
// directory (model.safetensors, or model.safetensors.index.json and its
// shards), reading only the elements the rank holds (under FSDP its shard).
// Tensor names are the model's after removing `prefix` from the file's.
// Floating-point tensors of another precision (bf16, fp16) are converted,
// with a note. Throws std::runtime_error listing every missing, unexpected,
// wrong-shape and wrong-dtype tensor; with `strict` false, missing and unexpected ones
// are skipped and returned as notes instead. Reads only; no collective.
std::vector<std::string> LoadInitialWeights(const TrainingState& state, const std::string& path, bool strict,
                                            const std::string& prefix);

// Replica healing (fault_tolerance.mode replica): every rank of `pg` ends
// with rank `src`'s training state as a checkpoint holds it — parameters,
// buffers, optimizer state (created where missing; cleared where the source
// has none), the CPU RNG, the comm hook's and every registered
// Checkpointable's state — except the step and the data position, which the
// caller agrees on. Collective over `pg` (a group of whole replicas: DDP or
// one rank; FSDP: its replicate group, whose ranks hold the same shard).
// What arrived is checked against the source's digest (CheckStateDigest):
// a mismatch throws StateDigestMismatch. Returns the bytes broadcast.
// What a rank throws when the state it holds after a broadcast does not
// match the source's digest.
class StateDigestMismatch : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Collective over `pg`: every rank hashes `tensors` (HashTensors) and `src`
// broadcasts its digest; a rank whose digest differs throws
// StateDigestMismatch naming `src`.
void CheckStateDigest(const c10::intrusive_ptr<c10d::ProcessGroup>& pg, const std::vector<at::Tensor>& tensors,
                      int32_t src);

int64_t BroadcastTrainingState(const TrainingState& state, const c10::intrusive_ptr<c10d::ProcessGroup>& pg,
                               int32_t src);

// For tests and tools: a checkpoint's tensors by name, whichever layout.
class CheckpointReader {
 public:
  explicit CheckpointReader(const std::string& dir);
  ~CheckpointReader();
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;

  std::string type() const;  // "full" or "sharded"
  // Model tensors (parameters and buffers) and optimizer tensors
  // ("<param>.<field>").
  std::vector<std::string> ModelTensors() const;
  std::vector<std::string> OptimizerTensors() const;
  // The whole tensor, in its shape.
  at::Tensor ModelTensor(const std::string& name) const;
  at::Tensor OptimizerTensor(const std::string& name) const;

  struct Impl;

 private:
  friend ResumeInfo LoadCheckpoint(const TrainingState& state, const std::string& dir);
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_CHECKPOINT_CHECKPOINT_H_
