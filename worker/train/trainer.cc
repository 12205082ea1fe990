#include "worker/train/trainer.h"

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "worker/base/device.h"
#include "worker/base/flight_recorder.h"
#include "worker/collectives/dist_setup.h"
#include "worker/data/data.h"
#include "worker/data/data_loader.h"
#include "worker/data/job_data.h"
#include "worker/models/attention_backend.h"
#include "worker/models/chunked_loss.h"
#include "worker/models/model_flops.h"
#include "worker/models/models.h"
#include "worker/models/optimizer.h"
#include "worker/train/checkpointer.h"
#include "worker/train/loss_scaler.h"
#include "worker/train/step_control.h"
#include "worker/train/step_engine.h"
#include "worker/train/step_recorder.h"
#include "worker/train/trainer_parts.h"

namespace trainyard {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

struct Trainer::Impl : TrainerParts {
  std::unique_ptr<StepGuard> guard;    // the fault-tolerance mode's (worker/step_guard.h)
  Checkpointer::Boundary boundary;     // of the last step
  bool attention_noted = false;        // the attention kernel told in the job's events
  std::unique_ptr<StepEngine> engine;  // the step's device work: eager or captured

  // The parts, on the guard's seat (collective only through DDP's initial
  // broadcast).
  void Build(const TrainerSeat& seat, MetricsSink* sink_in, TrainerControl* control_in);
  // The step's numbers and timings to the sink.
  void Record(StepSample sample, const ModelMemory& mem);
};

void Trainer::Impl::Build(const TrainerSeat& seat, MetricsSink* sink_in, TrainerControl* control_in) {
  const DistContext& dist = seat.dist;
  rank = seat.rank;
  world_size = seat.world_size;
  requests = control_in;
  pg = dist.process_group;
  flight = dist.flight_recorder;
  checkpoint_group = dist.checkpoint_group;
  sink = sink_in;
  if (world_size > 1 && !pg) throw std::invalid_argument("a process group is required when world_size > 1");
  device = dist.device ? *dist.device : RankDevice(spec.device);
  UseDevice(device);
  peak_flops = PeakFlops(DeviceName(device), spec.mixed_precision);
  model = MakeParallelModel(spec, world_size, device, dist);
  // The control word rides DDP's shared memory when it has it.
  DirectCollectives* control_shm = model->ddp() && dist.shm != nullptr ? dist.shm : dist.control_shm;
  control = std::make_unique<StepControl>(dist.control_group ? dist.control_group : pg, control_shm, requests);
  recorder = std::make_unique<StepRecorder>(rank, device, model->ddp(), model->fsdp());
  Impl* impl = this;
  checkpoints = std::make_unique<Checkpointer>(
      spec, rank, pg, dist.snapshot_dir, sink, [impl] { return impl->State(); }, flight);
  std::vector<int64_t> sample_shape = model->model().sample_shape();
  if (sample_shape.empty()) sample_shape = {spec.model.input_size};  // torchscript: flat inputs
  MetricsSink* notes = sink;
  data = MakeJobData(spec, sample_shape, seat.data_rank, seat.data_world, [notes](const std::string& text) {
    if (notes != nullptr) notes->OnNote(text);
  });
  if (spec.mixed_precision == MixedPrecision::kFp16) {
    scaler = std::make_unique<LossScaler>();
    checkpoints->Register("loss_scaler", scaler.get());
  }
  engine = MakeStepEngine(this, [this](const std::string& text) {
    if (rank == 0 && sink != nullptr) sink->OnNote(text);
  });
}

Trainer::Trainer(JobSpec spec, int32_t rank, int32_t world_size, DistContext dist, MetricsSink* sink,
                 TrainerControl* control)
    : Trainer(std::move(spec), MakeWholeGroupGuard(rank, world_size, std::move(dist)), sink, control) {}

Trainer::Trainer(JobSpec spec, std::unique_ptr<StepGuard> guard, MetricsSink* sink, TrainerControl* control)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.spec = std::move(spec);
  s.guard = std::move(guard);
  s.Build(s.guard->Seat(), sink, control);
  s.guard->Start(&s);
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

void Trainer::Impl::Record(StepSample sample, const ModelMemory& mem) {
  StepMetrics& n = sample.numbers;
  n.param_bytes = mem.params;
  n.grad_bytes = mem.grads;
  n.optimizer_bytes = mem.optimizer;
  // The backward pass costs twice the forward.
  n.model_flops = 3 * std::max(0.0, model->forward_flops_per_sample()) * static_cast<double>(n.samples);
  n.peak_flops = peak_flops;
  n.attention_backend = model->model().attention_backend();
  if (n.attention_backend >= 0 && !attention_noted && rank == 0) {
    attention_noted = true;
    sink->OnNote(absl::StrCat("attention: scaled_dot_product_attention runs ATen's ",
                              SdpaBackendName(n.attention_backend), " kernel (fused.attention ",
                              AttentionBackendName(spec.fused.attention), ")"));
  }
  sink->OnStep(recorder->Record(sample));
}

double Trainer::Step() {
  Impl& s = *impl_;
  const auto t0 = Clock::now();
  // The step of a fault-free run: the schedule and evaluation follow it.
  const int64_t position = s.guard->Position();
  s.control->Start(s.checkpoints->PeriodicType(), s.checkpoints->progress(), s.guard->Proposal());
  const int accum = s.spec.gradient_accumulation_steps;
  StepSample sample;
  SetPhase(s.flight, "data", s.step);
  const auto d0 = Clock::now();
  std::vector<Batch> batches;
  batches.reserve(static_cast<size_t>(accum));
  for (int micro = 0; micro < accum; ++micro) {
    batches.push_back(s.data.train->Next());
    if (s.device.is_cuda()) batches.back() = batches.back().To(s.device);
    sample.numbers.samples += batches.back().inputs.size(0);
  }
  sample.data = Clock::now() - d0;
  const double lr = s.spec.optimizer.lr * LearningRateFactor(s.spec.scheduler, position, s.spec.max_steps);
  ModelMemory mem;
  StepGuard* guard = s.guard.get();
  Impl* impl = &s;
  const StepWork work = s.engine->Run(
      batches, lr,
      [&](double step_lr, bool finite) {
        SetPhase(impl->flight, "optimizer", impl->step);
        guard->BeforeApply(step_lr, finite);
      },
      &sample, &mem);
  SetPhase(s.flight, "step agreement", s.step);
  const StepAgreement agreed = s.control->Finish();
  s.checkpoints->Advance(agreed.save.written, agreed.save.failed_rank);
  sample.total = Clock::now() - t0;
  ++s.step;
  s.guard->Commit(agreed.proposal);
  const int64_t every = s.spec.eval_every_steps;
  const bool eval_due = s.data.eval && every > 0 && s.guard->Position() / every > position / every;
  const double eval_loss = eval_due ? Evaluate() : std::nan("");
  const double loss_value = work.loss_sum / accum;
  if (s.sink != nullptr) {
    StepMetrics& n = sample.numbers;
    n.step = s.step;
    n.loss = loss_value;
    n.learning_rate = lr;
    n.eval_loss = eval_loss;
    n.grad_norm = work.grad_norm;
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

TrainResult Trainer::Run() {
  Impl& s = *impl_;
  s.model->Train(true);
  TrainResult result;
  result.start_step = s.step;
  if (s.guard->Position() >= s.spec.max_steps && s.step > 0 && s.rank == 0 && s.sink != nullptr) {
    s.sink->OnNote(absl::StrCat("already at step ", s.step, " (max_steps ", s.spec.max_steps, ", resumed from ",
                                s.checkpoints->resumed_from(), "): nothing to train"));
  }
  while (s.guard->Next()) {
    std::optional<double> stepped;
    try {
      stepped = Step();
    } catch (const std::exception& e) {
      if (!s.guard->Recover(e)) throw;
    }
    if (!stepped) continue;  // dropped (Next ends the loop once this rank left)
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
  result.stopped = result.stopped || s.guard->left();
  result.final_step = s.step;
  SetPhase(s.flight, "final checkpoint", s.step);
  s.checkpoints->Drain();
  if (!result.stopped && s.spec.checkpoint.save_final && !s.spec.checkpoint.project_dir.empty()) {
    result.final_checkpoint = s.checkpoints->SaveFinal(s.step);
  }
  // Every rank is past its last snapshot (each is collective); a rank that
  // left is not the last.
  if (!s.guard->left()) s.checkpoints->RemoveSnapshots();
  s.guard->Finish();
  return result;
}

}  // namespace trainyard
