#include "worker/trainer.h"

#include <torch/torch.h>

#include <chrono>
#include <set>

#include "worker/data.h"
#include "worker/ddp.h"
#include "worker/fsdp.h"
#include "worker/models.h"

namespace trainyard {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

int64_t NowMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::unique_ptr<torch::optim::Optimizer> MakeOptimizer(const OptimizerSpec& o, std::vector<at::Tensor> params) {
  switch (o.kind) {
    case OptimizerKind::kSgd:
      return std::make_unique<torch::optim::SGD>(
          params, torch::optim::SGDOptions(o.lr).momentum(o.momentum).weight_decay(o.weight_decay));
    case OptimizerKind::kAdamW:
      return std::make_unique<torch::optim::AdamW>(
          params, torch::optim::AdamWOptions(o.lr).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(o.weight_decay));
  }
  throw std::invalid_argument("unknown optimizer");
}

// Control word exchanged by all ranks every step (allreduce MAX), so that a
// request seen by one rank takes effect on every rank after the same step.
enum ControlSlot : int64_t { kStopSlot = 0, kControlSlots = 1 };

}  // namespace

struct Trainer::Impl {
  JobSpec spec;
  int32_t rank;
  int32_t world_size;
  c10::intrusive_ptr<c10d::ProcessGroup> pg;
  MetricsSink* sink;
  const std::atomic<bool>* stop_requested;

  std::shared_ptr<Model> model;
  std::unique_ptr<DistributedDataParallel> ddp;
  std::unique_ptr<FullyShardedModel> fsdp;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  std::unique_ptr<DataLoader> loader;
  int64_t step = 0;
  bool stop_agreed = false;
  int64_t last_wire = 0, last_fp32 = 0, last_hook_nanos = 0;  // CommStats at the previous step
  int64_t last_allgather = 0, last_reduce_scatter = 0, last_sharded_nanos = 0;  // FSDP counters, likewise  // set by the step whose control exchange carried a stop

  // Started at the beginning of a step, waited for at its end.
  at::Tensor control;
  c10::intrusive_ptr<c10d::Work> control_work;

  void StartControl() {
    if (!pg) return;
    control = at::zeros({kControlSlots}, at::kLong);
    control[kStopSlot] = (stop_requested != nullptr && stop_requested->load()) ? 1 : 0;
    std::vector<at::Tensor> t = {control};
    c10d::AllreduceOptions opts;
    opts.reduceOp = c10d::ReduceOp::MAX;
    control_work = pg->allreduce(t, opts);
  }

  // Returns true when some rank asked to stop.
  bool FinishControl() {
    if (!pg) return stop_requested != nullptr && stop_requested->load();
    control_work->wait();
    control_work.reset();
    return control[kStopSlot].item<int64_t>() != 0;
  }
};

Trainer::Trainer(JobSpec spec, int32_t rank, int32_t world_size, DistContext dist, MetricsSink* sink,
                 const std::atomic<bool>* stop_requested)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.spec = std::move(spec);
  s.rank = rank;
  s.world_size = world_size;
  s.pg = std::move(dist.process_group);
  s.sink = sink;
  s.stop_requested = stop_requested;
  if (world_size > 1 && !s.pg) throw std::invalid_argument("a process group is required when world_size > 1");

  s.model = BuildModel(s.spec.model, s.spec.seed);
  if (s.pg && s.spec.distributed_type == DistributedType::kDdp) {
    s.ddp = std::make_unique<DistributedDataParallel>(s.model->parameters(), s.model->buffers(), s.pg, s.spec.ddp,
                                                      dist.shm);
  }
  if (s.spec.distributed_type == DistributedType::kFsdp) {
    FsdpOptions fo;
    fo.strategy = s.spec.fsdp.sharding_strategy;
    fo.wrap_policy = s.spec.fsdp.auto_wrap_policy;
    fo.min_num_params = s.spec.fsdp.min_num_params;
    fo.layer_types = s.spec.fsdp.transformer_layer_cls_to_wrap;
    fo.sync_module_states = s.spec.fsdp.sync_module_states;
    fo.offload_params = s.spec.fsdp.offload_params;
    fo.forward_prefetch = s.spec.fsdp.forward_prefetch;
    fo.param_dtype = s.spec.mixed_precision == MixedPrecision::kBf16   ? at::kBFloat16
                     : s.spec.mixed_precision == MixedPrecision::kFp16 ? at::kHalf
                                                                      : at::kFloat;
    fo.backward_prefetch = s.spec.fsdp.backward_prefetch;
    fo.compute_device = s.spec.device == Device::kCuda ? c10::Device(c10::kCUDA, 0) : c10::Device(c10::kCPU);
    s.fsdp = std::make_unique<FullyShardedModel>(s.model, fo, dist.shard_group, dist.replicate_group, world_size);
    s.optimizer = MakeOptimizer(s.spec.optimizer, s.fsdp->ShardParameters());
  } else {
    s.optimizer = MakeOptimizer(s.spec.optimizer, s.model->parameters());
  }
  std::shared_ptr<Dataset> dataset;
  if (s.spec.model.kind == ModelKind::kGpt) {
    dataset = std::make_shared<SyntheticTokens>(s.spec.model.context, s.spec.model.vocab, s.spec.data.num_samples,
                                                s.spec.data.seed);
  } else {
    dataset = std::make_shared<SyntheticDataset>(s.model->sample_shape(), s.spec.model.num_classes,
                                                 s.spec.data.num_samples, s.spec.data.seed);
  }
  DistributedSampler sampler(dataset->size(), rank, world_size, s.spec.data.shuffle, s.spec.data.seed);
  s.loader = std::make_unique<DataLoader>(dataset, sampler, s.spec.data.batch_size);
}

Trainer::~Trainer() = default;

Model& Trainer::model() { return *impl_->model; }
DistributedDataParallel* Trainer::ddp() { return impl_->ddp.get(); }
FullyShardedModel* Trainer::fsdp() { return impl_->fsdp.get(); }

Trainer::MemoryBytes Trainer::Memory() const {
  const Impl& s = *impl_;
  std::set<const c10::StorageImpl*> seen;
  auto bytes = [&](const at::Tensor& t) -> int64_t {
    if (!t.defined() || !t.has_storage()) return 0;
    return seen.insert(t.storage().unsafeGetStorageImpl()).second ? static_cast<int64_t>(t.storage().nbytes()) : 0;
  };
  MemoryBytes m;
  std::vector<at::Tensor> params = s.model->parameters();
  if (s.fsdp) {
    for (const at::Tensor& p : s.fsdp->ShardParameters()) params.push_back(p);
  }
  for (const at::Tensor& p : params) m.params += bytes(p);
  for (const at::Tensor& p : params) m.grads += bytes(p.grad());
  for (const auto& [key, state] : s.optimizer->state()) {
    if (auto* adam = dynamic_cast<torch::optim::AdamWParamState*>(state.get())) {
      m.optimizer += bytes(adam->exp_avg()) + bytes(adam->exp_avg_sq()) + bytes(adam->max_exp_avg_sq());
    } else if (auto* sgd = dynamic_cast<torch::optim::SGDParamState*>(state.get())) {
      m.optimizer += bytes(sgd->momentum_buffer());
    }
  }
  return m;
}
int64_t Trainer::step() const { return impl_->step; }

double Trainer::Step() {
  Impl& s = *impl_;
  const auto t0 = Clock::now();
  s.StartControl();
  Batch batch = s.loader->Next();
  const auto t1 = Clock::now();

  if (s.ddp) s.ddp->PrepareForward();
  at::Tensor logits = s.fsdp ? s.fsdp->Forward(batch.inputs) : s.model->forward(batch.inputs);
  // [B, C] logits with [B] targets, or [B, T, V] with [B, T] (language models).
  at::Tensor loss = torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}).to(at::kFloat),
                                                         batch.targets.reshape({-1}));
  // With find_unused_parameters the Reducer walks the graph from the outputs.
  if (s.ddp) s.ddp->PrepareBackward(s.spec.ddp.find_unused_parameters ? std::vector<at::Tensor>{logits} : std::vector<at::Tensor>{});
  if (s.fsdp) s.fsdp->PrepareBackward();
  loss.backward();
  if (s.fsdp) s.fsdp->FinishBackward();
  double grad_norm = std::nan("");
  if (s.spec.max_grad_norm > 0) {
    // DDP's gradients are already averaged and identical on every rank;
    // FSDP's norm is taken over all shards.
    grad_norm = s.fsdp ? s.fsdp->ClipGradNorm(s.spec.max_grad_norm)
                       : torch::nn::utils::clip_grad_norm_(s.model->parameters(), s.spec.max_grad_norm);
  }
  const auto t2 = Clock::now();

  s.optimizer->step();
  // Steady state: after the step, before gradients are released.
  const MemoryBytes mem = s.sink != nullptr ? Memory() : MemoryBytes{};
  if (s.ddp) {
    s.ddp->ZeroGrad();
  } else if (s.fsdp) {
    for (at::Tensor& p : s.fsdp->ShardParameters()) p.mutable_grad() = at::Tensor();  // freed, as set_to_none
  } else {
    s.optimizer->zero_grad();
  }
  const auto t3 = Clock::now();
  const double loss_value = loss.item<double>();
  s.stop_agreed = s.FinishControl();
  const auto t4 = Clock::now();
  ++s.step;

  if (s.sink != nullptr) {
    StepMetrics m;
    m.rank = s.rank;
    m.step = s.step;
    m.loss = loss_value;
    m.samples = batch.inputs.size(0);
    m.data_seconds = Seconds(t1 - t0);
    m.compute_seconds = Seconds(t2 - t1);
    m.optimizer_seconds = Seconds(t3 - t2);
    m.step_seconds = Seconds(t4 - t0);
    m.samples_per_second = m.step_seconds > 0 ? m.samples / m.step_seconds : 0;
    m.learning_rate = s.spec.optimizer.lr;
    m.grad_norm = grad_norm;
    m.param_bytes = mem.params;
    m.grad_bytes = mem.grads;
    m.optimizer_bytes = mem.optimizer;
    if (s.fsdp) {
      const auto& c = s.fsdp->comm();
      m.allgather_bytes = c.allgather_bytes - s.last_allgather;
      m.reduce_scatter_bytes = c.reduce_scatter_bytes - s.last_reduce_scatter;
      m.sharded_comm_seconds = static_cast<double>(c.nanos - s.last_sharded_nanos) * 1e-9;
      s.last_allgather = c.allgather_bytes;
      s.last_reduce_scatter = c.reduce_scatter_bytes;
      s.last_sharded_nanos = c.nanos;
    }
    if (s.ddp) {
      const CommStats& cs = s.ddp->comm_stats();
      const int64_t wire = cs.wire_bytes.load(), fp32 = cs.fp32_equivalent_bytes.load(), nanos = cs.hook_nanos.load();
      m.comm_wire_bytes = wire - s.last_wire;
      m.comm_fp32_bytes = fp32 - s.last_fp32;
      m.comm_hook_seconds = static_cast<double>(nanos - s.last_hook_nanos) * 1e-9;
      s.last_wire = wire;
      s.last_fp32 = fp32;
      s.last_hook_nanos = nanos;
    }
    m.unix_millis = NowMillis();
    s.sink->OnStep(m);
  }
  return loss_value;
}

TrainResult Trainer::Run() {
  Impl& s = *impl_;
  s.model->train();
  TrainResult result;
  while (s.step < s.spec.max_steps) {
    const double loss = Step();
    if (s.step == 1) result.first_loss = loss;
    result.last_loss = loss;
    if (s.stop_agreed) {
      result.stopped = true;
      break;
    }
  }
  result.final_step = s.step;
  return result;
}

}  // namespace trainyard
