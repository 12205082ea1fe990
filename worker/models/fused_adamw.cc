#include "worker/models/fused_adamw.h"

#include <ATen/ops/_foreach_add.h>
#include <ATen/ops/_fused_adamw.h>
#include <torch/torch.h>

#include <map>
#include <memory>
#include <tuple>
#include <utility>

namespace trainyard {

// The lists one _fused_adamw_ call takes: parameters of one device and dtype
// of one group.
struct FusedAdamW::Bucket {
  const torch::optim::AdamWOptions* options = nullptr;
  std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps;
};

FusedAdamW::FusedAdamW(std::vector<at::Tensor> params, torch::optim::AdamWOptions options)
    : AdamW(std::move(params), std::move(options)) {}

std::vector<FusedAdamW::Bucket> FusedAdamW::Buckets() {
  std::vector<Bucket> out;
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
      b.options = &o;
      b.params.push_back(p);
      b.grads.push_back(p.grad());
      b.exp_avgs.push_back(state.exp_avg());
      b.exp_avg_sqs.push_back(state.exp_avg_sq());
      if (o.amsgrad()) b.max_exp_avg_sqs.push_back(state.max_exp_avg_sq());
      b.steps.push_back(count.value);
    }
    for (auto& [where, b] : buckets) out.push_back(std::move(b));
  }
  return out;
}

void FusedAdamW::Run(const std::vector<Bucket>& buckets, const at::Tensor* lr) {
  for (const Bucket& b : buckets) {
    const torch::optim::AdamWOptions& o = *b.options;
    const auto [beta1, beta2] = o.betas();
    at::_foreach_add_(b.steps, 1);
    if (lr != nullptr) {
      at::_fused_adamw_(b.params, b.grads, b.exp_avgs, b.exp_avg_sqs, b.max_exp_avg_sqs, b.steps, *lr, beta1, beta2,
                        o.weight_decay(), o.eps(), o.amsgrad(), /*maximize=*/false);
    } else {
      at::_fused_adamw_(b.params, b.grads, b.exp_avgs, b.exp_avg_sqs, b.max_exp_avg_sqs, b.steps, o.lr(), beta1, beta2,
                        o.weight_decay(), o.eps(), o.amsgrad(), /*maximize=*/false);
    }
  }
}

torch::Tensor FusedAdamW::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  at::Tensor loss;
  if (closure) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  Run(Buckets(), nullptr);
  return loss;
}

void FusedAdamW::StepWithLr(const at::Tensor& lr) {
  torch::NoGradGuard no_grad;
  Run(Buckets(), &lr);
}

void FusedAdamW::CountReplayedStep() {
  for (auto& [key, count] : steps_) {
    auto it = state_.find(const_cast<void*>(key));
    if (it == state_.end()) continue;
    auto& state = static_cast<torch::optim::AdamWParamState&>(*it->second);
    state.step(state.step() + 1);
    count.host = state.step();
  }
}

std::vector<const void*> FusedAdamW::Storages() const {
  std::vector<const void*> out;
  auto add = [&](const at::Tensor& t) { out.push_back(t.defined() ? t.storage().unsafeGetStorageImpl() : nullptr); };
  for (const auto& group : param_groups_) {
    for (const at::Tensor& p : group.params()) {
      add(p);
      auto it = state_.find(p.unsafeGetTensorImpl());
      if (it == state_.end()) continue;
      const auto& state = static_cast<const torch::optim::AdamWParamState&>(*it->second);
      add(state.exp_avg());
      add(state.exp_avg_sq());
      auto count = steps_.find(p.unsafeGetTensorImpl());
      if (count != steps_.end()) add(count->second.value);
    }
  }
  return out;
}

}  // namespace trainyard
