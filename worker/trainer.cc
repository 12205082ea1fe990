#include "worker/trainer.h"

#include <cstdlib>
#include <cstring>


#include <torch/torch.h>

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <set>

#include "common/checkpoint_dir.h"
#include "common/clock.h"
#include "common/log.h"

#include <ATen/autocast_mode.h>

#include <torch/csrc/distributed/c10d/comm.hpp>

#include "worker/data.h"
#include "worker/ddp.h"
#include "worker/device.h"
#include "worker/loss_scaler.h"
#include "worker/fsdp.h"
#include "worker/models.h"
#include "worker/shm_collectives.h"

namespace trainyard {
namespace {

// Autocast on one device type for the guard's lifetime (torch.autocast):
// CPU autocast takes bf16 only; CUDA takes fp16 and bf16. Leaving clears the
// cast cache, as PyTorch does, so the next step casts the updated weights.
class AutocastGuard {
 public:
  AutocastGuard(c10::DeviceType device, at::ScalarType dtype, bool enabled) : device_(device), enabled_(enabled) {
    if (!enabled_) return;
    previous_dtype_ = at::autocast::get_autocast_dtype(device_);
    previous_enabled_ = at::autocast::is_autocast_enabled(device_);
    at::autocast::set_autocast_dtype(device_, dtype);
    at::autocast::set_autocast_enabled(device_, true);
  }
  ~AutocastGuard() {
    if (!enabled_) return;
    at::autocast::set_autocast_enabled(device_, previous_enabled_);
    at::autocast::set_autocast_dtype(device_, previous_dtype_);
    at::autocast::clear_cache();
  }
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  c10::DeviceType device_;
  bool enabled_;
  at::ScalarType previous_dtype_ = at::kFloat;
  bool previous_enabled_ = false;
};


using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

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

// Datasets for the job: training, and the held-out split for evaluation
// (null when eval_every_steps is 0).
struct Datasets {
  std::shared_ptr<Dataset> train, eval;
};

Datasets MakeDatasets(const JobSpec& spec, const std::vector<int64_t>& sample_shape, int32_t world_size) {
  const bool gpt = spec.model.kind == ModelKind::kGpt;
  const bool eval = spec.eval_every_steps > 0;
  const int64_t eval_size = static_cast<int64_t>(spec.eval_batches) * spec.data.batch_size * world_size;
  Datasets d;
  switch (spec.data.kind) {
    case DataKind::kSynthetic:
      if (gpt) {
        d.train = std::make_shared<SyntheticTokens>(spec.model.context, spec.model.vocab, spec.data.num_samples,
                                                    spec.data.seed);
      } else {
        d.train = std::make_shared<SyntheticDataset>(sample_shape, spec.model.num_classes, spec.data.num_samples,
                                                     spec.data.seed);
      }
      // Held out: samples past the training set, from the same distribution.
      if (eval) d.eval = std::make_shared<OffsetDataset>(d.train, spec.data.num_samples, eval_size);
      break;
    case DataKind::kMnist:
      if (gpt || spec.model.kind == ModelKind::kResNet) {
        throw std::invalid_argument("data.kind mnist: the " + std::string(ModelKindName(spec.model.kind)) +
                                    " model does not take 28x28 images");
      }
      d.train = std::make_shared<MnistDataset>(spec.data.path, /*train=*/true, sample_shape);
      if (eval) d.eval = std::make_shared<MnistDataset>(spec.data.path, /*train=*/false, sample_shape);
      break;
    case DataKind::kTokens:
      if (!gpt) throw std::invalid_argument("data.kind tokens: needs the gpt model");
      // The last 10% of the file is held out when evaluating.
      d.train = std::make_shared<TokenFile>(spec.data.path, spec.model.context, spec.model.vocab, spec.data.num_samples,
                                            spec.data.seed, 0.0, eval ? 0.9 : 1.0);
      if (eval) {
        d.eval = std::make_shared<TokenFile>(spec.data.path, spec.model.context, spec.model.vocab, eval_size,
                                             spec.data.seed + 1, 0.9, 1.0);
      }
      break;
  }
  return d;
}

}  // namespace

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

namespace {

// Control word exchanged by all ranks every step (allreduce MAX), so that a
// request seen by one rank takes effect on every rank after the same step.
// kCheckpointSlot: 0 none, 1 full, 2 sharded.
enum ControlSlot : int64_t { kStopSlot = 0, kCheckpointSlot, kRequestSlot, kStopAfterSlot, kPreemptSlot, kControlSlots };

// Rank 0's string on every rank.
void BroadcastString(const c10::intrusive_ptr<c10d::ProcessGroup>& pg, std::string* text) {
  at::Tensor len = at::full({1}, static_cast<int64_t>(text->size()), at::kLong);
  std::vector<at::Tensor> v = {len};
  pg->broadcast(v)->wait();
  at::Tensor bytes = at::zeros({std::max<int64_t>(1, len.item<int64_t>())}, at::kByte);
  std::memcpy(bytes.data_ptr(), text->data(), text->size() <= static_cast<size_t>(bytes.numel()) ? text->size() : 0);
  std::vector<at::Tensor> b = {bytes};
  pg->broadcast(b)->wait();
  text->assign(static_cast<const char*>(bytes.data_ptr()), static_cast<size_t>(len.item<int64_t>()));
}

}  // namespace

struct Trainer::Impl {
  JobSpec spec;
  int32_t rank;
  int32_t world_size;
  c10::Device device = c10::Device(c10::kCPU);  // where the model, batches and gradients live
  c10::intrusive_ptr<c10d::ProcessGroup> pg;
  ShmCollectives* shm = nullptr;  // DDP's shared-memory path; also carries the control word
  MetricsSink* sink;
  TrainerControl* control;

  std::shared_ptr<Model> model;
  std::unique_ptr<DistributedDataParallel> ddp;
  std::unique_ptr<FullyShardedModel> fsdp;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  std::unique_ptr<DataLoader> loader;
  int64_t step = 0;
  bool stop_agreed = false;
  std::unique_ptr<DataLoader> eval_loader;
  std::unique_ptr<LossScaler> scaler;  // mixed_precision fp16
  std::vector<at::Tensor> buffers;      // FSDP: synchronized before each forward
  // Checkpoints: the next N, the staging tag every rank shares, registered
  // state, the request agreed in this step's control exchange.
  int64_t next_checkpoint_index = 0;
  std::string staging_tag;
  std::map<std::string, Checkpointable*> extra;
  std::string resumed_from;
  std::vector<std::string> resume_notes;
  CheckpointRequest local_request;  // taken from `control` for this step
  bool local_has_request = false;
  int64_t agreed_checkpoint = 0, agreed_request = 0;
  bool agreed_stop_after = false;
  bool agreed_preempt = false;
  bool preempted = false;            // a preemption checkpoint was taken; stopping
  std::string preemption_checkpoint;
  int64_t last_checkpoint_step = -1;
  CheckpointType last_checkpoint_type = CheckpointType::kAuto;
  std::string last_checkpoint_path;
  int64_t last_wire = 0, last_fp32 = 0, last_hook_nanos = 0;  // CommStats at the previous step
  int64_t last_allgather = 0, last_reduce_scatter = 0, last_sharded_nanos = 0;  // FSDP counters, likewise  // set by the step whose control exchange carried a stop

  // Started at the beginning of a step, waited for at its end.
  at::Tensor controlw;
  c10::intrusive_ptr<c10d::Work> control_work;

  CheckpointType PeriodicType() const {
    if (spec.checkpoint.type != CheckpointType::kAuto) return spec.checkpoint.type;
    return fsdp && spec.fsdp.state_dict_type == StateDictType::kShardedStateDict ? CheckpointType::kSharded
                                                                                 : CheckpointType::kFull;
  }

  void StartControl() {
    local_has_request = false;
    if (control != nullptr) {
      if (auto r = control->TakeCheckpoint()) {
        local_request = *r;
        local_has_request = true;
      }
    }
    int64_t word[kControlSlots] = {0, 0, 0, 0, 0};
    word[kStopSlot] = control != nullptr && control->stop_requested() ? 1 : 0;
    word[kPreemptSlot] = control != nullptr && control->preemption_requested() ? 1 : 0;
    if (local_has_request) {
      const CheckpointType t = local_request.type == CheckpointType::kAuto ? PeriodicType() : local_request.type;
      word[kCheckpointSlot] = t == CheckpointType::kSharded ? 2 : 1;
      word[kRequestSlot] = local_request.request_id;
      word[kStopAfterSlot] = local_request.stop_after ? 1 : 0;
    }
    controlw = at::tensor(std::vector<int64_t>(word, word + kControlSlots), at::kLong);
    // With shared memory the exchange is a barrier at the step's end (no
    // Gloo round trip and its threads' wake-ups on every step).
    if (!pg || shm != nullptr) return;
    std::vector<at::Tensor> t = {controlw};
    c10d::AllreduceOptions opts;
    opts.reduceOp = c10d::ReduceOp::MAX;
    control_work = pg->allreduce(t, opts);
  }

  // Returns true when some rank asked to stop; sets the agreed checkpoint.
  bool FinishControl() {
    if (shm != nullptr) {
      shm->AllreduceMax(controlw.data_ptr<int64_t>(), kControlSlots);
    } else if (pg) {
      control_work->wait();
      control_work.reset();
    }
    const int64_t* w = controlw.data_ptr<int64_t>();
    agreed_checkpoint = w[kCheckpointSlot];
    agreed_request = w[kRequestSlot];
    agreed_stop_after = w[kStopAfterSlot] != 0;
    agreed_preempt = w[kPreemptSlot] != 0;
    return w[kStopSlot] != 0;
  }

  TrainingState State() {
    TrainingState st;
    st.spec = &spec;
    st.rank = rank;
    st.world_size = world_size;
    st.process_group = pg;
    st.model = model.get();
    st.fsdp = fsdp.get();
    st.ddp = ddp.get();
    st.optimizer = optimizer.get();
    st.loader = loader.get();
    st.extra = extra;
    st.step = step;
    return st;
  }
};

Trainer::Trainer(JobSpec spec, int32_t rank, int32_t world_size, DistContext dist, MetricsSink* sink,
                 TrainerControl* control)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.spec = std::move(spec);
  s.rank = rank;
  s.world_size = world_size;
  s.pg = std::move(dist.process_group);
  s.sink = sink;
  s.control = control;
  if (world_size > 1 && !s.pg) throw std::invalid_argument("a process group is required when world_size > 1");

  s.device = dist.device ? *dist.device : RankDevice(s.spec.device);
  UseDevice(s.device);
  // Built on the host from the seed (identical on every rank), then moved.
  s.model = BuildModel(s.spec.model, s.spec.seed);
  if (!s.device.is_cpu()) s.model->to(s.device);
  if (s.pg && s.spec.distributed_type == DistributedType::kDdp) {
    s.ddp = std::make_unique<DistributedDataParallel>(s.model->parameters(), s.model->buffers(), s.pg, s.spec.ddp,
                                                      dist.shm);
    s.shm = dist.shm;
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
    fo.compute_device = s.device;
    s.fsdp = std::make_unique<FullyShardedModel>(s.model, fo, dist.shard_group, dist.replicate_group, world_size);
    if (s.spec.ddp.broadcast_buffers) s.buffers = s.model->buffers();
    s.optimizer = MakeOptimizer(s.spec.optimizer, s.fsdp->ShardParameters());
  } else {
    s.optimizer = MakeOptimizer(s.spec.optimizer, s.model->parameters());
  }
  std::vector<int64_t> sample_shape = s.model->sample_shape();
  if (sample_shape.empty()) sample_shape = {s.spec.model.input_size};  // torchscript: flat inputs
  Datasets data = MakeDatasets(s.spec, sample_shape, world_size);
  DistributedSampler sampler(data.train->size(), rank, world_size, s.spec.data.shuffle, s.spec.data.seed,
                             s.spec.data.drop_last);
  s.loader = std::make_unique<DataLoader>(data.train, sampler, s.spec.data.batch_size);
  if (data.eval) {
    DistributedSampler eval_sampler(data.eval->size(), rank, world_size, /*shuffle=*/false, 0);
    s.eval_loader = std::make_unique<DataLoader>(data.eval, eval_sampler, s.spec.data.batch_size);
  }
  if (s.spec.mixed_precision == MixedPrecision::kFp16) {
    s.scaler = std::make_unique<LossScaler>();
    s.extra["loss_scaler"] = s.scaler.get();
  }

  // Checkpoint numbering and resume: rank 0 decides, every rank follows.
  int64_t header[3] = {0, static_cast<int64_t>(::getpid()), 0};  // next index, staging tag, error
  std::string path_or_error;
  if (rank == 0) {
    try {
      if (!s.spec.checkpoint.project_dir.empty()) header[0] = CheckpointDir(s.spec.checkpoint.project_dir).NextIndex();
      path_or_error = ResolveCheckpoint(s.spec.checkpoint.project_dir, s.spec.checkpoint.resume_from, &s.resume_notes);
    } catch (const std::exception& e) {
      header[2] = 1;
      path_or_error = e.what();
    }
  }
  if (s.pg) {
    at::Tensor h = at::tensor(std::vector<int64_t>(header, header + 3), at::kLong);
    std::vector<at::Tensor> v = {h};
    s.pg->broadcast(v)->wait();
    for (int i = 0; i < 3; ++i) header[i] = h[i].item<int64_t>();
    BroadcastString(s.pg, &path_or_error);
  }
  if (header[2] != 0) throw std::runtime_error(path_or_error);
  s.next_checkpoint_index = header[0];
  s.staging_tag = std::to_string(header[1]);
  if (!path_or_error.empty()) {
    ResumeInfo info = Resume(path_or_error);
    s.resumed_from = path_or_error;
    s.resume_notes.insert(s.resume_notes.end(), info.notes.begin(), info.notes.end());
  } else if (s.spec.checkpoint.resume_from == "latest") {
    s.resume_notes.push_back("resume_from latest: no complete checkpoint in " + s.spec.checkpoint.project_dir +
                             "; starting fresh");
  }
}

ResumeInfo Trainer::Resume(const std::string& dir) {
  Impl& s = *impl_;
  ResumeInfo info = LoadCheckpoint(s.State(), dir);
  s.step = info.step;
  s.next_checkpoint_index = std::max(s.next_checkpoint_index, info.checkpoint_index + 1);
  return info;
}

const std::string& Trainer::resumed_from() const { return impl_->resumed_from; }
const std::vector<std::string>& Trainer::resume_notes() const { return impl_->resume_notes; }

void Trainer::RegisterForCheckpointing(const std::string& name, Checkpointable* state) {
  if (name.empty() || name.find('.') != std::string::npos) {
    throw std::invalid_argument("checkpointable state name '" + name + "' must be non-empty and without '.'");
  }
  impl_->extra[name] = state;
}

CheckpointEvent Trainer::Checkpoint(CheckpointType type, const std::string& trigger, int64_t request_id) {
  Impl& s = *impl_;
  if (type == CheckpointType::kAuto) type = s.PeriodicType();
  CheckpointEvent ev;
  if (s.spec.checkpoint.project_dir.empty()) {
    ev.error = "checkpoint.project_dir is not set";
    ev.step = s.step;
  } else {
    ev = SaveCheckpoint(s.State(), type, {s.spec.checkpoint.project_dir, s.next_checkpoint_index++, s.staging_tag});
  }
  ev.trigger = trigger;
  ev.request_id = request_id;
  if (ev.ok) {
    s.last_checkpoint_step = s.step;
    s.last_checkpoint_type = type;
    s.last_checkpoint_path = ev.path;
  } else {
    log::Warn("rank {}: {} checkpoint at step {} failed: {}", s.rank, trigger, s.step, ev.error);
  }
  if (s.rank == 0 && s.sink != nullptr) s.sink->OnCheckpoint(ev);
  return ev;
}

Trainer::~Trainer() = default;

Model& Trainer::model() { return *impl_->model; }
DistributedDataParallel* Trainer::ddp() { return impl_->ddp.get(); }
FullyShardedModel* Trainer::fsdp() { return impl_->fsdp.get(); }
torch::optim::Optimizer& Trainer::optimizer() { return *impl_->optimizer; }

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

at::Tensor Trainer::Impl_Loss(const at::Tensor& output, const at::Tensor& targets) const {
  const JobSpec& sp = impl_->spec;
  at::Tensor out = output.to(at::kFloat);
  if (sp.loss == LossKind::kMse) {
    // Regression on the class: the one-hot vector of the target.
    at::Tensor want = targets.dim() == out.dim() ? targets.to(at::kFloat)
                                                 : torch::one_hot(targets, out.size(-1)).to(at::kFloat);
    return torch::mse_loss(out, want);
  }
  // [B, C] logits with [B] targets, or [B, T, V] with [B, T] (language models).
  return torch::nn::functional::cross_entropy(out.reshape({-1, out.size(-1)}), targets.reshape({-1}));
}

double Trainer::Step() {
  Impl& s = *impl_;
  const auto t0 = Clock::now();
  s.StartControl();
  const int accum = s.spec.gradient_accumulation_steps;
  // Autocast for DDP and single-process runs (FSDP casts its parameters to
  // its param_dtype instead): bf16 on CPU and CUDA, fp16 on CUDA (on CPU
  // fp16 is loss scaling around fp32 compute: LibTorch's CPU autocast has
  // no fp16).
  const bool cuda = s.device.is_cuda();
  const bool autocast = !s.fsdp && (s.spec.mixed_precision == MixedPrecision::kBf16 ||
                                    (cuda && s.spec.mixed_precision == MixedPrecision::kFp16));
  const at::ScalarType autocast_dtype = s.spec.mixed_precision == MixedPrecision::kFp16 ? at::kHalf : at::kBFloat16;
  Clock::duration data_time{};
  double loss_sum = 0;
  int64_t samples = 0;
  for (int micro = 0; micro < accum; ++micro) {
    const auto d0 = Clock::now();
    Batch batch = s.loader->Next();
    if (cuda) batch = batch.To(s.device);
    data_time += Clock::now() - d0;
    samples += batch.inputs.size(0);
    // Gradients are communicated on the last micro-step only (no_sync on
    // the others); FSDP reduce-scatters on each and accumulates shards.
    const bool sync = micro + 1 == accum;
    if (s.ddp) {
      s.ddp->SyncBuffers();
      if (sync) s.ddp->PrepareForward();
    } else if (s.fsdp && s.pg && !s.buffers.empty()) {
      // FSDP keeps buffers (BatchNorm statistics) whole on every rank:
      // rank 0's win before each forward, as DDP's broadcast_buffers.
      torch::NoGradGuard no_grad;
      c10d::broadcast_coalesced(s.pg, s.buffers, 250 * 1024 * 1024, 0);
    }
    at::Tensor output;
    {
      AutocastGuard guard(s.device.type(), autocast_dtype, autocast);
      output = s.fsdp ? s.fsdp->Forward(batch.inputs) : s.model->forward(batch.inputs);
    }
    at::Tensor loss = Impl_Loss(output, batch.targets);
    loss_sum += loss.item<double>();
    at::Tensor scaled = accum > 1 ? loss / accum : loss;
    if (s.scaler) scaled = scaled * s.scaler->scale();
    // With find_unused_parameters the Reducer walks the graph from the outputs.
    if (s.ddp && sync) {
      s.ddp->PrepareBackward(s.spec.ddp.find_unused_parameters ? std::vector<at::Tensor>{output}
                                                               : std::vector<at::Tensor>{});
    }
    if (s.fsdp) s.fsdp->PrepareBackward();
    scaled.backward();
    if (s.fsdp) s.fsdp->FinishBackward();
  }
  const std::vector<at::Tensor> params = s.fsdp ? s.fsdp->ShardParameters() : s.model->parameters();
  bool finite = true;
  if (s.scaler) {
    std::vector<at::Tensor> grads;
    for (const at::Tensor& p : params) grads.push_back(p.grad());
    finite = s.scaler->UnscaleAndCheck(grads, s.pg);
  }
  double grad_norm = std::nan("");
  if (finite && s.spec.max_grad_norm > 0) {
    // DDP's gradients are already averaged and identical on every rank;
    // FSDP's norm is taken over all shards.
    grad_norm = s.fsdp ? s.fsdp->ClipGradNorm(s.spec.max_grad_norm)
                       : torch::nn::utils::clip_grad_norm_(params, s.spec.max_grad_norm);
  }
  if (finite && s.spec.clip_grad_value > 0) {
    // Element-wise, so clamping shards is clamping the whole gradient.
    torch::nn::utils::clip_grad_value_(params, s.spec.clip_grad_value);
  }
  const auto t2 = Clock::now();

  const double lr = s.spec.optimizer.lr * LearningRateFactor(s.spec.scheduler, s.step, s.spec.max_steps);
  for (auto& group : s.optimizer->param_groups()) group.options().set_lr(lr);
  if (finite) s.optimizer->step();
  if (s.scaler) s.scaler->Update(finite);
  // Steady state: after the step, before gradients are released.
  const MemoryBytes mem = s.sink != nullptr ? Memory() : MemoryBytes{};
  // Gradients are released (set_to_none, PyTorch 2's default): the next
  // backward hands its gradients over instead of adding them to zeros, and
  // DDP copies them into its buckets once (with bucket views the Reducer
  // points each gradient back at its bucket).
  for (auto& group : s.optimizer->param_groups()) {
    for (at::Tensor& p : group.params()) p.mutable_grad() = at::Tensor();
  }
  const auto t3 = Clock::now();
  const double loss_value = loss_sum / accum;
  s.stop_agreed = s.FinishControl();
  const auto t4 = Clock::now();
  ++s.step;
  const bool periodic = s.spec.checkpoint.every_steps > 0 && s.step % s.spec.checkpoint.every_steps == 0;
  const double eval_loss =
      s.eval_loader && s.step % s.spec.eval_every_steps == 0 ? Evaluate() : std::nan("");

  if (s.sink != nullptr) {
    StepMetrics m;
    m.rank = s.rank;
    m.step = s.step;
    m.loss = loss_value;
    m.samples = samples;
    m.data_seconds = Seconds(data_time);
    m.compute_seconds = Seconds(t2 - t0 - data_time);
    m.optimizer_seconds = Seconds(t3 - t2);
    m.step_seconds = Seconds(t4 - t0);
    m.samples_per_second = m.step_seconds > 0 ? m.samples / m.step_seconds : 0;
    m.learning_rate = lr;
    m.eval_loss = eval_loss;
    m.grad_norm = grad_norm;
    m.param_bytes = mem.params;
    m.grad_bytes = mem.grads;
    m.optimizer_bytes = mem.optimizer;
    if (const auto device_memory = ReadDeviceMemory(s.device)) {
      m.device_allocated_bytes = device_memory->allocated;
      m.device_peak_bytes = device_memory->peak_allocated;
    }
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
  // At the step boundary every rank agreed on: preemption, requested, then
  // periodic.
  if (s.agreed_preempt) {
    CheckpointEvent ev = Checkpoint(s.PeriodicType(), "preemption");
    s.preempted = true;
    s.preemption_checkpoint = ev.ok ? ev.path : "";
    s.stop_agreed = true;
  } else if (s.agreed_checkpoint != 0) {
    Checkpoint(s.agreed_checkpoint == 2 ? CheckpointType::kSharded : CheckpointType::kFull,
               s.agreed_stop_after ? "cancel" : "request", s.agreed_request);
    if (s.agreed_stop_after) s.stop_agreed = true;
  } else if (periodic) {
    Checkpoint(s.PeriodicType(), "periodic");
  }
  return loss_value;
}

double Trainer::Evaluate() {
  Impl& s = *impl_;
  if (!s.eval_loader) throw std::logic_error("Evaluate() needs eval_every_steps > 0");
  torch::NoGradGuard no_grad;
  s.model->eval();
  s.eval_loader->Seek(0, 0);  // the same held-out batches every time
  double sum = 0;
  for (int32_t b = 0; b < s.spec.eval_batches; ++b) {
    Batch batch = s.eval_loader->Next();
    if (s.device.is_cuda()) batch = batch.To(s.device);
    at::Tensor output = s.fsdp ? s.fsdp->Forward(batch.inputs) : s.model->forward(batch.inputs);
    sum += Impl_Loss(output, batch.targets).item<double>();
  }
  if (s.fsdp) s.fsdp->FinishBackward();  // frees the gathered parameters (no gradients were made)
  s.model->train();
  at::Tensor mean = at::full({1}, sum / s.spec.eval_batches, at::kDouble);
  if (s.pg) {
    std::vector<at::Tensor> t = {mean};
    s.pg->allreduce(t)->wait();
    mean.div_(s.world_size);
  }
  return mean.item<double>();
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
      result.preempted = s.preempted;
      if (s.preempted) result.final_checkpoint = s.preemption_checkpoint;
      break;
    }
  }
  result.final_step = s.step;
  if (!result.stopped && s.spec.checkpoint.save_final && !s.spec.checkpoint.project_dir.empty()) {
    if (s.last_checkpoint_step == s.step && s.last_checkpoint_type == CheckpointType::kFull) {
      result.final_checkpoint = s.last_checkpoint_path;
    } else {
      CheckpointEvent ev = Checkpoint(CheckpointType::kFull, "final");
      if (!ev.ok) throw std::runtime_error("final checkpoint failed: " + ev.error);
      result.final_checkpoint = ev.path;
    }
  }
  return result;
}

}  // namespace trainyard
