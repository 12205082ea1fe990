// FusedAdamW: AdamW through ATen's _fused_adamw_ — every parameter of a
// device and dtype in one call (torch.optim.AdamW(fused=True)), on the CPU
// and on CUDA. The same update as torch::optim::AdamW (decoupled weight
// decay, bias-corrected moments) and the same state: AdamWParamState per
// parameter (step, exp_avg, exp_avg_sq), so checkpoints and every reader
// of AdamW's state see no difference. The kernel takes each parameter's
// step as a float tensor on its device; those are kept beside the state,
// counted on the device, and set again from the state's step whenever the
// state was replaced (a checkpoint loaded), without reading the device.
#ifndef TRAINYARD_WORKER_MODELS_FUSED_ADAMW_H_
#define TRAINYARD_WORKER_MODELS_FUSED_ADAMW_H_

#include <torch/optim/adamw.h>

#include <cstdint>
#include <unordered_map>
#include <vector>

namespace trainyard {

class FusedAdamW final : public torch::optim::AdamW {
 public:
  FusedAdamW(std::vector<at::Tensor> params, torch::optim::AdamWOptions options);
  torch::Tensor step(LossClosure closure = nullptr) override;
  // One step at the learning rate held by `lr` (a float scalar tensor on
  // the parameters' device) instead of the groups' lr: nothing is read on
  // the host, so a CUDA graph can capture it and each replay reads the
  // value `lr` holds then.
  void StepWithLr(const at::Tensor& lr);
  // After each replay of a captured StepWithLr: the states' steps (what
  // checkpoints save) advance as the device counters did.
  void CountReplayedStep();
  // The storages of every parameter and state tensor: a captured step
  // replays onto these only (a loaded checkpoint replaces the state).
  std::vector<const void*> Storages() const;

 private:
  struct Bucket;
  // The step's lists per device and dtype, the states made and counted.
  std::vector<Bucket> Buckets();
  void Run(const std::vector<Bucket>& buckets, const at::Tensor* lr);

  struct StepTensor {
    at::Tensor value;   // float32 scalar on the parameter's device
    int64_t host = -1;  // the state's step when `value` was last set or counted
  };
  std::unordered_map<const void*, StepTensor> steps_;
};

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_MODELS_FUSED_ADAMW_H_
