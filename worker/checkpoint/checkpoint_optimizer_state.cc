// Optimizer state as checkpoints see it: the per-parameter state tensors of
// torch.optim's SGD and AdamW, found by the optimizer's key for a parameter.
#include <torch/torch.h>

#include <sstream>
#include <type_traits>

#include "worker/checkpoint/checkpoint_internal.h"

namespace trainyard {
namespace {

// The optimizer's key for a parameter's state: its TensorImpl's address,
// held as a pointer (LibTorch 2.x) or as that pointer printed (older).
template <typename Optimizer = torch::optim::Optimizer>
auto StateKey(const at::Tensor& p) {
  using Key = typename std::decay_t<decltype(std::declval<Optimizer&>().state())>::key_type;
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream key;
    key << p.unsafeGetTensorImpl();
    return key.str();
  } else {
    return static_cast<Key>(p.unsafeGetTensorImpl());
  }
}

torch::optim::OptimizerParamState* StateOf(torch::optim::Optimizer& o, const at::Tensor& p) {
  return OptimizerStateOf(o, p);
}

}  // namespace

torch::optim::OptimizerParamState* OptimizerStateOf(torch::optim::Optimizer& optimizer, const at::Tensor& param) {
  auto it = optimizer.state().find(StateKey(param));
  return it == optimizer.state().end() ? nullptr : it->second.get();
}

namespace checkpoint_internal {

// The per-parameter state tensors the job's optimizer keeps.
std::vector<std::string> OptimizerFields(const JobSpec& spec) {
  switch (spec.optimizer.kind) {
    case OptimizerKind::kAdamW: return {"exp_avg", "exp_avg_sq"};
    case OptimizerKind::kSgd:
      return spec.optimizer.momentum > 0 ? std::vector<std::string>{"momentum_buffer"} : std::vector<std::string>{};
  }
  return {};
}

at::Tensor FieldOf(torch::optim::Optimizer& o, const at::Tensor& p, const std::string& field) {
  auto* st = StateOf(o, p);
  if (auto* a = dynamic_cast<torch::optim::AdamWParamState*>(st)) {
    if (field == "exp_avg") return a->exp_avg();
    if (field == "exp_avg_sq") return a->exp_avg_sq();
  } else if (auto* g = dynamic_cast<torch::optim::SGDParamState*>(st)) {
    if (field == "momentum_buffer") return g->momentum_buffer();
  }
  return at::Tensor();
}

int64_t StepOf(torch::optim::Optimizer& o, const at::Tensor& p) {
  if (auto* a = dynamic_cast<torch::optim::AdamWParamState*>(StateOf(o, p))) return a->step();
  return 0;
}

bool HasState(torch::optim::Optimizer& o, const std::vector<at::Tensor>& holders) {
  for (const at::Tensor& h : holders) {
    if (StateOf(o, h) != nullptr) return true;
  }
  return false;
}

// Gives `p` zero state (kept when present) with the given step.
void EnsureState(torch::optim::Optimizer& o, OptimizerKind kind, const at::Tensor& p, int64_t step) {
  const auto key = StateKey(p);
  auto zeros = [&] { return at::zeros_like(p.detach(), at::MemoryFormat::Preserve); };
  if (kind == OptimizerKind::kAdamW) {
    auto* a = dynamic_cast<torch::optim::AdamWParamState*>(StateOf(o, p));
    if (a == nullptr) {
      auto st = std::make_unique<torch::optim::AdamWParamState>();
      st->exp_avg(zeros());
      st->exp_avg_sq(zeros());
      a = st.get();
      o.state()[key] = std::move(st);
    }
    a->step(step);
  } else if (StateOf(o, p) == nullptr) {
    auto st = std::make_unique<torch::optim::SGDParamState>();
    st->momentum_buffer(zeros());
    o.state()[key] = std::move(st);
  }
}

}  // namespace checkpoint_internal
}  // namespace trainyard
