#include "worker/train/trainer_parts.h"

namespace trainyard {

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
