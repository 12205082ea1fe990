// The optimizer and learning-rate schedule of a job (torch.optim's SGD and
// AdamW; Hugging Face's warmup-then-constant/linear/cosine schedules).
#ifndef TRAINYARD_WORKER_MODELS_OPTIMIZER_H_
#define TRAINYARD_WORKER_MODELS_OPTIMIZER_H_

#include <torch/optim/optimizer.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "common/job_spec.h"

namespace trainyard {

// The optimizer of `spec` over `params` (under FSDP: the rank's shards);
// `fused` (the job's fused.optimizer): AdamW is FusedAdamW (fused_adamw.h).
std::unique_ptr<torch::optim::Optimizer> MakeOptimizer(const OptimizerSpec& spec, std::vector<at::Tensor> params,
                                                       bool fused = false);

// The learning-rate multiplier at optimizer step `step` (0-based) of
// `total_steps`: linear warmup from 0 over warmup_steps, then constant,
// linear decay to 0 or half a cosine to 0 (Hugging Face's schedules).
double LearningRateFactor(const SchedulerSpec& scheduler, int64_t step, int64_t total_steps);

// Sets every parameter group's learning rate.
void SetLearningRate(torch::optim::Optimizer& optimizer, double lr);

// The optimizer's state tensors (AdamW's moments, SGD's momentum buffer);
// undefined ones included.
std::vector<at::Tensor> OptimizerStateTensors(torch::optim::Optimizer& optimizer);

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_MODELS_OPTIMIZER_H_
