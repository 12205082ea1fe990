// LossScaler: dynamic loss scaling for fp16 training (the logic of
// torch.cuda.amp.GradScaler): the loss is multiplied by `scale` before
// backward; before the optimizer step the gradients are divided by it and
// checked for inf/NaN on every rank; a step with non-finite gradients is
// skipped and the scale multiplied by `backoff`; after `growth_interval`
// finite steps in a row the scale is multiplied by `growth`. Its state goes
// into checkpoints. Used by the training thread only.
#ifndef TRAINYARD_WORKER_TRAIN_LOSS_SCALER_H_
#define TRAINYARD_WORKER_TRAIN_LOSS_SCALER_H_

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <vector>

#include "worker/checkpoint/checkpoint.h"

namespace trainyard {

struct LossScalerOptions {
  double init_scale = 65536.0;
  double growth = 2.0;
  double backoff = 0.5;
  int64_t growth_interval = 2000;
};

class LossScaler final : public Checkpointable {
 public:
  explicit LossScaler(LossScalerOptions options = {}) : o_(options), scale_(options.init_scale) {}

  double scale() const { return scale_; }
  int64_t skipped_steps() const { return skipped_; }

  // Divides the gradients by the scale in place and reports whether all are
  // finite on every rank (collective over `group` when given). Undefined
  // gradients are skipped.
  bool UnscaleAndCheck(const std::vector<at::Tensor>& grads, const c10::intrusive_ptr<c10d::ProcessGroup>& group);
  // After the step (or its skip): adjusts the scale.
  void Update(bool finite);

  std::map<std::string, at::Tensor> State() const override;
  void LoadState(const std::map<std::string, at::Tensor>& state) override;

 private:
  LossScalerOptions o_;
  double scale_;
  int64_t growth_tracker_ = 0;
  int64_t skipped_ = 0;
};

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_TRAIN_LOSS_SCALER_H_
