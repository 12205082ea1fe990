#include "worker/trainer.h"

#include <cstdlib>
#include <cstring>

#include <torch/torch.h>

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "common/checkpoint_dir.h"
#include "common/clock.h"
#include "common/log.h"

#include <torch/csrc/distributed/c10d/comm.hpp>

#include "worker/autocast.h"
#include "worker/background_checkpoint.h"
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
#include "worker/snapshots.h"
#include "worker/step_control.h"
#include "worker/step_recorder.h"

namespace trainyard {
namespace {

using Clock = std::chrono::steady_clock;

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

  // Checkpoints: the next N, the staging tag every rank shares, registered
  // state, where the run resumed from, and the last one saved.
  struct {
    int64_t next_index = 0;
    std::string staging_tag;
    std::map<std::string, Checkpointable*> extra;
    std::string resumed_from;
    std::vector<std::string> resume_notes;
    int64_t last_step = -1;
    CheckpointType last_type = CheckpointType::kAuto;
    std::string last_path;
    std::unique_ptr<AsyncCheckpointer> background;  // checkpoint.async
    std::unique_ptr<Snapshots> snapshots;           // checkpoint.snapshot_every_steps
    int64_t next_snapshot = 0;
    bool snapshot_failing = false;
  } ckpt;

  std::unique_ptr<StepRecorder> recorder;

  CheckpointType PeriodicType() const {
    if (spec.checkpoint.type != CheckpointType::kAuto) return spec.checkpoint.type;
    return fsdp && spec.fsdp.state_dict_type == StateDictType::kShardedStateDict ? CheckpointType::kSharded
                                                                                 : CheckpointType::kFull;
  }

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
    st.extra = ckpt.extra;
    st.step = step;
    return st;
  }

  // A save's outcome: remembered when it succeeded, reported by rank 0.
  void Report(const CheckpointEvent& ev);
  // Collective: waits for the background save in flight, if any.
  void DrainSaves() {
    if (std::optional<CheckpointEvent> ev = ckpt.background->Drain(State())) Report(*ev);
  }
  // Collective, at a step boundary: a periodic or requested save, written
  // in the background when checkpoint.async.
  void StartCheckpoint(Trainer& trainer, CheckpointType type, const std::string& trigger, int64_t request_id);

  // Collective: this step's in-memory snapshot.
  void TakeSnapshot();

  void BuildParallelModel(const DistContext& dist);
  // Checkpoint numbering and resume: rank 0 decides, every rank follows.
  void AgreeOnCheckpoints(Trainer& trainer);
};

void Trainer::Impl::BuildParallelModel(const DistContext& dist) {
  // Built on the host from the seed (identical on every rank), then moved.
  model = BuildModel(spec.model, spec.seed);
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

void Trainer::Impl::Report(const CheckpointEvent& ev) {
  if (ev.ok) {
    ckpt.last_step = ev.step;
    ckpt.last_type = ev.type;
    ckpt.last_path = ev.path;
  } else {
    log::Warn("rank {}: {} checkpoint at step {} failed: {}", rank, ev.trigger, ev.step, ev.error);
  }
  if (rank == 0 && sink != nullptr) sink->OnCheckpoint(ev);
}

void Trainer::Impl::StartCheckpoint(Trainer& trainer, CheckpointType type, const std::string& trigger,
                                    int64_t request_id) {
  if (!spec.checkpoint.async || spec.checkpoint.project_dir.empty()) {
    trainer.Checkpoint(type, trigger, request_id);
    return;
  }
  DrainSaves();
  if (type == CheckpointType::kAuto) type = PeriodicType();
  std::optional<CheckpointEvent> failed = ckpt.background->Start(
      State(), type, {spec.checkpoint.project_dir, ckpt.next_index++, ckpt.staging_tag}, trigger, request_id);
  if (failed) Report(*failed);
}

void Trainer::Impl::TakeSnapshot() {
  const CheckpointEvent ev = ckpt.snapshots->Take(State(), ckpt.next_snapshot++, ckpt.staging_tag);
  if (ev.ok) {
    ckpt.snapshot_failing = false;
    return;
  }
  log::Warn("rank {}: snapshot at step {} failed: {}", rank, ev.step, ev.error);
  // Said once each time snapshots start failing.
  if (!ckpt.snapshot_failing && rank == 0 && sink != nullptr) {
    sink->OnNote("in-memory snapshot at step " + std::to_string(ev.step) + " failed: " + ev.error);
  }
  ckpt.snapshot_failing = true;
}

namespace {

// The step a complete checkpoint directory was taken at; -1 when unknown.
int64_t CheckpointStep(const std::string& path) {
  if (path.empty()) return -1;
  auto info = CheckCheckpoint(path, /*verify=*/false);
  if (!info.ok()) return -1;
  auto meta = nlohmann::json::parse(info->metadata_json, nullptr, false);
  return meta.is_object() && meta.contains("step") && meta["step"].is_number_integer() ? meta["step"].get<int64_t>()
                                                                                       : -1;
}

}  // namespace

void Trainer::Impl::AgreeOnCheckpoints(Trainer& trainer) {
  // next index, staging tag, error, next snapshot index, resume from the snapshot
  int64_t header[5] = {0, static_cast<int64_t>(::getpid()), 0, 0, 0};
  std::string path_or_error, snapshot;
  if (rank == 0) {
    try {
      if (!spec.checkpoint.project_dir.empty()) header[0] = CheckpointDir(spec.checkpoint.project_dir).NextIndex();
      path_or_error = ResolveCheckpoint(spec.checkpoint.project_dir, spec.checkpoint.resume_from, &ckpt.resume_notes);
      if (ckpt.snapshots->enabled()) header[3] = CheckpointDir(ckpt.snapshots->dir()).NextIndex();
      if (spec.checkpoint.resume_from == "latest") {
        std::vector<std::string> snapshot_notes;
        snapshot = ckpt.snapshots->Newest(&snapshot_notes);
        const int64_t disk_step = CheckpointStep(path_or_error), snapshot_step = CheckpointStep(snapshot);
        if (!snapshot.empty() && snapshot_step > disk_step) {
          header[4] = 1;
        } else if (!snapshot.empty()) {
          ckpt.resume_notes.push_back("in-memory snapshot at step " + std::to_string(snapshot_step) +
                                      " is not newer than the checkpoint at step " + std::to_string(disk_step));
        }
      }
    } catch (const std::exception& e) {
      header[2] = 1;
      path_or_error = e.what();
    }
  }
  if (pg) {
    at::Tensor h = at::tensor(std::vector<int64_t>(header, header + 5), at::kLong);
    std::vector<at::Tensor> v = {h};
    pg->broadcast(v)->wait();
    for (int i = 0; i < 5; ++i) header[i] = h[i].item<int64_t>();
    BroadcastString(pg, &path_or_error);
    BroadcastString(pg, &snapshot);
  }
  if (header[2] != 0) throw std::runtime_error(path_or_error);
  ckpt.next_index = header[0];
  ckpt.staging_tag = std::to_string(header[1]);
  ckpt.next_snapshot = header[3];
  if (header[4] != 0) {
    // Every rank must see the snapshot (ranks on other hosts do not).
    const bool visible = CheckCheckpoint(snapshot, /*verify=*/false).ok();
    at::Tensor all = at::full({1}, visible ? int64_t{1} : int64_t{0}, at::kLong);
    if (pg) {
      std::vector<at::Tensor> v = {all};
      c10d::AllreduceOptions opts;
      opts.reduceOp = c10d::ReduceOp::MIN;
      pg->allreduce(v, opts)->wait();
    }
    if (all.item<int64_t>() == 1) {
      ckpt.resume_notes.push_back("resuming from the in-memory snapshot at step " +
                                  std::to_string(CheckpointStep(snapshot)) + " (newer than " +
                                  (path_or_error.empty() ? std::string("any checkpoint") : path_or_error) + ")");
      path_or_error = snapshot;
    } else {
      ckpt.resume_notes.push_back("the in-memory snapshot " + snapshot +
                                  " is not on every rank's host; resuming from disk");
    }
  }
  if (!path_or_error.empty()) {
    const int64_t next_index = ckpt.next_index;
    ResumeInfo info = trainer.Resume(path_or_error);
    if (path_or_error == snapshot) ckpt.next_index = next_index;  // disk numbering goes on
    ckpt.resumed_from = path_or_error;
    ckpt.resume_notes.insert(ckpt.resume_notes.end(), info.notes.begin(), info.notes.end());
  } else if (spec.checkpoint.resume_from == "latest") {
    ckpt.resume_notes.push_back("resume_from latest: no complete checkpoint in " + spec.checkpoint.project_dir +
                                "; starting fresh");
  }
  // Fine-tuning starts from the given weights; a resumed job from its checkpoint.
  if (path_or_error.empty() && !spec.model.init_from.empty()) {
    for (std::string& note :
         LoadInitialWeights(State(), spec.model.init_from, spec.model.init_from_strict, spec.model.init_from_prefix)) {
      ckpt.resume_notes.push_back(std::move(note));
    }
    ckpt.resume_notes.push_back("initial weights from " + spec.model.init_from);
  }
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
  s.control = std::make_unique<StepControl>(s.pg, s.ddp ? dist.shm : nullptr, control);
  s.recorder = std::make_unique<StepRecorder>(rank, s.device, s.ddp.get(), s.fsdp.get());
  s.ckpt.background = std::make_unique<AsyncCheckpointer>(rank);
  s.ckpt.snapshots = std::make_unique<Snapshots>(dist.snapshot_dir, s.spec.checkpoint.snapshot_every_steps);
  std::vector<int64_t> sample_shape = s.model->sample_shape();
  if (sample_shape.empty()) sample_shape = {s.spec.model.input_size};  // torchscript: flat inputs
  MetricsSink* notes = sink;
  s.data = MakeJobData(s.spec, sample_shape, rank, world_size, [notes](const std::string& text) {
    if (notes != nullptr) notes->OnNote(text);
  });
  if (s.spec.mixed_precision == MixedPrecision::kFp16) {
    s.scaler = std::make_unique<LossScaler>();
    s.ckpt.extra["loss_scaler"] = s.scaler.get();
  }
  s.AgreeOnCheckpoints(*this);
}

ResumeInfo Trainer::Resume(const std::string& dir) {
  Impl& s = *impl_;
  ResumeInfo info = LoadCheckpoint(s.State(), dir);
  s.step = info.step;
  s.ckpt.next_index = std::max(s.ckpt.next_index, info.checkpoint_index + 1);
  return info;
}

const std::string& Trainer::resumed_from() const { return impl_->ckpt.resumed_from; }
const std::vector<std::string>& Trainer::resume_notes() const { return impl_->ckpt.resume_notes; }

void Trainer::RegisterForCheckpointing(const std::string& name, Checkpointable* state) {
  if (name.empty() || name.find('.') != std::string::npos) {
    throw std::invalid_argument("checkpointable state name '" + name + "' must be non-empty and without '.'");
  }
  impl_->ckpt.extra[name] = state;
}

CheckpointEvent Trainer::Checkpoint(CheckpointType type, const std::string& trigger, int64_t request_id) {
  Impl& s = *impl_;
  s.DrainSaves();
  if (type == CheckpointType::kAuto) type = s.PeriodicType();
  CheckpointEvent ev;
  if (s.spec.checkpoint.project_dir.empty()) {
    ev.error = "checkpoint.project_dir is not set";
    ev.step = s.step;
  } else {
    ev = SaveCheckpoint(s.State(), type, {s.spec.checkpoint.project_dir, s.ckpt.next_index++, s.ckpt.staging_tag});
  }
  ev.trigger = trigger;
  ev.request_id = request_id;
  s.Report(ev);
  return ev;
}

void Trainer::WaitForCheckpoints() { impl_->DrainSaves(); }

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
  s.control->Start(s.PeriodicType(), s.ckpt.background->progress());
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
  if (auto ev = s.ckpt.background->Advance(agreed.save.written, agreed.save.failed_rank)) s.Report(*ev);
  const auto t4 = Clock::now();
  ++s.step;
  const bool periodic = s.spec.checkpoint.every_steps > 0 && s.step % s.spec.checkpoint.every_steps == 0;
  const double eval_loss = s.data.eval && s.step % s.spec.eval_every_steps == 0 ? Evaluate() : std::nan("");

  if (s.sink != nullptr) {
    StepSample sample;
    sample.step = s.step;
    sample.loss = loss_value;
    sample.samples = samples;
    sample.data = data_time;
    sample.compute = t2 - t0 - data_time;
    sample.optimizer = t3 - t2;
    sample.total = t4 - t0;
    sample.learning_rate = lr;
    sample.eval_loss = eval_loss;
    sample.grad_norm = grad_norm;
    sample.param_bytes = mem.params;
    sample.grad_bytes = mem.grads;
    sample.optimizer_bytes = mem.optimizer;
    // The backward pass costs twice the forward.
    sample.model_flops = 3 * std::max(0.0, s.forward_flops_per_sample) * static_cast<double>(samples);
    StepMetrics m = s.recorder->Record(sample);
    m.peak_flops = s.peak_flops;
    s.sink->OnStep(m);
  }
  // At the step boundary every rank agreed on: preemption, requested, then
  // periodic.
  if (agreed.preempt || agreed.checkpoint || periodic) SetPhase(s.flight, "checkpoint", s.step);
  if (agreed.preempt) {
    CheckpointEvent ev = Checkpoint(s.PeriodicType(), "preemption");
    s.preempted = true;
    s.preemption_checkpoint = ev.ok ? ev.path : "";
    s.stop_agreed = true;
  } else if (agreed.checkpoint && agreed.stop_after) {
    Checkpoint(*agreed.checkpoint, "cancel", agreed.request_id);
    s.stop_agreed = true;
  } else if (agreed.checkpoint) {
    s.StartCheckpoint(*this, *agreed.checkpoint, "request", agreed.request_id);
  } else if (periodic) {
    s.StartCheckpoint(*this, s.PeriodicType(), "periodic", 0);
  }
  if (!s.stop_agreed && s.ckpt.snapshots->Due(s.step) && s.step < s.spec.max_steps) {
    SetPhase(s.flight, "snapshot", s.step);
    s.TakeSnapshot();
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
  s.DrainSaves();
  if (!result.stopped && s.spec.checkpoint.save_final && !s.spec.checkpoint.project_dir.empty()) {
    if (s.ckpt.last_step == s.step && s.ckpt.last_type == CheckpointType::kFull) {
      result.final_checkpoint = s.ckpt.last_path;
    } else {
      CheckpointEvent ev = Checkpoint(CheckpointType::kFull, "final");
      if (!ev.ok) throw std::runtime_error("final checkpoint failed: " + ev.error);
      result.final_checkpoint = ev.path;
    }
  }
  // Every rank is past its last snapshot (each is collective).
  if (s.rank == 0) s.ckpt.snapshots->RemoveAll();
  return result;
}

}  // namespace trainyard
