#include "worker/train/step_engine.h"

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <stdexcept>

#include "common/spec/step_capture.h"
#include "worker/base/flight_recorder.h"
#include "worker/parallel/parallel_model.h"
#include "worker/train/captured_step.h"
#include "worker/train/trainer_parts.h"

namespace trainyard {

StepWork EagerStep::Run(const std::vector<Batch>& batches, double lr, const BeforeApply& before_apply,
                        StepSample* times, ModelMemory* mem) {
  TrainerParts& s = parts_;
  const int accum = static_cast<int>(batches.size());
  const auto t0 = std::chrono::steady_clock::now();
  StepWork work;
  for (int micro = 0; micro < accum; ++micro) {
    const Batch& batch = batches[static_cast<size_t>(micro)];
    // Gradients are communicated on the last micro-batch only.
    const bool sync = micro + 1 == accum;
    SetPhase(s.flight, "forward", s.step);
    const auto f0 = std::chrono::steady_clock::now();
    const at::Tensor output = s.model->Forward(batch.inputs, sync);
    const at::Tensor loss = s.Loss(output, batch.targets);
    work.loss_sum += loss.item<double>();
    times->forward += std::chrono::steady_clock::now() - f0;
    at::Tensor scaled = accum > 1 ? loss / accum : loss;
    if (s.scaler) scaled = scaled * s.scaler->scale();
    SetPhase(s.flight, "backward", s.step);
    s.model->Backward(scaled, output, sync);
  }
  work.finite = !s.scaler || s.scaler->UnscaleAndCheck(s.model->Gradients(), s.pg);
  work.grad_norm = work.finite ? s.model->ClipGradients(s.spec.max_grad_norm, s.spec.clip_grad_value) : std::nan("");
  const auto t1 = std::chrono::steady_clock::now();
  times->compute = t1 - t0;
  before_apply(lr, work.finite);
  s.Apply(lr, work.finite, mem);
  times->optimizer = std::chrono::steady_clock::now() - t1;
  return work;
}

std::unique_ptr<StepEngine> MakeStepEngine(TrainerParts* parts, const std::function<void(const std::string&)>& note) {
  const JobSpec& spec = parts->spec;
  auto eager = std::make_unique<EagerStep>(parts);
  if (spec.fused.cuda_graph == StepCapture::kOff) return eager;
  const std::string refusal = StepCaptureRefusal(spec);
  if (!refusal.empty()) {
    // ParseJobSpec refuses `on` so; a spec built otherwise is refused here.
    if (spec.fused.cuda_graph == StepCapture::kOn) {
      throw std::invalid_argument("fused.cuda_graph on: the step cannot be captured: " + refusal);
    }
    if (spec.device == Device::kCuda) note("the step is not captured as a CUDA graph: " + refusal);
    return eager;
  }
  return MakeCapturedStep(parts, std::move(eager), note);
}

}  // namespace trainyard
