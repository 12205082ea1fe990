// Trainer: one rank's training loop — data, forward and backward through the
// job's ParallelModel (none, DDP or FSDP: worker/parallel_model.h), the loss
// scale, clipping, the optimizer step — plus the per-step control exchange
// that makes every rank stop at the same step boundary, where the
// Checkpointer takes the checkpoints that boundary triggers. Runs on the
// calling thread; LibTorch errors propagate as exceptions.
#ifndef TRAINYARD_WORKER_TRAIN_TRAINER_H_
#define TRAINYARD_WORKER_TRAIN_TRAINER_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "common/step_metrics.h"
#include "worker/checkpoint/checkpoint.h"
#include "worker/collectives/dist_context.h"
#include "worker/control/control.h"
#include "worker/parallel/parallel_model.h"
#include "worker/train/step_guard.h"

namespace trainyard {

struct TrainResult {
  int64_t start_step = 0;  // where this run began (the restored step; 0 when fresh)
  int64_t final_step = 0;
  bool stopped = false;   // ended early on request (stop flag on any rank)
  double first_loss = 0;  // of this run's first step
  double last_loss = 0;
  std::string final_checkpoint;  // path of the final FULL checkpoint (or the preemption one), if saved
  bool preempted = false;        // stopped after a preemption checkpoint
};

class Trainer {
 public:
  // A whole-group job (MakeWholeGroupGuard). `dist` may be empty when
  // world_size == 1. `control` (may be null) is
  // read once per step: a stop or checkpoint request on any rank takes
  // effect on all ranks after the same step. With checkpoint.resume_from
  // set, the state is restored here (collective).
  Trainer(JobSpec spec, int32_t rank, int32_t world_size, DistContext dist, MetricsSink* sink, TrainerControl* control);
  // Under a fault-tolerance mode's guard (worker/step_guard.h), which
  // chooses the groups and restores the state (collective); the trainer
  // runs until the guard says the job's samples are trained or the rank
  // left.
  Trainer(JobSpec spec, std::unique_ptr<StepGuard> guard, MetricsSink* sink, TrainerControl* control);
  ~Trainer();

  TrainResult Run();
  // Runs one optimizer step, including the step's control exchange (for
  // tests and benchmarks); returns the loss.
  double Step();

  Model& model();
  ParallelModel& parallel_model();
  // Null unless the job runs DDP over several ranks.
  DistributedDataParallel* ddp();
  // Null unless the job runs FSDP.
  FullyShardedModel* fsdp();
  torch::optim::Optimizer& optimizer();

  // Bytes this rank holds now (ModelMemory).
  using MemoryBytes = ModelMemory;
  MemoryBytes Memory() const;
  int64_t step() const;

  // Mean loss over the held-out split (eval_batches batches per rank,
  // averaged over ranks); collective. Needs eval_every_steps > 0.
  double Evaluate();

  // Saves a checkpoint now, synchronously, after the background save in
  // flight (collective; call between steps on every rank).
  CheckpointEvent Checkpoint(CheckpointType type, const std::string& trigger = "request", int64_t request_id = 0);
  // Waits until the background save in flight (checkpoint.async: periodic
  // and requested saves) is committed or failed (collective).
  void WaitForCheckpoints();
  // State registered here is saved with every checkpoint and restored on
  // resume; `state` must outlive the trainer. Register before resuming
  // matters: state registered after construction is restored only by a
  // later Resume().
  void RegisterForCheckpointing(const std::string& name, Checkpointable* state);
  // Restores from a checkpoint directory (every rank; reads only).
  ResumeInfo Resume(const std::string& dir);
  // What the constructor restored from (empty when it started fresh), and
  // what could not be restored exactly.
  const std::string& resumed_from() const;
  const std::vector<std::string>& resume_notes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_TRAIN_TRAINER_H_
