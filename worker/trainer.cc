#include "worker/trainer.h"
#include "common/model_layers.h"

#include <cstdlib>
#include <cstring>

#include <torch/torch.h>

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <set>

#include "common/clock.h"
#include "common/log.h"

#include <torch/csrc/distributed/c10d/comm.hpp>

#include "worker/autocast.h"
#include "worker/checkpointer.h"
#include "worker/data.h"
#include "worker/ddp.h"
#include "worker/device.h"
#include "worker/flight_recorder.h"
#include "worker/fsdp.h"
#include "worker/job_data.h"
#include "worker/loss_scaler.h"
#include "worker/model_flops.h"
#include "worker/models.h"
#include "worker/optimizer.h"
#include "worker/shm_collectives.h"
#include "worker/step_control.h"
#include "worker/step_recorder.h"

namespace trainyard {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

struct Trainer::Impl {
  JobSpec spec;
  int32_t rank;
  int32_t world_size;
  c10::Device device = c10::Device(c10::kCPU);  // where the model, batches and gradients live
  c10::intrusive_ptr<c10d::ProcessGroup> pg;
  FlightRecorder* flight = nullptr;  // the phase goes here (diagnosis of hangs)
  c10::intrusive_ptr<c10d::ProcessGroup> checkpoint_group;
  double peak_flops = 0;  // the device's, at the job's precision (PeakFlops)
  MetricsSink* sink;

  // The model and how it is parallelized (at most one of ddp, fsdp).
  std::shared_ptr<Model> model;
  std::unique_ptr<DistributedDataParallel> ddp;
  std::unique_ptr<FullyShardedModel> fsdp;
  std::vector<at::Tensor> buffers;  // FSDP: synchronized before each forward
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  std::unique_ptr<LossScaler> scaler;  // mixed_precision fp16
  JobData data;
  int64_t step = 0;
  double forward_flops_per_sample = -1;  // counted in the first step

  // The step's agreement, and how the loop ends.
  std::unique_ptr<StepControl> control;
  bool stop_agreed = false;  // set by the step whose agreement carried a stop
  bool preempted = false;    // a preemption checkpoint was taken; stopping
  std::string preemption_checkpoint;

  // Checkpoints, their agreement and snapshots.
  std::unique_ptr<Checkpointer> checkpoints;

  std::unique_ptr<StepRecorder> recorder;

  TrainingState State() {
    TrainingState st;
    st.spec = &spec;
    st.rank = rank;
    st.world_size = world_size;
    st.process_group = pg;
    st.checkpoint_group = checkpoint_group;
    st.model = model.get();
    st.fsdp = fsdp.get();
    st.ddp = ddp.get();
    st.optimizer = optimizer.get();
    st.loader = data.train.get();
    st.step = step;
    return st;
  }

  void BuildParallelModel(const DistContext& dist);
};

void Trainer::Impl::BuildParallelModel(const DistContext& dist) {
  // Built on the host from the seed (identical on every rank), then moved.
  model = BuildModel(spec.model, spec.seed);
  if (spec.activation_checkpointing) model->CheckpointActivations(ModelWrapLayer(spec.model.kind).value());
  if (!device.is_cpu()) model->to(device);
  if (pg && spec.distributed_type == DistributedType::kDdp) {
    ddp = std::make_unique<DistributedDataParallel>(model->parameters(), model->buffers(), pg, spec.ddp, dist.shm);
  }
  if (spec.distributed_type != DistributedType::kFsdp) {
    optimizer = MakeOptimizer(spec.optimizer, model->parameters());
    return;
  }
  FsdpOptions fo;
  fo.strategy = spec.fsdp.sharding_strategy;
  fo.wrap_policy = spec.fsdp.auto_wrap_policy;
  fo.min_num_params = spec.fsdp.min_num_params;
  fo.layer_types = spec.fsdp.transformer_layer_cls_to_wrap;
  fo.sync_module_states = spec.fsdp.sync_module_states;
  fo.offload_params = spec.fsdp.offload_params;
  fo.forward_prefetch = spec.fsdp.forward_prefetch;
  fo.param_dtype = spec.mixed_precision == MixedPrecision::kBf16   ? at::kBFloat16
                   : spec.mixed_precision == MixedPrecision::kFp16 ? at::kHalf
                                                                   : at::kFloat;
  fo.backward_prefetch = spec.fsdp.backward_prefetch;
  fo.compute_device = device;
  fsdp = std::make_unique<FullyShardedModel>(model, fo, dist.shard_group, dist.replicate_group, world_size);
  if (spec.ddp.broadcast_buffers) buffers = model->buffers();
  optimizer = MakeOptimizer(spec.optimizer, fsdp->ShardParameters());
}

Trainer::Trainer(JobSpec spec, int32_t rank, int32_t world_size, DistContext dist, MetricsSink* sink,
                 TrainerControl* control)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.spec = std::move(spec);
  s.rank = rank;
  s.world_size = world_size;
  s.pg = dist.process_group;
  s.flight = dist.flight_recorder;
  s.checkpoint_group = dist.checkpoint_group;
  s.sink = sink;
  if (world_size > 1 && !s.pg) throw std::invalid_argument("a process group is required when world_size > 1");
  s.device = dist.device ? *dist.device : RankDevice(s.spec.device);
  UseDevice(s.device);
  s.peak_flops = PeakFlops(DeviceName(s.device), s.spec.mixed_precision);
  s.BuildParallelModel(dist);
  // The control word rides DDP's shared memory when it has it.
  ShmCollectives* control_shm = s.ddp && dist.shm != nullptr ? dist.shm : dist.control_shm;
  s.control = std::make_unique<StepControl>(dist.control_group ? dist.control_group : s.pg, control_shm, control);
  s.recorder = std::make_unique<StepRecorder>(rank, s.device, s.ddp.get(), s.fsdp.get());
  Impl* impl = impl_.get();
  s.checkpoints =
      std::make_unique<Checkpointer>(s.spec, rank, s.pg, dist.snapshot_dir, sink, [impl] { return impl->State(); });
  std::vector<int64_t> sample_shape = s.model->sample_shape();
  if (sample_shape.empty()) sample_shape = {s.spec.model.input_size};  // torchscript: flat inputs
  MetricsSink* notes = sink;
  s.data = MakeJobData(s.spec, sample_shape, rank, world_size, [notes](const std::string& text) {
    if (notes != nullptr) notes->OnNote(text);
  });
  if (s.spec.mixed_precision == MixedPrecision::kFp16) {
    s.scaler = std::make_unique<LossScaler>();
    s.checkpoints->Register("loss_scaler", s.scaler.get());
  }
  s.step = s.checkpoints->AgreeAndRestore();
}

ResumeInfo Trainer::Resume(const std::string& dir) {
  ResumeInfo info = impl_->checkpoints->Restore(dir);
  impl_->step = info.step;
  return info;
}

const std::string& Trainer::resumed_from() const { return impl_->checkpoints->resumed_from(); }
const std::vector<std::string>& Trainer::resume_notes() const { return impl_->checkpoints->resume_notes(); }

void Trainer::RegisterForCheckpointing(const std::string& name, Checkpointable* state) {
  impl_->checkpoints->Register(name, state);
}

CheckpointEvent Trainer::Checkpoint(CheckpointType type, const std::string& trigger, int64_t request_id) {
  return impl_->checkpoints->Save(type, trigger, request_id);
}

void Trainer::WaitForCheckpoints() { impl_->checkpoints->Drain(); }

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
  for (const at::Tensor& t : OptimizerStateTensors(*s.optimizer)) m.optimizer += bytes(t);
  return m;
}
int64_t Trainer::step() const { return impl_->step; }

at::Tensor Trainer::Impl_Loss(const at::Tensor& output, const at::Tensor& targets) const {
  const JobSpec& sp = impl_->spec;
  at::Tensor out = output.to(at::kFloat);
  if (sp.loss == LossKind::kMse) {
    // Regression on the class: the one-hot vector of the target.
    at::Tensor want =
        targets.dim() == out.dim() ? targets.to(at::kFloat) : torch::one_hot(targets, out.size(-1)).to(at::kFloat);
    return torch::mse_loss(out, want);
  }
  // [B, C] logits with [B] targets, or [B, T, V] with [B, T] (language models).
  return torch::nn::functional::cross_entropy(out.reshape({-1, out.size(-1)}), targets.reshape({-1}));
}

double Trainer::Step() {
  Impl& s = *impl_;
  const auto t0 = Clock::now();
  s.control->Start(s.checkpoints->PeriodicType(), s.checkpoints->progress());
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
    SetPhase(s.flight, "data", s.step);
    const auto d0 = Clock::now();
    Batch batch = s.data.train->Next();
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
    SetPhase(s.flight, "forward", s.step);
    at::Tensor output;
    auto forward = [&] {
      AutocastGuard guard(s.device.type(), autocast_dtype, autocast);
      output = s.fsdp ? s.fsdp->Forward(batch.inputs) : s.model->forward(batch.inputs);
    };
    if (s.forward_flops_per_sample < 0 && batch.inputs.size(0) > 0) {
      // Once per trainer: the model's FLOPs, from the first forward pass.
      s.forward_flops_per_sample = CountForwardFlops(forward) / static_cast<double>(batch.inputs.size(0));
    } else {
      forward();
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
    SetPhase(s.flight, "backward", s.step);
    if (s.fsdp) s.fsdp->PrepareBackward();
    scaled.backward();
    if (s.fsdp) s.fsdp->FinishBackward();
  }
  SetPhase(s.flight, "optimizer", s.step);
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
  SetLearningRate(*s.optimizer, lr);
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
  SetPhase(s.flight, "step agreement", s.step);
  const StepAgreement agreed = s.control->Finish();
  s.stop_agreed = agreed.stop;
  s.checkpoints->Advance(agreed.save.written, agreed.save.failed_rank);
  const auto t4 = Clock::now();
  ++s.step;
  const bool periodic = s.spec.checkpoint.every_steps > 0 && s.step % s.spec.checkpoint.every_steps == 0;
  const double eval_loss = s.data.eval && s.step % s.spec.eval_every_steps == 0 ? Evaluate() : std::nan("");

  if (s.sink != nullptr) {
    StepSample sample;
    StepMetrics& n = sample.numbers;
    n.step = s.step;
    n.loss = loss_value;
    n.samples = samples;
    n.learning_rate = lr;
    n.eval_loss = eval_loss;
    n.grad_norm = grad_norm;
    n.param_bytes = mem.params;
    n.grad_bytes = mem.grads;
    n.optimizer_bytes = mem.optimizer;
    // The backward pass costs twice the forward.
    n.model_flops = 3 * std::max(0.0, s.forward_flops_per_sample) * static_cast<double>(samples);
    n.peak_flops = s.peak_flops;
    sample.data = data_time;
    sample.compute = t2 - t0 - data_time;
    sample.optimizer = t3 - t2;
    sample.total = t4 - t0;
    s.sink->OnStep(s.recorder->Record(sample));
  }
  // At the step boundary every rank agreed on: preemption, requested, then
  // periodic.
  if (agreed.preempt || agreed.checkpoint || periodic) SetPhase(s.flight, "checkpoint", s.step);
  if (agreed.preempt) {
    CheckpointEvent ev = s.checkpoints->Save(CheckpointType::kAuto, "preemption");
    s.preempted = true;
    s.preemption_checkpoint = ev.ok ? ev.path : "";
    s.stop_agreed = true;
  } else if (agreed.checkpoint && agreed.stop_after) {
    s.checkpoints->Save(*agreed.checkpoint, "cancel", agreed.request_id);
    s.stop_agreed = true;
  } else if (agreed.checkpoint) {
    s.checkpoints->Start(*agreed.checkpoint, "request", agreed.request_id);
  } else if (periodic) {
    s.checkpoints->Start(CheckpointType::kAuto, "periodic", 0);
  }
  if (!s.stop_agreed && s.checkpoints->SnapshotDue(s.step) && s.step < s.spec.max_steps) {
    SetPhase(s.flight, "snapshot", s.step);
    s.checkpoints->Snapshot();
  }
  SetPhase(s.flight, "between steps", s.step);
  return loss_value;
}

double Trainer::Evaluate() {
  Impl& s = *impl_;
  if (!s.data.eval) throw std::logic_error("Evaluate() needs eval_every_steps > 0");
  torch::NoGradGuard no_grad;
  s.model->eval();
  s.data.eval->Seek(0, 0);  // the same held-out batches every time
  SetPhase(s.flight, "eval", s.step);
  double sum = 0;
  for (int32_t b = 0; b < s.spec.eval_batches; ++b) {
    Batch batch = s.data.eval->Next();
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
  SetPhase(s.flight, "final checkpoint", s.step);
  s.checkpoints->Drain();
  if (!result.stopped && s.spec.checkpoint.save_final && !s.spec.checkpoint.project_dir.empty()) {
    result.final_checkpoint = s.checkpoints->SaveFinal(s.step);
  }
  // Every rank is past its last snapshot (each is collective).
  s.checkpoints->RemoveSnapshots();
  return result;
}

}  // namespace trainyard
