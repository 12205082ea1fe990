// DistContext: the communication one rank trains with, as the Trainer and
// its ParallelModel take it (worker/dist_setup.h builds it).
#ifndef TRAINYARD_WORKER_COLLECTIVES_DIST_CONTEXT_H_
#define TRAINYARD_WORKER_COLLECTIVES_DIST_CONTEXT_H_

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <c10/core/Device.h>

#include <optional>
#include <string>

namespace trainyard {

class DirectCollectives;
class Collectives;
class FlightRecorder;

// The communication a rank has: null pointers when world_size == 1.
struct DistContext {
  c10::intrusive_ptr<c10d::ProcessGroup> process_group;
  // DDP's gradients outside the process group, when available and selected
  // (ddp.intra_host_transport): shared memory among the ranks of one host,
  // or within each host and a process group across hosts; not owned.
  DirectCollectives* shm = nullptr;
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
  DirectCollectives* control_shm = nullptr;
  c10::intrusive_ptr<c10d::ProcessGroup> control_group;
};

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_COLLECTIVES_DIST_CONTEXT_H_
