// TrainerParts: one rank's training state as the Trainer holds it — the
// groups it trains in, the model with its parallelism and optimizer, the
// data, the step, the per-step agreement and the checkpoints. A
// fault-tolerance mode (worker/step_guard.h) rebinds these parts to new
// groups and restores them; nothing else reaches into them. Used on the
// training thread only.
#ifndef TRAINYARD_WORKER_TRAIN_TRAINER_PARTS_H_
#define TRAINYARD_WORKER_TRAIN_TRAINER_PARTS_H_

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <cstdint>
#include <memory>

#include "common/job_spec.h"
#include "common/step_metrics.h"
#include "worker/collectives/dist_context.h"
#include "worker/data/job_data.h"
#include "worker/parallel/parallel_model.h"
#include "worker/train/checkpointer.h"
#include "worker/train/loss_scaler.h"
#include "worker/train/step_control.h"
#include "worker/train/step_recorder.h"

namespace trainyard {

class FlightRecorder;

struct TrainerParts {
  JobSpec spec;
  int32_t rank = 0;
  int32_t world_size = 1;
  c10::Device device = c10::Device(c10::kCPU);  // where the model, batches and gradients live
  c10::intrusive_ptr<c10d::ProcessGroup> pg;
  FlightRecorder* flight = nullptr;  // the phase goes here (diagnosis of hangs)
  c10::intrusive_ptr<c10d::ProcessGroup> checkpoint_group;
  double peak_flops = 0;  // the device's, at the job's precision (PeakFlops)
  MetricsSink* sink = nullptr;

  std::unique_ptr<ParallelModel> model;  // the model, its parallelism and optimizer
  std::unique_ptr<LossScaler> scaler;    // mixed_precision fp16
  JobData data;
  int64_t step = 0;  // steps this rank holds committed

  // The step's agreement, checkpoints (their triggers, agreement and
  // snapshots).
  std::unique_ptr<StepControl> control;
  std::unique_ptr<Checkpointer> checkpoints;
  std::unique_ptr<StepRecorder> recorder;
  TrainerControl* requests = nullptr;  // the control the trainer was given

  // The training loss of `output` (of Forward or EvalForward) for
  // `targets`: the job's loss kind, or the chunked loss where the model
  // left its output projection to it.
  at::Tensor Loss(const at::Tensor& output, const at::Tensor& targets) const;
  // The optimizer step of the step in flight (loss scale updated, gradients
  // released); `mem` (may be null): the steady-state memory, read before
  // the release.
  void Apply(double lr, bool finite, ModelMemory* mem);
  // Trains in `dist`'s groups from now on (as group rank `rank_in` of
  // `world`): the model, the step agreement, the checkpoints and the step
  // recorder move over. The data loader's members are the caller's.
  void Rebind(const DistContext& dist, int32_t rank_in, int32_t world);
  // Drops every reference to the current groups.
  void Unbind();
  TrainingState State() const;
};

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_TRAIN_TRAINER_PARTS_H_
