// StepRecorder: turns what the trainer measured in one step (its numbers and
// timings) and the rank's running counters (DDP's comm-hook bytes and time,
// FSDP's all-gather and reduce-scatter bytes and time, device memory) into
// the step's StepMetrics: counters are reported as the change since the
// previous step.
#ifndef TRAINYARD_WORKER_TRAIN_STEP_RECORDER_H_
#define TRAINYARD_WORKER_TRAIN_STEP_RECORDER_H_

#include <c10/core/Device.h>

#include <chrono>
#include <cstdint>

#include "common/step_metrics.h"

namespace trainyard {

class DistributedDataParallel;
class FullyShardedModel;

// What the trainer measured in one step: the step's numbers it knows itself
// (step, loss, samples, learning rate, memory held... any of the list in
// common/step_metrics.h), reported as they are, and the phases' durations.
struct StepSample {
  StepMetrics numbers;
  std::chrono::steady_clock::duration data{}, compute{}, optimizer{}, total{}, forward{};
};

class StepRecorder {
 public:
  // `ddp` and `fsdp` may be null; they must outlive the recorder.
  StepRecorder(int32_t rank, c10::Device device, const DistributedDataParallel* ddp, const FullyShardedModel* fsdp);
  StepMetrics Record(const StepSample& sample);

 private:
  int32_t rank_;
  c10::Device device_;
  const DistributedDataParallel* ddp_;
  const FullyShardedModel* fsdp_;
  // Counters at the previous step.
  int64_t wire_ = 0, fp32_ = 0, hook_nanos_ = 0;
  int64_t allgather_ = 0, reduce_scatter_ = 0, sharded_nanos_ = 0;
};

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_TRAIN_STEP_RECORDER_H_
