#include "worker/trainer.h"

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "worker/checkpointer.h"
#include "worker/data.h"
#include "worker/data_loader.h"
#include "worker/device.h"
#include "worker/dist_setup.h"
#include "worker/flight_recorder.h"
#include "worker/job_data.h"
#include "worker/loss_scaler.h"
#include "worker/model_flops.h"
#include "worker/models.h"
#include "worker/optimizer.h"
#include "worker/replica_group.h"
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

  std::unique_ptr<ParallelModel> model;  // the model, its parallelism and optimizer
  std::unique_ptr<LossScaler> scaler;    // mixed_precision fp16
  JobData data;
  int64_t step = 0;

  // The step's agreement, checkpoints (their triggers, agreement and
  // snapshots), and how the loop ends.
  std::unique_ptr<StepControl> control;
  std::unique_ptr<Checkpointer> checkpoints;
  Checkpointer::Boundary boundary;  // of the last step

  std::unique_ptr<StepRecorder> recorder;
  TrainerControl* requests = nullptr;  // the control the trainer was given

  // Replica mode (worker/replica_membership.h): the memberships; whether the
  // step in flight applied its optimizer step (it then counts as committed
  // even when a collective after it fails); the epoch agreed at the last
  // boundary; a fresh replacement (committed step -1 until healed); left
  // the job (a membership without this rank).
  std::unique_ptr<ReplicaMembership> replica;
  bool applied = false;
  int64_t agreed_epoch = 0;
  // FSDP in replica mode commits in two phases: a rank's gradients complete
  // its shard only (a member can finish its synchronization while another
  // fails), so the optimizer step waits for a collective over the members
  // that each enters only once its own synchronization succeeded: whoever
  // sees it complete applies the step. A rank whose collective failed
  // holds its step pending (the learning rate and whether the gradients
  // were finite) until the next membership tells whether any member
  // applied it (Settle).
  struct Pending {
    double lr = 0;
    bool finite = true;
    int64_t epoch = 0;  // the membership whose members may have applied it
  };
  std::optional<Pending> pending;
  bool fresh_replacement = false;
  bool left = false;

  // The parts every constructor builds (collective only through DDP's
  // initial broadcast outside replica mode).
  void Build(int32_t rank_in, int32_t world_in, const DistContext& dist, MetricsSink* sink_in,
             TrainerControl* control_in);
  // Replica mode: trains in `g`'s groups from now on, and heals with its
  // members (collective).
  void Bind(const ReplicaGroup& g);
  void Heal();
  // Drops every reference to the current groups.
  void Unbind();
  // The optimizer step of the step in flight (its gradients released);
  // `mem`: the steady-state memory, read before the release.
  void Apply(double lr, bool finite, ModelMemory* mem);
  // FSDP replica mode, collective over the new epoch's world group: a
  // pending step is applied when a member committed it, else dropped.
  void Settle();
  // The step in flight committed: the reads move the cursor, the hash.
  void Commit();
  // A collective failed: the step in flight dropped (or committed, when
  // applied), then the next membership joined and healed.
  void OnGroupBroken(const std::string& detail);
  // Joins `g` (null: left), handling groups that break while forming.
  void Enter(const ReplicaGroup* g);
  // The step the learning-rate schedule follows, and whether to go on.
  int64_t ScheduleStep() const;
  bool Remaining() const;
  int64_t TotalSamples() const {
    return spec.max_steps * spec.num_processes * spec.data.batch_size * spec.gradient_accumulation_steps;
  }

  TrainingState State() {
    TrainingState st;
    st.spec = &spec;
    st.rank = rank;
    st.world_size = world_size;
    st.process_group = pg;
    st.checkpoint_group = checkpoint_group;
    st.model = &model->model();
    st.fsdp = model->fsdp();
    st.ddp = model->ddp();
    st.optimizer = &model->optimizer();
    st.loader = data.train.get();
    st.step = step;
    return st;
  }

  at::Tensor Loss(const at::Tensor& output, const at::Tensor& targets) const;
  // The step's numbers and timings to the sink.
  void Record(StepSample sample, const ModelMemory& mem);
};

void Trainer::Impl::Build(int32_t rank_in, int32_t world_in, const DistContext& dist, MetricsSink* sink_in,
                          TrainerControl* control) {
  Impl& s = *this;
  const int32_t rank = rank_in;
  const int32_t world_size = world_in;
  s.rank = rank;
  s.world_size = world_size;
  s.requests = control;
  s.pg = dist.process_group;
  s.flight = dist.flight_recorder;
  s.checkpoint_group = dist.checkpoint_group;
  s.sink = sink_in;
  MetricsSink* sink = sink_in;
  if (world_size > 1 && !s.pg) throw std::invalid_argument("a process group is required when world_size > 1");
  s.device = dist.device ? *dist.device : RankDevice(s.spec.device);
  UseDevice(s.device);
  s.peak_flops = PeakFlops(DeviceName(s.device), s.spec.mixed_precision);
  s.model = MakeParallelModel(s.spec, world_size, s.device, dist);
  // The control word rides DDP's shared memory when it has it.
  DirectCollectives* control_shm = s.model->ddp() && dist.shm != nullptr ? dist.shm : dist.control_shm;
  s.control = std::make_unique<StepControl>(dist.control_group ? dist.control_group : s.pg, control_shm, control);
  s.recorder = std::make_unique<StepRecorder>(rank, s.device, s.model->ddp(), s.model->fsdp());
  Impl* impl = this;
  s.checkpoints = std::make_unique<Checkpointer>(
      s.spec, rank, s.pg, dist.snapshot_dir, sink, [impl] { return impl->State(); }, s.flight);
  std::vector<int64_t> sample_shape = s.model->model().sample_shape();
  if (sample_shape.empty()) sample_shape = {s.spec.model.input_size};  // torchscript: flat inputs
  MetricsSink* notes = sink;
  // A replica's data is the launch rank's (its held-out share), its
  // training batches the global cursor's.
  const int32_t data_rank = s.replica ? s.replica->launch_rank() : rank;
  const int32_t data_world = s.replica ? s.spec.num_processes : world_size;
  s.data = MakeJobData(s.spec, sample_shape, data_rank, data_world, [notes](const std::string& text) {
    if (notes != nullptr) notes->OnNote(text);
  });
  if (s.replica) {
    s.data.train->UseGlobalCursor(TotalSamples());
    s.data.train->SetMembers(rank, world_size);
  }
  if (s.spec.mixed_precision == MixedPrecision::kFp16) {
    s.scaler = std::make_unique<LossScaler>();
    s.checkpoints->Register("loss_scaler", s.scaler.get());
  }
}

Trainer::Trainer(JobSpec spec, int32_t rank, int32_t world_size, DistContext dist, MetricsSink* sink,
                 TrainerControl* control)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.spec = std::move(spec);
  s.Build(rank, world_size, dist, sink, control);
  s.step = s.checkpoints->AgreeAndRestore();
}

Trainer::Trainer(JobSpec spec, const ReplicaOptions& replica, DistContext dist, MetricsSink* sink,
                 TrainerControl* control)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.spec = std::move(spec);
  const bool fsdp = s.spec.distributed_type == DistributedType::kFsdp;
  if (!s.spec.replicas() || (s.spec.distributed_type != DistributedType::kDdp && !fsdp)) {
    throw std::invalid_argument("a replica trainer needs fault_tolerance.mode replica and DDP or FSDP");
  }
  if (control == nullptr) throw std::invalid_argument("a replica trainer needs a TrainerControl (memberships)");
  ReplicaOptions options = replica;
  options.shared_memory = SharedMemoryAllowed(s.spec);
  options.fsdp_unit = fsdp ? s.spec.ranks_per_replica() : 0;
  s.replica = std::make_unique<ReplicaMembership>(options, &control->memberships(), dist.flight_recorder);
  const ReplicaGroup& g = s.replica->JoinFirst();
  DistContext d = g.context();
  d.device = dist.device;
  d.snapshot_dir = dist.snapshot_dir;
  d.flight_recorder = dist.flight_recorder;
  s.Build(g.rank(), g.size(), d, sink, control);
  // Epoch 1 starts the job on every rank; a later one joins running members.
  s.fresh_replacement = g.membership().epoch > 1;
  if (!s.fresh_replacement) s.step = s.checkpoints->AgreeAndRestore();
  s.Heal();
}

void Trainer::Impl::Bind(const ReplicaGroup& g) {
  const DistContext d = g.context();
  rank = g.rank();
  world_size = g.size();
  pg = d.process_group;
  model->Rebind(d);
  // The control word rides the epoch's shared memory when it has it.
  control = std::make_unique<StepControl>(d.control_group ? d.control_group : pg, d.shm, requests);
  checkpoints->Rebind(rank, pg);
  recorder = std::make_unique<StepRecorder>(rank, device, model->ddp(), model->fsdp());
  // The loader's members change in Heal, once a pending step is settled
  // (SetMembers drops the reads of a step not committed).
}

void Trainer::Impl::Apply(double lr, bool finite, ModelMemory* mem) {
  model->OptimizerStep(lr, finite);
  if (scaler) scaler->Update(finite);
  applied = replica != nullptr;
  // Steady state: after the step, before gradients are released.
  if (mem != nullptr && sink != nullptr) *mem = model->Memory();
  model->ReleaseGradients();
}

void Trainer::Impl::Settle() {
  if (model->fsdp() == nullptr) return;
  const int32_t size = pg->getSize();
  at::Tensor mine = at::tensor({fresh_replacement ? int64_t{-1} : step}, at::kLong);
  std::vector<at::Tensor> all(static_cast<size_t>(size));
  for (at::Tensor& t : all) t = at::empty({1}, at::kLong);
  std::vector<std::vector<at::Tensor>> out = {all};
  std::vector<at::Tensor> in = {mine};
  pg->allgather(out, in)->wait();
  if (!pending) return;
  int64_t highest = -1;
  for (const at::Tensor& t : out[0]) highest = std::max(highest, t.item<int64_t>());
  const Pending p = *pending;
  pending.reset();
  if (highest == step + 1) {
    // A member applied it: every member's gradients were complete.
    Apply(p.lr, p.finite, nullptr);
    applied = false;
    ++step;
    data.train->CommitReads();
    replica->CommittedEarlier(p.epoch, step, data.train->cursor(), data.train->committed_positions(),
                              model->Parameters());
    log::Info("rank {}: applied step {}, whose agreement it missed: a member committed it", replica->launch_rank(),
              step);
  } else {
    data.train->RollbackReads();
    model->ReleaseGradients();
  }
}

void Trainer::Impl::Heal() {
  SetPhase(flight, "heal", step);
  Settle();
  data.train->SetMembers(rank, world_size);
  // Over the ranks that hold this rank's state (FSDP: its shard in every
  // replica); they all agree on the same step and cursor, since a replica's
  // ranks come and go together.
  const ReplicaGroup& g = *replica->group();
  const HealResult r =
      trainyard::Heal(checkpoints->Current(), g.heal_group(), fresh_replacement ? -1 : step, data.train->cursor());
  fresh_replacement = false;
  checkpoints->AdoptNumbering(g.SourceInWorld(r.source));
  step = r.step;
  data.train->SetCursor(r.cursor);
  replica->Healed(r);
}

void Trainer::Impl::Unbind() {
  model->Rebind(DistContext{});
  recorder = std::make_unique<StepRecorder>(rank, device, nullptr, nullptr);
  checkpoints->Rebind(rank, nullptr);
  control.reset();
  pg.reset();
  replica->Drop();
}

void Trainer::Impl::Commit() {
  applied = false;
  data.train->CommitReads();
  replica->Committed(step, data.train->cursor(), data.train->committed_positions(), model->Parameters());
}

void Trainer::Impl::Enter(const ReplicaGroup* g) {
  while (g != nullptr) {
    try {
      Bind(*g);
      Heal();
      return;
    } catch (const std::exception& e) {
      if (!IsGroupFailure(e)) throw;
      Unbind();
      g = replica->JoinNewer(e.what(), step);
    }
  }
  left = true;
}

void Trainer::Impl::OnGroupBroken(const std::string& detail) {
  // A step whose optimizer step was applied had its gradients from every
  // member: it is committed. Otherwise it never happened here.
  if (applied) {
    ++step;
    Commit();
  }
  if (!pending) {  // a pending step is settled by the next membership
    data.train->RollbackReads();
    model->ReleaseGradients();
  }
  Unbind();
  // JoinNewer forms the next membership's groups, and the one after when
  // those break while forming.
  Enter(replica->JoinNewer(detail, step));
}

int64_t Trainer::Impl::ScheduleStep() const {
  if (!replica) return step;
  return data.train->cursor() / (int64_t{spec.num_processes} * spec.data.batch_size * spec.gradient_accumulation_steps);
}

bool Trainer::Impl::Remaining() const {
  return replica ? data.train->cursor() < TotalSamples() : step < spec.max_steps;
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

Model& Trainer::model() { return impl_->model->model(); }
ParallelModel& Trainer::parallel_model() { return *impl_->model; }
DistributedDataParallel* Trainer::ddp() { return impl_->model->ddp(); }
FullyShardedModel* Trainer::fsdp() { return impl_->model->fsdp(); }
torch::optim::Optimizer& Trainer::optimizer() { return impl_->model->optimizer(); }
Trainer::MemoryBytes Trainer::Memory() const { return impl_->model->Memory(); }
int64_t Trainer::step() const { return impl_->step; }

at::Tensor Trainer::Impl::Loss(const at::Tensor& output, const at::Tensor& targets) const {
  at::Tensor out = output.to(at::kFloat);
  if (spec.loss == LossKind::kMse) {
    // Regression on the class: the one-hot vector of the target.
    at::Tensor want =
        targets.dim() == out.dim() ? targets.to(at::kFloat) : torch::one_hot(targets, out.size(-1)).to(at::kFloat);
    return torch::mse_loss(out, want);
  }
  // [B, C] logits with [B] targets, or [B, T, V] with [B, T] (language models).
  return torch::nn::functional::cross_entropy(out.reshape({-1, out.size(-1)}), targets.reshape({-1}));
}

void Trainer::Impl::Record(StepSample sample, const ModelMemory& mem) {
  StepMetrics& n = sample.numbers;
  n.param_bytes = mem.params;
  n.grad_bytes = mem.grads;
  n.optimizer_bytes = mem.optimizer;
  // The backward pass costs twice the forward.
  n.model_flops = 3 * std::max(0.0, model->forward_flops_per_sample()) * static_cast<double>(n.samples);
  n.peak_flops = peak_flops;
  sink->OnStep(recorder->Record(sample));
}

double Trainer::Step() {
  Impl& s = *impl_;
  const auto t0 = Clock::now();
  s.control->Start(s.checkpoints->PeriodicType(), s.checkpoints->progress());
  const int accum = s.spec.gradient_accumulation_steps;
  StepSample sample;
  double loss_sum = 0;
  for (int micro = 0; micro < accum; ++micro) {
    SetPhase(s.flight, "data", s.step);
    const auto d0 = Clock::now();
    Batch batch = s.data.train->Next();
    if (s.device.is_cuda()) batch = batch.To(s.device);
    sample.data += Clock::now() - d0;
    sample.numbers.samples += batch.inputs.size(0);
    // Gradients are communicated on the last micro-batch only.
    const bool sync = micro + 1 == accum;
    SetPhase(s.flight, "forward", s.step);
    const auto f0 = Clock::now();
    const at::Tensor output = s.model->Forward(batch.inputs, sync);
    const at::Tensor loss = s.Loss(output, batch.targets);
    loss_sum += loss.item<double>();
    sample.forward += Clock::now() - f0;
    at::Tensor scaled = accum > 1 ? loss / accum : loss;
    if (s.scaler) scaled = scaled * s.scaler->scale();
    SetPhase(s.flight, "backward", s.step);
    s.model->Backward(scaled, output, sync);
  }
  SetPhase(s.flight, "optimizer", s.step);
  const bool finite = !s.scaler || s.scaler->UnscaleAndCheck(s.model->Gradients(), s.pg);
  const double grad_norm = finite ? s.model->ClipGradients(s.spec.max_grad_norm, s.spec.clip_grad_value) : std::nan("");
  const auto t2 = Clock::now();
  const double lr = s.spec.optimizer.lr * LearningRateFactor(s.spec.scheduler, s.ScheduleStep(), s.spec.max_steps);
  ModelMemory mem;
  if (s.replica != nullptr && s.model->fsdp() != nullptr) {
    // FSDP replicas commit in two phases (Impl::pending): the step is
    // applied once every member says its synchronization succeeded.
    s.pending = Impl::Pending{lr, finite, s.replica->epoch()};
    SetPhase(s.flight, "all synchronized", s.step);
    at::Tensor done = at::ones({1}, at::kFloat);
    std::vector<at::Tensor> v = {done};
    s.pg->allreduce(v)->wait();
    s.pending.reset();
  }
  s.Apply(lr, finite, &mem);
  sample.optimizer = Clock::now() - t2;
  SetPhase(s.flight, "step agreement", s.step);
  const StepAgreement agreed = s.control->Finish();
  s.checkpoints->Advance(agreed.save.written, agreed.save.failed_rank);
  sample.total = Clock::now() - t0;
  ++s.step;
  s.agreed_epoch = agreed.membership_epoch;
  // Replica mode: evaluation follows the fault-free step, as the schedule
  // does (a step of fewer members trains fewer samples).
  const int64_t schedule_before = s.ScheduleStep();
  if (s.replica) s.Commit();
  const int64_t every = s.spec.eval_every_steps;
  const bool eval_due = s.data.eval && every > 0 &&
                        (s.replica ? s.ScheduleStep() / every > schedule_before / every : s.step % every == 0);
  const double eval_loss = eval_due ? Evaluate() : std::nan("");
  const double loss_value = loss_sum / accum;
  if (s.sink != nullptr) {
    StepMetrics& n = sample.numbers;
    n.step = s.step;
    n.loss = loss_value;
    n.learning_rate = lr;
    n.eval_loss = eval_loss;
    n.grad_norm = grad_norm;
    sample.compute = t2 - t0 - sample.data;
    s.Record(sample, mem);
  }
  // At the step boundary every rank agreed on: the checkpoints it triggers.
  s.boundary = s.checkpoints->AtStepBoundary(agreed, s.step);
  SetPhase(s.flight, "between steps", s.step);
  return loss_value;
}

double Trainer::Evaluate() {
  Impl& s = *impl_;
  if (!s.data.eval) throw std::logic_error("Evaluate() needs eval_every_steps > 0");
  torch::NoGradGuard no_grad;
  s.model->Train(false);
  s.data.eval->Seek(0, 0);  // the same held-out batches every time
  SetPhase(s.flight, "eval", s.step);
  double sum = 0;
  for (int32_t b = 0; b < s.spec.eval_batches; ++b) {
    Batch batch = s.data.eval->Next();
    if (s.device.is_cuda()) batch = batch.To(s.device);
    sum += s.Loss(s.model->EvalForward(batch.inputs), batch.targets).item<double>();
  }
  s.model->EndEvaluation();
  s.model->Train(true);
  at::Tensor mean = at::full({1}, sum / s.spec.eval_batches, at::kDouble);
  if (s.pg) {
    std::vector<at::Tensor> t = {mean};
    s.pg->allreduce(t)->wait();
    mean.div_(s.world_size);
  }
  return mean.item<double>();
}

std::optional<double> Trainer::ReplicaStep() {
  Impl& s = *impl_;
  try {
    const double loss = Step();
    if (s.replica->Pending(s.agreed_epoch)) {
      // Every member switches after this step: the same agreed epoch.
      s.Unbind();
      s.Enter(s.replica->JoinAgreed(s.agreed_epoch, s.step));
    }
    return loss;
  } catch (const std::exception& e) {
    if (!IsGroupFailure(e)) throw;
    const auto* ce = dynamic_cast<const c10::Error*>(&e);
    s.OnGroupBroken(ce != nullptr ? ce->what_without_backtrace() : e.what());
    return std::nullopt;
  }
}

TrainResult Trainer::Run() {
  Impl& s = *impl_;
  s.model->Train(true);
  TrainResult result;
  result.start_step = s.step;
  if (!s.Remaining() && s.step > 0 && s.rank == 0 && s.sink != nullptr) {
    s.sink->OnNote(absl::StrCat("already at step ", s.step, " (max_steps ", s.spec.max_steps, ", resumed from ",
                                s.checkpoints->resumed_from(), "): nothing to train"));
  }
  while (s.Remaining()) {
    const std::optional<double> stepped = s.replica ? ReplicaStep() : Step();
    if (s.left) {
      result.stopped = true;
      break;
    }
    if (!stepped) continue;
    const double loss = *stepped;
    if (s.step == result.start_step + 1) result.first_loss = loss;
    result.last_loss = loss;
    if (s.boundary.stop) {
      result.stopped = true;
      result.preempted = s.boundary.preempted;
      if (s.boundary.preempted) result.final_checkpoint = s.boundary.preemption_checkpoint;
      break;
    }
  }
  result.final_step = s.step;
  SetPhase(s.flight, "final checkpoint", s.step);
  s.checkpoints->Drain();
  if (!result.stopped && s.spec.checkpoint.save_final && !s.spec.checkpoint.project_dir.empty()) {
    result.final_checkpoint = s.checkpoints->SaveFinal(s.step);
  }
  // Every rank is past its last snapshot (each is collective); a replica
  // that left is not the last.
  if (!s.left) s.checkpoints->RemoveSnapshots();
  if (s.replica && !s.left) {
    // Nobody tears down the group under a member still finishing; a member
    // lost now loses nothing.
    try {
      s.pg->barrier()->wait();
    } catch (const std::exception& e) {
      if (!IsGroupFailure(e)) throw;
    }
  }
  return result;
}

}  // namespace trainyard
