// Asynchronous checkpoints (checkpoint.async): at a step boundary every
// rank copies what it saves into host memory (pinned for CUDA tensors) and
// training resumes at once; a thread of the rank writes the copy into the
// checkpoint's staging directory. When every rank has written its files
// (the ranks learn it through the per-step agreement, StepControl), rank 0
// commits — manifest, rename, total_limit — on its thread too. A failed
// write on any rank leaves the previous checkpoint the latest, as a failed
// synchronous save does; a rank killed while writing leaves only a staging
// directory, which is never taken for a checkpoint.
//
// AsyncCheckpointer keeps at most one save in flight per rank: a new save
// first waits for the one in flight (Drain).
#ifndef TRAINYARD_WORKER_CHECKPOINT_BACKGROUND_CHECKPOINT_H_
#define TRAINYARD_WORKER_CHECKPOINT_BACKGROUND_CHECKPOINT_H_

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "common/checkpoint_type.h"
#include "common/step_metrics.h"
#include "worker/checkpoint/checkpoint.h"

namespace trainyard {

// This rank's part of the save in flight, for the step agreement.
enum class SaveProgress {
  kNone,     // nothing in flight, or only rank 0's commit
  kWriting,  // this rank's files are being written
  kWritten,  // written; waiting for the other ranks
  kFailed,   // this rank's write failed
};

class AsyncCheckpointer {
 public:
  explicit AsyncCheckpointer(int32_t rank);
  // Waits for the thread in flight; commits nothing that was not agreed.
  ~AsyncCheckpointer();
  AsyncCheckpointer(const AsyncCheckpointer&) = delete;
  AsyncCheckpointer& operator=(const AsyncCheckpointer&) = delete;

  SaveProgress progress() const;

  // Collective (every rank at the same step boundary): captures this rank's
  // share of `state` into host memory and starts writing it. Call Drain
  // first: there must be nothing in flight. Returns an event only when the
  // save failed at once (its staging directory could not be made, or the
  // copy failed); rank 0 reports it.
  std::optional<CheckpointEvent> Start(const TrainingState& state, CheckpointType type, const CheckpointTarget& target,
                                       const std::string& trigger, int64_t request_id);

  // After each step's agreement, on every rank: `all_written` when no rank
  // reported kWriting, `failed_rank` the lowest rank that reported kFailed
  // (-1: none). Returns the save's event once it is over on this rank (rank
  // 0: committed or failed; others: their part done). Never blocks on disk.
  std::optional<CheckpointEvent> Advance(bool all_written, int32_t failed_rank);

  // Collective: waits until the save in flight is written on every rank
  // and (rank 0) committed; returns its event, if there was one.
  std::optional<CheckpointEvent> Drain(const TrainingState& state);

 private:
  struct Save;
  void Resolve(int32_t failed_rank);
  CheckpointEvent Finish();

  int32_t rank_;
  std::unique_ptr<Save> save_;
};

// For tests: called on the writing thread of every background save, before
// it writes (rank, staging directory). Null: none.
void SetBackgroundWriteHookForTesting(std::function<void(int32_t, const std::string&)> hook);

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_CHECKPOINT_BACKGROUND_CHECKPOINT_H_
