// StepEngine: the device work of one optimizer step — each micro-batch's
// forward, loss and backward, the gradients' clipping, the optimizer step
// and the gradients' release — as the Trainer hands it its micro-batches.
// Two modes: EagerStep issues every kernel from the host, step by step;
// the captured step (worker/train/captured_step.h) records the whole step
// once as a CUDA graph and replays it (fused.cuda_graph). MakeStepEngine
// picks by the job's spec and device. Used on the training thread only.
#ifndef TRAINYARD_WORKER_TRAIN_STEP_ENGINE_H_
#define TRAINYARD_WORKER_TRAIN_STEP_ENGINE_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "worker/data/data.h"
#include "worker/train/step_recorder.h"

namespace trainyard {

struct TrainerParts;
struct ModelMemory;

// What a step's device work reports back.
struct StepWork {
  double loss_sum = 0;  // the micro-batches' losses (each its batch's mean), summed
  double grad_norm;     // before clipping; NaN without max_grad_norm, or when the step was skipped
  bool finite = true;   // fp16: false when the gradients overflowed and the step was skipped
};

class StepEngine {
 public:
  // Between the gradients and the optimizer step, with the step's learning
  // rate and whether it is applied (StepGuard::BeforeApply).
  using BeforeApply = std::function<void(double lr, bool finite)>;
  virtual ~StepEngine() = default;
  // One optimizer step over `batches` (one per micro-batch, on the parts'
  // device, gradients synchronized on the last) at learning rate `lr`.
  // Sets `times`' forward, compute (forward and backward) and optimizer
  // durations; a captured step is one graph: forward and compute are its
  // replay, optimizer zero. `mem` (may be null): memory held after the
  // step, before the gradients are released.
  virtual StepWork Run(const std::vector<Batch>& batches, double lr, const BeforeApply& before_apply, StepSample* times,
                       ModelMemory* mem) = 0;
};

// Every kernel from the host, every step.
class EagerStep final : public StepEngine {
 public:
  explicit EagerStep(TrainerParts* parts) : parts_(*parts) {}
  StepWork Run(const std::vector<Batch>& batches, double lr, const BeforeApply& before_apply, StepSample* times,
               ModelMemory* mem) override;

 private:
  TrainerParts& parts_;
};

// The job's engine: the captured step where fused.cuda_graph allows and
// the step can be captured (common/spec/step_capture.h), else EagerStep.
// `note` (rank 0's events) hears, once, when a CUDA job's step is not
// captured under auto, and why. Throws std::invalid_argument when
// fused.cuda_graph on cannot be honoured (the spec's refusal, or a build
// without CUDA).
std::unique_ptr<StepEngine> MakeStepEngine(TrainerParts* parts, const std::function<void(const std::string&)>& note);

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_TRAIN_STEP_ENGINE_H_
