#include "worker/train/trainer_parts.h"

#include <torch/torch.h>

#include "worker/models/chunked_loss.h"
#include "worker/models/model.h"

namespace trainyard {

at::Tensor TrainerParts::Loss(const at::Tensor& output, const at::Tensor& targets) const {
  // Hidden states [B, T, H] of a model that left its output projection to
  // the loss: the chunked loss applies it.
  Model& m = model->model();
  if (m.projection_left_to_loss()) {
    return model->UnderAutocast([&] {
      return ChunkedCrossEntropy(output.reshape({-1, output.size(-1)}), m.output_projection(), targets.reshape({-1}));
    });
  }
  const at::Tensor out = output.to(at::kFloat);
  if (spec.loss == LossKind::kMse) {
    // Regression on the class: the one-hot vector of the target.
    at::Tensor want =
        targets.dim() == out.dim() ? targets.to(at::kFloat) : torch::one_hot(targets, out.size(-1)).to(at::kFloat);
    return torch::mse_loss(out, want);
  }
  // [B, C] logits with [B] targets, or [B, T, V] with [B, T] (language models).
  return torch::nn::functional::cross_entropy(out.reshape({-1, out.size(-1)}), targets.reshape({-1}));
}

void TrainerParts::Apply(double lr, bool finite, ModelMemory* mem) {
  model->OptimizerStep(lr, finite);
  if (scaler) scaler->Update(finite);
  // Steady state: after the step, before gradients are released.
  if (mem != nullptr && sink != nullptr) *mem = model->Memory();
  model->ReleaseGradients();
}

void TrainerParts::Rebind(const DistContext& dist, int32_t rank_in, int32_t world) {
  rank = rank_in;
  world_size = world;
  pg = dist.process_group;
  model->Rebind(dist);
  // The control word rides the group's shared memory when it has it.
  control = std::make_unique<StepControl>(dist.control_group ? dist.control_group : pg, dist.shm, requests);
  checkpoints->Rebind(rank, pg);
  recorder = std::make_unique<StepRecorder>(rank, device, model->ddp(), model->fsdp());
}

void TrainerParts::Unbind() {
  model->Rebind(DistContext{});
  recorder = std::make_unique<StepRecorder>(rank, device, nullptr, nullptr);
  checkpoints->Rebind(rank, nullptr);
  control.reset();
  pg.reset();
}

TrainingState TrainerParts::State() const {
  TrainingState st;
  st.spec = &spec;
  st.rank = rank;
  st.world_size = world_size;
  st.process_group = pg;
  st.checkpoint_group = checkpoint_group;
  st.model = &model->model();
  st.fsdp = model->fsdp();
  st.ddp = model->ddp();
  st.optimizer = &model->optimizer();
  st.loader = data.train.get();
  st.step = step;
  return st;
}

}  // namespace trainyard
