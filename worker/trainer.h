// Trainer: one rank's training loop — data, forward, backward (with DDP's
// gradient allreduce), optimizer — plus the per-step control exchange that
// makes every rank stop at the same step boundary. Runs on the calling
// thread; LibTorch errors propagate as exceptions.
#ifndef TRAINYARD_WORKER_TRAINER_H_
#define TRAINYARD_WORKER_TRAINER_H_

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <c10/core/Device.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include "common/job_spec.h"
#include "common/step_metrics.h"
#include "worker/checkpoint.h"
#include "worker/control.h"

namespace torch::optim {
class Optimizer;
}

namespace trainyard {

class Model;
class DistributedDataParallel;
class ShmCollectives;
class Collectives;
class FullyShardedModel;
class FlightRecorder;

// The communication a rank has: null pointers when world_size == 1.
struct DistContext {
  c10::intrusive_ptr<c10d::ProcessGroup> process_group;
  // Shared-memory collectives among ranks of one host, when available and
  // selected (ddp.intra_host_transport); not owned.
  ShmCollectives* shm = nullptr;
  // FSDP: the ranks sharing one copy of the parameters, and the ranks
  // holding the same shard (see FullyShardedModel); not owned.
  Collectives* shard_group = nullptr;
  Collectives* replicate_group = nullptr;
  // This rank's device; unset: RankDevice(spec.device) (ranks as threads
  // of one process, as tests run them, set it per rank).
  std::optional<c10::Device> device;
  // Where this job's in-memory snapshots live on this host (SnapshotDir of
  // common/paths.h; the same path for every rank of the host). Empty:
  // checkpoint.snapshot_every_steps is ignored.
  std::string snapshot_dir;
  // Where the trainer tells its phase (worker/flight_recorder.h); not owned.
  FlightRecorder* flight_recorder = nullptr;
  // FSDP, asynchronous checkpoints: a Gloo group over the same ranks as
  // process_group, used by the background writers alone (FULL assembly).
  c10::intrusive_ptr<c10d::ProcessGroup> checkpoint_group;
  // The per-step agreement's own shared memory or group; null: it rides
  // DDP's shared memory, or the process group. Not owned.
  ShmCollectives* control_shm = nullptr;
  c10::intrusive_ptr<c10d::ProcessGroup> control_group;
};

struct TrainResult {
  int64_t final_step = 0;
  bool stopped = false;  // ended early on request (stop flag on any rank)
  double first_loss = 0;
  double last_loss = 0;
  std::string final_checkpoint;  // path of the final FULL checkpoint (or the preemption one), if saved
  bool preempted = false;        // stopped after a preemption checkpoint
};

class Trainer {
 public:
  // `dist` may be empty when world_size == 1. `control` (may be null) is
  // read once per step: a stop or checkpoint request on any rank takes
  // effect on all ranks after the same step. With checkpoint.resume_from
  // set, the state is restored here (collective).
  Trainer(JobSpec spec, int32_t rank, int32_t world_size, DistContext dist, MetricsSink* sink, TrainerControl* control);
  ~Trainer();

  TrainResult Run();
  // Runs one optimizer step, including the step's control exchange (for
  // tests and benchmarks); returns the loss.
  double Step();

  Model& model();
  // Null unless the job runs DDP over several ranks.
  DistributedDataParallel* ddp();
  // Null unless the job runs FSDP.
  FullyShardedModel* fsdp();
  torch::optim::Optimizer& optimizer();

  // Bytes this rank holds now, counted from tensor storages (each storage
  // once; freed FSDP buffers count zero).
  struct MemoryBytes {
    int64_t params = 0, grads = 0, optimizer = 0;
    int64_t total() const { return params + grads + optimizer; }
  };
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
  at::Tensor Impl_Loss(const at::Tensor& output, const at::Tensor& targets) const;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_TRAINER_H_
