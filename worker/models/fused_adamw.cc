#include "worker/models/fused_adamw.h"

#include <ATen/ops/_foreach_add.h>
#include <ATen/ops/_fused_adamw.h>
#include <torch/torch.h>

#include <map>
#include <memory>
#include <tuple>
#include <utility>

namespace trainyard {
namespace {

// The lists one _fused_adamw_ call takes: parameters of one device and dtype.
struct Bucket {
  std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps;
};

}  // namespace

FusedAdamW::FusedAdamW(std::vector<at::Tensor> params, torch::optim::AdamWOptions options)
    : AdamW(std::move(params), std::move(options)) {}

torch::Tensor FusedAdamW::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  at::Tensor loss;
  if (closure) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  for (auto& group : param_groups_) {
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
    std::map<std::tuple<c10::DeviceType, int, at::ScalarType>, Bucket> buckets;
    for (const at::Tensor& p : group.params()) {
      if (!p.grad().defined()) continue;
      TORCH_CHECK(!p.grad().is_sparse(), "AdamW does not take sparse gradients");
      void* key = p.unsafeGetTensorImpl();
      auto it = state_.find(key);
      if (it == state_.end()) {
        auto fresh = std::make_unique<torch::optim::AdamWParamState>();
        fresh->exp_avg(torch::zeros_like(p, at::MemoryFormat::Preserve));
        fresh->exp_avg_sq(torch::zeros_like(p, at::MemoryFormat::Preserve));
        if (o.amsgrad()) fresh->max_exp_avg_sq(torch::zeros_like(p, at::MemoryFormat::Preserve));
        it = state_.emplace(key, std::move(fresh)).first;
      }
      auto& state = static_cast<torch::optim::AdamWParamState&>(*it->second);
      StepTensor& count = steps_[key];
      if (!count.value.defined() || count.host != state.step() || count.value.device() != p.device()) {
        count.value = at::full({}, static_cast<double>(state.step()), p.options().dtype(at::kFloat));
      }
      state.step(state.step() + 1);
      count.host = state.step();
      Bucket& b = buckets[{p.device().type(), p.device().index(), p.scalar_type()}];
      b.params.push_back(p);
      b.grads.push_back(p.grad());
      b.exp_avgs.push_back(state.exp_avg());
      b.exp_avg_sqs.push_back(state.exp_avg_sq());
      if (o.amsgrad()) b.max_exp_avg_sqs.push_back(state.max_exp_avg_sq());
      b.steps.push_back(count.value);
    }
    const auto [beta1, beta2] = o.betas();
    for (auto& [where, b] : buckets) {
      at::_foreach_add_(b.steps, 1);
      at::_fused_adamw_(b.params, b.grads, b.exp_avgs, b.exp_avg_sqs, b.max_exp_avg_sqs, b.steps, o.lr(), beta1, beta2,
                        o.weight_decay(), o.eps(), o.amsgrad(), /*maximize=*/false);
    }
  }
  return loss;
}

}  // namespace trainyard
