#include "worker/train/loss_scaler.h"

#include <torch/torch.h>

namespace trainyard {

bool LossScaler::UnscaleAndCheck(const std::vector<at::Tensor>& grads,
                                 const c10::intrusive_ptr<c10d::ProcessGroup>& group) {
  torch::NoGradGuard no_grad;
  const double inv = 1.0 / scale_;
  bool finite = true;
  for (const at::Tensor& g : grads) {
    if (!g.defined()) continue;
    g.mul_(inv);
    if (finite && !at::isfinite(g).all().item<bool>()) finite = false;
  }
  if (group) {
    at::Tensor flag = at::full({1}, finite ? 0 : 1, at::kLong);
    std::vector<at::Tensor> t = {flag};
    c10d::AllreduceOptions opts;
    opts.reduceOp = c10d::ReduceOp::MAX;
    group->allreduce(t, opts)->wait();
    finite = flag.item<int64_t>() == 0;
  }
  return finite;
}

void LossScaler::Update(bool finite) {
  if (!finite) {
    scale_ *= o_.backoff;
    growth_tracker_ = 0;
    ++skipped_;
    return;
  }
  if (++growth_tracker_ >= o_.growth_interval) {
    scale_ *= o_.growth;
    growth_tracker_ = 0;
  }
}

std::map<std::string, at::Tensor> LossScaler::State() const {
  return {{"scale", at::full({1}, scale_, at::kDouble)},
          {"growth_tracker", at::full({1}, growth_tracker_, at::kLong)},
          {"skipped", at::full({1}, skipped_, at::kLong)}};
}

void LossScaler::LoadState(const std::map<std::string, at::Tensor>& state) {
  scale_ = state.at("scale").item<double>();
  growth_tracker_ = state.at("growth_tracker").item<int64_t>();
  skipped_ = state.at("skipped").item<int64_t>();
}

}  // namespace trainyard
