#include "worker/models/optimizer.h"

#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>

#include "worker/models/fused_adamw.h"

namespace trainyard {

std::unique_ptr<torch::optim::Optimizer> MakeOptimizer(const OptimizerSpec& o, std::vector<at::Tensor> params,
                                                       bool fused) {
  switch (o.kind) {
    case OptimizerKind::kSgd:
      return std::make_unique<torch::optim::SGD>(
          params, torch::optim::SGDOptions(o.lr).momentum(o.momentum).weight_decay(o.weight_decay));
    case OptimizerKind::kAdamW: {
      auto options = torch::optim::AdamWOptions(o.lr).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(o.weight_decay);
      if (fused) return std::make_unique<FusedAdamW>(std::move(params), options);
      return std::make_unique<torch::optim::AdamW>(std::move(params), options);
    }
  }
  throw std::invalid_argument("unknown optimizer");
}

double LearningRateFactor(const SchedulerSpec& s, int64_t step, int64_t total_steps) {
  const double w = static_cast<double>(s.warmup_steps);
  const double t = static_cast<double>(step);
  if (t < w) return t / std::max(1.0, w);
  const double rest = std::max(1.0, static_cast<double>(total_steps) - w);
  switch (s.kind) {
    case SchedulerKind::kConstant: return 1.0;
    case SchedulerKind::kLinear: return std::max(0.0, (static_cast<double>(total_steps) - t) / rest);
    case SchedulerKind::kCosine: return std::max(0.0, 0.5 * (1.0 + std::cos(M_PI * (t - w) / rest)));
  }
  return 1.0;
}

void SetLearningRate(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

std::vector<at::Tensor> OptimizerStateTensors(torch::optim::Optimizer& optimizer) {
  std::vector<at::Tensor> out;
  for (const auto& [key, state] : optimizer.state()) {
    if (auto* adam = dynamic_cast<torch::optim::AdamWParamState*>(state.get())) {
      out.push_back(adam->exp_avg());
      out.push_back(adam->exp_avg_sq());
      out.push_back(adam->max_exp_avg_sq());
    } else if (auto* sgd = dynamic_cast<torch::optim::SGDParamState*>(state.get())) {
      out.push_back(sgd->momentum_buffer());
    }
  }
  return out;
}

}  // namespace trainyard
