#include "worker/parallel/fsdp.h"

#include <c10/core/DeviceGuard.h>
#include <c10/core/StorageImpl.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <map>
#include <set>
#include <stdexcept>

namespace trainyard {
namespace {

struct Unit {
  FsdpUnitInfo info;
  bool reshard_after_forward = false;
  std::vector<at::Tensor> params;  // the modules' parameters: views of `full` while gathered
  std::vector<int64_t> offsets;
  int64_t padded = 0;
  at::Tensor shard;      // leaf, requires grad: the optimizer's parameter
  at::Tensor full;       // [padded]; storage freed while resharded (unless unsharded group)
  at::Tensor flat_grad;  // [padded] during backward
  bool gathered = false;
  c10::intrusive_ptr<c10d::Work> gathering;  // a prefetch in flight
  at::Tensor gather_target, gather_source;   // kept alive while it is
  int pending = 0;                           // parameters whose gradients have not arrived
  // Held here: a variable keeps its gradient accumulator only weakly.
  std::vector<decltype(torch::autograd::impl::grad_accumulator(std::declval<const at::Tensor&>()))> accumulators;
};

size_t Bytes(const Unit& u) { return static_cast<size_t>(u.padded) * u.full.element_size(); }

// Frees (0) or re-allocates a gathered buffer's storage in place, on any
// device (what Python FSDP's untyped_storage().resize_() does): the views of
// it stay attached. The old contents are not kept — every caller overwrites
// the buffer (all-gather or copy) before reading it. A CUDA block goes back
// to the caching allocator, which orders its reuse on the stream; NCCL
// records its own streams on the tensors it uses.
void ResizeStorage(const at::Tensor& t, size_t bytes) {
  c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
  if (storage->nbytes() == bytes) return;
  if (bytes == 0) {
    storage->set_data_ptr_noswap(at::DataPtr(nullptr, t.device()));
  } else {
    c10::DeviceGuard guard(t.device());
    storage->set_data_ptr_noswap(storage->allocator()->allocate(bytes));
  }
  storage->set_nbytes(bytes);
}

}  // namespace

struct FullyShardedModel::Impl {
  std::shared_ptr<Model> model;
  FsdpOptions options;
  Collectives* shard_group = nullptr;
  Collectives* replicate_group = nullptr;
  int32_t world_size = 1;
  int32_t shard_size = 1;
  int32_t shard_rank = 0;
  std::vector<Layer> layers;
  std::vector<std::unique_ptr<Unit>> units;  // units[0] is the root
  std::vector<int> unit_of_layer;            // 0: root's
  std::vector<int> forward_order;            // wrapped units in forward order
  std::vector<FsdpUnitInfo> infos;
  FullyShardedModel::CommCounters counters;

  template <typename F>
  void Timed(F&& f) {
    const auto start = std::chrono::steady_clock::now();
    f();
    counters.nanos +=
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
  }

  // Starts the unit's all-gather without waiting (prefetch).
  void StartUnshard(Unit& u) {
    if (u.gathered || u.gathering || shard_size == 1) return;
    ResizeStorage(u.full, Bytes(u));
    u.gather_target = u.full.variable_data();
    u.gather_source = u.shard.detach().to(options.compute_device, options.param_dtype);
    u.gathering = shard_group->AllGatherIntoAsync(u.gather_target, u.gather_source);
    counters.allgather_bytes += static_cast<int64_t>(Bytes(u));
    ++counters.allgathers;
    ++counters.prefetches;
  }

  void Unshard(Unit& u) {
    if (u.gathered) return;
    if (u.gathering) {
      Timed([&] { u.gathering->wait(); });
      u.gathering.reset();
      u.gather_target = at::Tensor();
      u.gather_source = at::Tensor();
      u.gathered = true;
      return;
    }
    if (shard_size == 1 && !Static()) {
      ResizeStorage(u.full, Bytes(u));
      u.full.variable_data().copy_(u.shard.detach().to(options.compute_device, options.param_dtype));
    } else if (shard_size > 1) {
      ResizeStorage(u.full, Bytes(u));
      at::Tensor target = u.full.variable_data();
      // offload: CPU -> device; mixed precision: fp32 shard -> param dtype
      at::Tensor source = u.shard.detach().to(options.compute_device, options.param_dtype);
      Timed([&] { shard_group->AllGatherInto(target, source); });
      counters.allgather_bytes += static_cast<int64_t>(Bytes(u));
      ++counters.allgathers;
    }
    u.gathered = true;
  }

  // An unsharded unit whose shard is its buffer never moves; with offload
  // the buffer is a device copy that must be refreshed from the shard.
  bool Static() const { return shard_size == 1 && !options.offload_params && options.param_dtype == at::kFloat; }

  void Reshard(Unit& u) {
    if (!u.gathered || Static()) return;
    ResizeStorage(u.full, 0);
    u.gathered = false;
  }

  // The wrapped unit that runs after (+1) or before (-1) `u` in forward.
  Unit* Neighbour(const Unit& u, int direction) {
    for (size_t i = 0; i < forward_order.size(); ++i) {
      if (units[forward_order[i]].get() != &u) continue;
      const long j = static_cast<long>(i) + direction;
      if (j < 0 || j >= static_cast<long>(forward_order.size())) return nullptr;
      return units[forward_order[j]].get();
    }
    return nullptr;
  }

  // Before the unit's backward: parameters gathered, gradients accumulate
  // into one flat buffer through views.
  void PreBackward(Unit& u) {
    Unshard(u);
    if (options.backward_prefetch == BackwardPrefetch::kBackwardPre) {
      if (Unit* next = Neighbour(u, -1)) StartUnshard(*next);
    }
    if (u.flat_grad.defined()) return;
    u.flat_grad = at::zeros({u.padded}, u.full.options());
    u.pending = 0;
    for (size_t i = 0; i < u.params.size(); ++i) {
      at::Tensor& p = u.params[i];
      if (!p.requires_grad()) continue;
      p.mutable_grad() = u.flat_grad.narrow(0, u.offsets[i], p.numel()).view(p.sizes());
      ++u.pending;
    }
  }

  // After the unit's backward: reduce the gradient into the shard's.
  void PostBackward(Unit& u) {
    if (!u.flat_grad.defined()) return;
    at::Tensor grad;
    if (shard_size > 1) {
      grad = at::empty({u.info.shard_numel}, u.flat_grad.options());
      Timed([&] { shard_group->ReduceScatterSum(grad, u.flat_grad); });
      counters.reduce_scatter_bytes += static_cast<int64_t>(u.flat_grad.nbytes());
    } else {
      grad = u.flat_grad;
    }
    if (replicate_group != nullptr && replicate_group->size() > 1) {
      Timed([&] { replicate_group->AllreduceSum(grad); });
      counters.reduce_scatter_bytes += static_cast<int64_t>(grad.nbytes());
    }
    grad.div_(world_size);
    if (grad.scalar_type() != at::kFloat) grad = grad.to(at::kFloat);  // reduced in low precision, kept in fp32
    if (options.backward_prefetch == BackwardPrefetch::kBackwardPost) {
      if (Unit* next = Neighbour(u, -1)) {
        if (next->flat_grad.defined() || !next->gathered) StartUnshard(*next);
      }
    }
    if (options.offload_params) grad = grad.to(at::kCPU);  // the shard's gradient lives with the shard
    for (at::Tensor& p : u.params) p.mutable_grad() = at::Tensor();
    u.flat_grad = at::Tensor();
    at::Tensor& g = u.shard.mutable_grad();
    if (g.defined()) {
      g.add_(grad);
    } else {
      g = Static() ? grad.clone() : grad;  // a static unit's flat grad aliases the params' grads
    }
    Reshard(u);
  }

  void OnGradReady(Unit& u) {
    if (--u.pending == 0) PostBackward(u);
  }
};

namespace {

// Runs `on_ready` after a parameter's gradient has been accumulated.
class AccumulatePostHook final : public torch::autograd::FunctionPostHook {
 public:
  explicit AccumulatePostHook(std::function<void()> on_ready) : on_ready_(std::move(on_ready)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    on_ready_();
    return outputs;
  }

 private:
  std::function<void()> on_ready_;
};

}  // namespace

FullyShardedModel::FullyShardedModel(std::shared_ptr<Model> model, FsdpOptions options, Collectives* shard_group,
                                     Collectives* replicate_group, int32_t world_size)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.model = std::move(model);
  s.options = std::move(options);
  s.shard_group = shard_group;
  s.replicate_group = replicate_group;
  s.world_size = world_size;
  s.shard_size = shard_group != nullptr ? shard_group->size() : 1;
  s.shard_rank = shard_group != nullptr ? shard_group->rank() : 0;
  s.layers = s.model->stages();
  const bool reshard = s.shard_size > 1 && (s.options.strategy == ShardingStrategy::kFullShard ||
                                            s.options.strategy == ShardingStrategy::kHybridShard);

  // Which layers use which parameters; a parameter used by several layers
  // belongs to the root, which stays gathered through forward and backward.
  std::map<c10::TensorImpl*, std::set<size_t>> users;
  for (size_t l = 0; l < s.layers.size(); ++l) {
    for (const at::Tensor& p : s.layers[l].module->parameters()) users[p.unsafeGetTensorImpl()].insert(l);
  }
  // Group layers into units by the wrap policy.
  std::vector<std::vector<size_t>> groups;
  if (s.options.wrap_policy == WrapPolicy::kSizeBased) {
    std::vector<size_t> current;
    int64_t count = 0;
    for (size_t l = 0; l < s.layers.size(); ++l) {
      current.push_back(l);
      for (const at::Tensor& p : s.layers[l].module->parameters()) count += p.numel();
      if (count >= s.options.min_num_params) {
        groups.push_back(current);
        current.clear();
        count = 0;
      }
    }
    // The tail that never reached the size stays with the root.
  } else if (s.options.wrap_policy == WrapPolicy::kTransformerBased) {
    std::set<std::string> types(s.options.layer_types.begin(), s.options.layer_types.end());
    for (size_t l = 0; l < s.layers.size(); ++l) {
      if (types.count(s.layers[l].type)) groups.push_back({l});
    }
  }
  s.units.push_back(std::make_unique<Unit>());  // root
  s.unit_of_layer.assign(s.layers.size(), 0);
  std::set<c10::TensorImpl*> owned;
  for (const auto& group : groups) {
    auto u = std::make_unique<Unit>();
    u->info.layers = group;
    for (size_t l : group) {
      for (const at::Tensor& p : s.layers[l].module->parameters()) {
        auto* impl = p.unsafeGetTensorImpl();
        bool only_here = true;
        for (size_t user : users[impl]) only_here &= std::find(group.begin(), group.end(), user) != group.end();
        if (only_here && owned.insert(impl).second) u->params.push_back(p);
      }
    }
    if (u->params.empty()) continue;
    for (size_t l : group) s.unit_of_layer[l] = static_cast<int>(s.units.size());
    s.forward_order.push_back(static_cast<int>(s.units.size()));
    u->reshard_after_forward = reshard;
    s.units.push_back(std::move(u));
  }
  for (const at::Tensor& p : s.model->parameters()) {
    if (owned.insert(p.unsafeGetTensorImpl()).second) s.units[0]->params.push_back(p);
  }
  std::map<c10::TensorImpl*, size_t> model_index;
  for (const at::Tensor& p : s.model->parameters()) model_index.emplace(p.unsafeGetTensorImpl(), model_index.size());

  // Flatten, pad, synchronize, shard.
  for (auto& up : s.units) {
    Unit& u = *up;
    int64_t total = 0;
    for (const at::Tensor& p : u.params) {
      u.offsets.push_back(total);
      u.info.params.push_back(model_index.at(p.unsafeGetTensorImpl()));
      total += p.numel();
    }
    u.info.offsets = u.offsets;
    u.info.num_params = total;
    u.padded = std::max<int64_t>(1, (total + s.shard_size - 1) / s.shard_size) * s.shard_size;
    u.info.shard_numel = u.padded / s.shard_size;
    const auto options = (u.params.empty() ? at::TensorOptions(at::kFloat) : u.params[0].options())
                             .requires_grad(false)
                             .device(s.options.compute_device);
    u.full = at::zeros({u.padded}, options);  // fp32 while sharding; param dtype below
    {
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < u.params.size(); ++i) {
        u.full.narrow(0, u.offsets[i], u.params[i].numel()).copy_(u.params[i].reshape({-1}));
      }
      if (s.options.sync_module_states) {
        if (s.replicate_group != nullptr && s.replicate_group->size() > 1) s.replicate_group->Broadcast(u.full, 0);
        if (s.shard_size > 1) s.shard_group->Broadcast(u.full, 0);
      }
    }
    if (s.options.offload_params) {
      u.shard = u.full.narrow(0, s.shard_rank * u.info.shard_numel, u.info.shard_numel).to(at::kCPU, false, true);
    } else if (s.shard_size > 1 || s.options.param_dtype != at::kFloat) {
      u.shard = u.full.narrow(0, s.shard_rank * u.info.shard_numel, u.info.shard_numel).clone();
    } else {
      u.shard = u.full.detach();  // unsharded: the flat buffer itself
    }
    u.shard.requires_grad_(true);
    if (s.options.param_dtype != at::kFloat) u.full = u.full.to(s.options.param_dtype);
    for (size_t i = 0; i < u.params.size(); ++i) {
      at::Tensor& p = u.params[i];
      p.set_data(u.full.narrow(0, u.offsets[i], p.numel()).view(p.sizes()));
      if (!p.requires_grad()) continue;
      auto acc = torch::autograd::impl::grad_accumulator(p);
      Impl* impl = &s;
      Unit* unit = &u;
      acc->add_post_hook(std::make_unique<AccumulatePostHook>([impl, unit] { impl->OnGradReady(*unit); }));
      u.accumulators.push_back(acc);
    }
    u.gathered = true;
    s.Reshard(u);
    s.infos.push_back(u.info);
  }
}

FullyShardedModel::~FullyShardedModel() = default;

at::Tensor FullyShardedModel::Forward(const at::Tensor& input) {
  Impl& s = *impl_;
  s.Unshard(*s.units[0]);
  at::Tensor x = input;
  if (s.options.param_dtype != at::kFloat && x.is_floating_point()) x = x.to(s.options.param_dtype);
  for (size_t l = 0; l < s.layers.size(); ++l) {
    Unit& u = *s.units[s.unit_of_layer[l]];
    const bool first_of_unit = l == 0 || s.unit_of_layer[l - 1] != s.unit_of_layer[l];
    s.Unshard(u);
    if (first_of_unit && s.options.forward_prefetch && s.unit_of_layer[l] != 0) {
      if (Unit* next = s.Neighbour(u, +1)) s.StartUnshard(*next);
    }
    x = s.layers[l].forward(x);
    const bool last_of_unit = l + 1 == s.layers.size() || s.unit_of_layer[l + 1] != s.unit_of_layer[l];
    if (s.unit_of_layer[l] == 0 || !last_of_unit || !x.requires_grad()) continue;
    // Before this unit's backward: gather again (FULL_SHARD) and set up
    // its flat gradient.
    Impl* impl = &s;
    Unit* unit = &u;
    x.register_hook([impl, unit](const at::Tensor& grad) {
      impl->PreBackward(*unit);
      return grad;
    });
    if (u.reshard_after_forward) s.Reshard(u);
  }
  return x;
}

void FullyShardedModel::PrepareBackward() { impl_->PreBackward(*impl_->units[0]); }

void FullyShardedModel::FinishBackward() {
  Impl& s = *impl_;
  for (auto it = s.units.rbegin(); it != s.units.rend(); ++it) s.PostBackward(**it);
  // A prefetch nobody waited for would hold parameters from before the
  // optimizer step: finish it and free the buffer.
  for (auto& u : s.units) {
    if (u->gathering) s.Unshard(*u);
  }
  for (auto& u : s.units) s.Reshard(*u);
}

double FullyShardedModel::ClipGradNorm(double max_norm) {
  Impl& s = *impl_;
  torch::NoGradGuard no_grad;
  // Summed where the shards live (the device, or the host under offload),
  // then reduced there: NCCL takes device tensors, Gloo any.
  at::Tensor sq = at::zeros({1}, at::TensorOptions(at::kDouble).device(s.units.front()->shard.device()));
  for (auto& u : s.units) {
    const at::Tensor& g = u->shard.grad();
    if (g.defined()) sq += g.to(at::kDouble).pow(2).sum();
  }
  if (s.shard_size > 1) {
    // NCCL cannot reduce host tensors: offloaded shards' sum travels on the compute device.
    at::Tensor wire = sq.to(s.options.compute_device);
    s.shard_group->AllreduceSum(wire);
    sq = wire;
  }
  const double norm = std::sqrt(sq.item<double>());
  const double coef = max_norm / (norm + 1e-6);  // torch.nn.utils.clip_grad_norm_'s formula
  if (coef < 1.0) {
    for (auto& u : s.units) {
      at::Tensor& g = u->shard.mutable_grad();
      if (g.defined()) g.mul_(coef);
    }
  }
  return norm;
}

std::vector<at::Tensor> FullyShardedModel::ShardParameters() const {
  std::vector<at::Tensor> out;
  for (const auto& u : impl_->units) out.push_back(u->shard);
  return out;
}

std::vector<at::Tensor> FullyShardedModel::FullParameters() {
  Impl& s = *impl_;
  torch::NoGradGuard no_grad;
  // Gathered from the fp32 shards (not the possibly low-precision buffers).
  std::map<c10::TensorImpl*, at::Tensor> gathered;
  for (auto& u : s.units) {
    at::Tensor shard = u->shard.detach().to(at::kCPU);
    at::Tensor flat = shard;
    if (s.shard_size > 1) {
      flat = at::empty({u->padded}, shard.options());
      s.shard_group->AllGatherInto(flat, shard);
    }
    for (size_t i = 0; i < u->params.size(); ++i) {
      const at::Tensor& p = u->params[i];
      gathered[p.unsafeGetTensorImpl()] = flat.narrow(0, u->offsets[i], p.numel()).view(p.sizes()).clone();
    }
  }
  std::vector<at::Tensor> out;
  for (const at::Tensor& p : s.model->parameters()) out.push_back(gathered.at(p.unsafeGetTensorImpl()));
  return out;
}

const std::vector<FsdpUnitInfo>& FullyShardedModel::units() const { return impl_->infos; }
int32_t FullyShardedModel::shard_rank() const { return impl_->shard_rank; }
int32_t FullyShardedModel::shard_size() const { return impl_->shard_size; }
Collectives* FullyShardedModel::replicate_group() const { return impl_->replicate_group; }

void FullyShardedModel::Rebind(Collectives* shard_group, Collectives* replicate_group, int32_t world_size) {
  Impl& s = *impl_;
  if (shard_group != nullptr && (shard_group->size() != s.shard_size || shard_group->rank() != s.shard_rank)) {
    throw std::logic_error("FSDP rebind: shard " + std::to_string(shard_group->rank()) + " of " +
                           std::to_string(shard_group->size()) + ", but this rank holds shard " +
                           std::to_string(s.shard_rank) + " of " + std::to_string(s.shard_size));
  }
  if (shard_group == nullptr && s.shard_size > 1 && replicate_group != nullptr) {
    throw std::logic_error("FSDP rebind: a sharded model needs its shard group");
  }
  // A step a broken group interrupted may have left units gathered, a
  // prefetch in flight, or gradients half reduced: each rank would then
  // skip or issue different collectives in the next step. The shards and
  // their gradients (complete once FinishBackward returned) stay.
  for (auto& up : s.units) {
    Unit& u = *up;
    u.gathering.reset();
    u.gather_target = at::Tensor();
    u.gather_source = at::Tensor();
    for (at::Tensor& p : u.params) {
      if (p.requires_grad()) p.mutable_grad() = at::Tensor();
    }
    u.flat_grad = at::Tensor();
    u.pending = 0;
    s.Reshard(u);
  }
  s.shard_group = shard_group;
  s.replicate_group = replicate_group;
  s.world_size = std::max(1, world_size);
}

int32_t FullyShardedModel::replica_rank() const {
  return impl_->replicate_group != nullptr ? impl_->replicate_group->rank() : 0;
}
Collectives* FullyShardedModel::shard_group() const { return impl_->shard_group; }
const FullyShardedModel::CommCounters& FullyShardedModel::comm() const { return impl_->counters; }
Model& FullyShardedModel::model() { return *impl_->model; }

}  // namespace trainyard
