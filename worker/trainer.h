// Trainer: one rank's training loop — data, forward, backward (with DDP's
// gradient allreduce), optimizer — plus the per-step control exchange that
// makes every rank stop at the same step boundary. Runs on the calling
// thread; LibTorch errors propagate as exceptions.
#ifndef TRAINYARD_WORKER_TRAINER_H_
#define TRAINYARD_WORKER_TRAINER_H_

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <atomic>
#include <memory>
#include <string>

#include "common/job_spec.h"
#include "common/step_metrics.h"

namespace trainyard {

class Model;
class DistributedDataParallel;
class ShmCollectives;
class Collectives;
class FullyShardedModel;

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
};

struct TrainResult {
  int64_t final_step = 0;
  bool stopped = false;  // ended early on request (stop flag on any rank)
  double first_loss = 0;
  double last_loss = 0;
};

class Trainer {
 public:
  // `dist` may be empty when world_size == 1. `stop_requested` is polled
  // once per step; when any rank has it set, all ranks stop after the same
  // step.
  Trainer(JobSpec spec, int32_t rank, int32_t world_size, DistContext dist, MetricsSink* sink,
          const std::atomic<bool>* stop_requested);
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

  // Bytes this rank holds now, counted from tensor storages (each storage
  // once; freed FSDP buffers count zero).
  struct MemoryBytes {
    int64_t params = 0, grads = 0, optimizer = 0;
    int64_t total() const { return params + grads + optimizer; }
  };
  MemoryBytes Memory() const;
  int64_t step() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_TRAINER_H_
