// StepMetrics: what one rank reports about one training step. Plain data.
#ifndef TRAINYARD_COMMON_STEP_METRICS_H_
#define TRAINYARD_COMMON_STEP_METRICS_H_

#include <cmath>
#include <cstdint>
#include <string>

#include "common/checkpoint_type.h"

namespace trainyard {

struct StepMetrics {
  int32_t rank = 0;
  int64_t step = 0;
  double loss = 0;
  double samples_per_second = 0;
  double step_seconds = 0;       // wall time of the whole step
  double data_seconds = 0;       // waiting for the batch
  double compute_seconds = 0;    // forward + backward (with DDP's overlapped allreduce)
  double optimizer_seconds = 0;  // optimizer step
  double learning_rate = 0;
  int64_t samples = 0;  // samples this rank processed in the step
  double eval_loss = std::nan("");
  double grad_norm = std::nan("");  // global gradient norm before clipping (when clipping)
  int64_t comm_wire_bytes = 0;      // gradient payload handed to collectives this step
  int64_t comm_fp32_bytes = 0;      // what plain fp32 allreduce would have carried
  double comm_hook_seconds = 0;     // time in the comm hook this step
  // Bytes this rank holds at the end of the step (unique storages).
  int64_t param_bytes = 0;
  int64_t grad_bytes = 0;
  int64_t optimizer_bytes = 0;
  // The device allocator's bytes (CUDA jobs; 0 on the CPU): held by live
  // tensors at the end of the step, and the most ever held by this rank.
  int64_t device_allocated_bytes = 0;
  int64_t device_peak_bytes = 0;
  // FSDP collectives this step: payload bytes and time.
  int64_t allgather_bytes = 0;
  int64_t reduce_scatter_bytes = 0;
  double sharded_comm_seconds = 0;
  // Model FLOPs of the step on this rank: 3x its forward pass as PyTorch's
  // profiler counts it (worker/model_flops.h); 0 when not counted.
  double model_flops = 0;
  // The peak FLOP/s of the rank's device at the job's precision, from the
  // worker's table of devices (0: not in it, or a CPU).
  double peak_flops = 0;
  int64_t unix_millis = 0;
};

// One checkpoint a job saved (or failed to save), as rank 0 reports it.
struct CheckpointEvent {
  int64_t index = -1;                           // N of checkpoint_<N>
  int64_t step = 0;                             // optimizer steps completed when it was taken
  CheckpointType type = CheckpointType::kFull;  // kFull or kSharded
  std::string trigger;                          // "periodic", "request", "final", "cancel", "preemption"
  int64_t request_id = 0;                       // of a remote request; 0 otherwise
  std::string path;                             // the committed directory
  int64_t bytes = 0;                            // every file of it
  double seconds = 0;                           // wall time of the save, start to commit
  double blocking_seconds = 0;                  // of which training waited (all of it unless async)
  int64_t host_bytes = 0;                       // host memory of an async save's copy (rank 0)
  int64_t unix_millis = 0;                      // when it was committed
  bool ok = false;
  std::string error;  // why it failed (nothing is left as "latest")
};

// Receives every step's metrics, checkpoint outcomes and notes from a
// rank's training thread (notes also from its data loader's threads).
class MetricsSink {
 public:
  virtual ~MetricsSink() = default;
  virtual void OnStep(const StepMetrics& metrics) = 0;
  virtual void OnCheckpoint(const CheckpointEvent& /*event*/) {}
  // Something the people running the job should see among its events (what
  // a resume or init_from skipped, unreadable images skipped, ...).
  // Thread-safe.
  virtual void OnNote(const std::string& /*text*/) {}
};

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_STEP_METRICS_H_
