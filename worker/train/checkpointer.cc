#include "worker/train/checkpointer.h"

#include <torch/torch.h>
#include <unistd.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "common/checkpoint_dir.h"
#include "common/log.h"
#include "worker/base/flight_recorder.h"
#include "worker/checkpoint/snapshots.h"

namespace trainyard {
namespace {

// Rank 0's string on every rank.
void BroadcastText(const c10::intrusive_ptr<c10d::ProcessGroup>& pg, std::string* text) {
  at::Tensor len = at::full({1}, static_cast<int64_t>(text->size()), at::kLong);
  std::vector<at::Tensor> v = {len};
  pg->broadcast(v)->wait();
  at::Tensor bytes = at::zeros({std::max<int64_t>(1, len.item<int64_t>())}, at::kByte);
  std::memcpy(bytes.data_ptr(), text->data(), text->size() <= static_cast<size_t>(bytes.numel()) ? text->size() : 0);
  std::vector<at::Tensor> b = {bytes};
  pg->broadcast(b)->wait();
  text->assign(static_cast<const char*>(bytes.data_ptr()), static_cast<size_t>(len.item<int64_t>()));
}

// The step a complete checkpoint directory was taken at; -1 when unknown.
int64_t StepOfCheckpoint(const std::string& path) {
  if (path.empty()) return -1;
  auto info = CheckCheckpoint(path, /*verify=*/false);
  if (!info.ok()) return -1;
  auto meta = nlohmann::json::parse(info->metadata_json, nullptr, false);
  return meta.is_object() && meta.contains("step") && meta["step"].is_number_integer() ? meta["step"].get<int64_t>()
                                                                                       : -1;
}

}  // namespace

Checkpointer::Checkpointer(const JobSpec& spec, int32_t rank, c10::intrusive_ptr<c10d::ProcessGroup> pg,
                           const std::string& snapshot_dir, MetricsSink* sink, std::function<TrainingState()> state,
                           FlightRecorder* flight)
    : spec_(spec),
      rank_(rank),
      pg_(std::move(pg)),
      sink_(sink),
      state_(std::move(state)),
      flight_(flight),
      background_(std::make_unique<AsyncCheckpointer>(rank)),
      snapshots_(std::make_unique<Snapshots>(snapshot_dir, spec.checkpoint.snapshot_every_steps)) {}

Checkpointer::~Checkpointer() = default;

void Checkpointer::Rebind(int32_t rank, c10::intrusive_ptr<c10d::ProcessGroup> pg) {
  rank_ = rank;
  pg_ = std::move(pg);
  background_ = std::make_unique<AsyncCheckpointer>(rank);
}

void Checkpointer::AdoptNumbering(int32_t src) {
  if (!pg_) return;
  int64_t tag = 0;
  if (!staging_tag_.empty()) tag = std::stoll(staging_tag_);
  at::Tensor h = at::tensor(std::vector<int64_t>{next_index_, tag, next_snapshot_}, at::kLong);
  std::vector<at::Tensor> v = {h};
  c10d::BroadcastOptions opts;
  opts.rootRank = src;
  pg_->broadcast(v, opts)->wait();
  next_index_ = h[0].item<int64_t>();
  staging_tag_ = std::to_string(h[1].item<int64_t>());
  next_snapshot_ = h[2].item<int64_t>();
}

TrainingState Checkpointer::State() const {
  TrainingState st = state_();
  st.extra = extra_;
  return st;
}

void Checkpointer::Register(const std::string& name, Checkpointable* state) {
  if (name.empty() || name.find('.') != std::string::npos) {
    throw std::invalid_argument("checkpointable state name '" + name + "' must be non-empty and without '.'");
  }
  extra_[name] = state;
}

CheckpointType Checkpointer::PeriodicType() const {
  if (spec_.checkpoint.type != CheckpointType::kAuto) return spec_.checkpoint.type;
  return spec_.distributed_type == DistributedType::kFsdp &&
                 spec_.fsdp.state_dict_type == StateDictType::kShardedStateDict
             ? CheckpointType::kSharded
             : CheckpointType::kFull;
}

void Checkpointer::Report(const CheckpointEvent& ev) {
  if (ev.ok) {
    last_step_ = ev.step;
    last_type_ = ev.type;
    last_path_ = ev.path;
  } else {
    log::Warn("rank {}: {} checkpoint at step {} failed: {}", rank_, ev.trigger, ev.step, ev.error);
  }
  if (rank_ == 0 && sink_ != nullptr) sink_->OnCheckpoint(ev);
}

void Checkpointer::Advance(bool all_written, int32_t failed_rank) {
  if (auto ev = background_->Advance(all_written, failed_rank)) Report(*ev);
}

void Checkpointer::Drain() {
  if (std::optional<CheckpointEvent> ev = background_->Drain(State())) Report(*ev);
}

CheckpointEvent Checkpointer::Save(CheckpointType type, const std::string& trigger, int64_t request_id) {
  Drain();
  if (type == CheckpointType::kAuto) type = PeriodicType();
  CheckpointEvent ev;
  const TrainingState state = State();
  if (spec_.checkpoint.project_dir.empty()) {
    ev.error = "checkpoint.project_dir is not set";
    ev.step = state.step;
  } else {
    ev = SaveCheckpoint(state, type, {spec_.checkpoint.project_dir, next_index_++, staging_tag_});
  }
  ev.trigger = trigger;
  ev.request_id = request_id;
  Report(ev);
  return ev;
}

void Checkpointer::Start(CheckpointType type, const std::string& trigger, int64_t request_id) {
  if (!spec_.checkpoint.async || spec_.checkpoint.project_dir.empty()) {
    Save(type, trigger, request_id);
    return;
  }
  Drain();
  if (type == CheckpointType::kAuto) type = PeriodicType();
  std::optional<CheckpointEvent> failed = background_->Start(
      State(), type, {spec_.checkpoint.project_dir, next_index_++, staging_tag_}, trigger, request_id);
  if (failed) Report(*failed);
}

Checkpointer::Boundary Checkpointer::AtStepBoundary(const StepAgreement& agreed, int64_t step) {
  Boundary out;
  out.stop = agreed.stop;
  const bool periodic = spec_.checkpoint.every_steps > 0 && step % spec_.checkpoint.every_steps == 0;
  // Preemption, requested, then periodic.
  if (agreed.preempt || agreed.checkpoint || periodic) SetPhase(flight_, "checkpoint", step);
  if (agreed.preempt) {
    CheckpointEvent ev = Save(CheckpointType::kAuto, "preemption");
    out.preempted = true;
    out.preemption_checkpoint = ev.ok ? ev.path : "";
    out.stop = true;
  } else if (agreed.checkpoint && agreed.stop_after) {
    Save(*agreed.checkpoint, "cancel", agreed.request_id);
    out.stop = true;
  } else if (agreed.checkpoint) {
    Start(*agreed.checkpoint, "request", agreed.request_id);
  } else if (periodic) {
    Start(CheckpointType::kAuto, "periodic", 0);
  }
  if (!out.stop && SnapshotDue(step) && step < spec_.max_steps) {
    SetPhase(flight_, "snapshot", step);
    Snapshot();
  }
  return out;
}

std::string Checkpointer::SaveFinal(int64_t step) {
  Drain();
  if (last_step_ == step && last_type_ == CheckpointType::kFull) return last_path_;
  CheckpointEvent ev = Save(CheckpointType::kFull, "final");
  if (!ev.ok) throw std::runtime_error("final checkpoint failed: " + ev.error);
  return ev.path;
}

bool Checkpointer::SnapshotDue(int64_t step) const { return snapshots_->Due(step); }

void Checkpointer::Snapshot() {
  const CheckpointEvent ev = snapshots_->Take(State(), next_snapshot_++, staging_tag_);
  if (ev.ok) {
    snapshot_failing_ = false;
    return;
  }
  log::Warn("rank {}: snapshot at step {} failed: {}", rank_, ev.step, ev.error);
  // Said once each time snapshots start failing.
  if (!snapshot_failing_ && rank_ == 0 && sink_ != nullptr) {
    sink_->OnNote("in-memory snapshot at step " + std::to_string(ev.step) + " failed: " + ev.error);
  }
  snapshot_failing_ = true;
}

void Checkpointer::RemoveSnapshots() {
  if (rank_ == 0) snapshots_->RemoveAll();
}

ResumeInfo Checkpointer::Restore(const std::string& dir) {
  ResumeInfo info = LoadCheckpoint(State(), dir);
  next_index_ = std::max(next_index_, info.checkpoint_index + 1);
  return info;
}

int64_t Checkpointer::AgreeAndRestore() {
  // next index, staging tag, error, next snapshot index, resume from the snapshot
  int64_t header[5] = {0, static_cast<int64_t>(::getpid()), 0, 0, 0};
  std::string path_or_error, snapshot;
  const CheckpointSpec& c = spec_.checkpoint;
  if (rank_ == 0) {
    try {
      if (!c.project_dir.empty()) header[0] = CheckpointDir(c.project_dir).NextIndex();
      path_or_error = ResolveCheckpoint(c.project_dir, c.resume_from, &resume_notes_);
      if (snapshots_->enabled()) header[3] = CheckpointDir(snapshots_->dir()).NextIndex();
      if (c.resume_from == "latest") {
        std::vector<std::string> snapshot_notes;
        if (absl::Status own = snapshots_->Usable(); !own.ok()) {
          resume_notes_.push_back("in-memory snapshots ignored: " + std::string(own.message()));
        }
        snapshot = snapshots_->Newest(&snapshot_notes);
        const int64_t disk_step = StepOfCheckpoint(path_or_error), snapshot_step = StepOfCheckpoint(snapshot);
        if (!snapshot.empty() && snapshot_step > disk_step) {
          header[4] = 1;
        } else if (!snapshot.empty()) {
          resume_notes_.push_back("in-memory snapshot at step " + std::to_string(snapshot_step) +
                                  " is not newer than the checkpoint at step " + std::to_string(disk_step));
        }
      }
    } catch (const std::exception& e) {
      header[2] = 1;
      path_or_error = e.what();
    }
  }
  if (pg_) {
    at::Tensor h = at::tensor(std::vector<int64_t>(header, header + 5), at::kLong);
    std::vector<at::Tensor> v = {h};
    pg_->broadcast(v)->wait();
    for (int i = 0; i < 5; ++i) header[i] = h[i].item<int64_t>();
    BroadcastText(pg_, &path_or_error);
    BroadcastText(pg_, &snapshot);
  }
  if (header[2] != 0) throw std::runtime_error(path_or_error);
  next_index_ = header[0];
  staging_tag_ = std::to_string(header[1]);
  next_snapshot_ = header[3];
  if (header[4] != 0) {
    // Every rank must see the snapshot (ranks on other hosts do not).
    const bool visible = CheckCheckpoint(snapshot, /*verify=*/false).ok();
    at::Tensor all = at::full({1}, visible ? int64_t{1} : int64_t{0}, at::kLong);
    if (pg_) {
      std::vector<at::Tensor> v = {all};
      c10d::AllreduceOptions opts;
      opts.reduceOp = c10d::ReduceOp::MIN;
      pg_->allreduce(v, opts)->wait();
    }
    if (all.item<int64_t>() == 1) {
      resume_notes_.push_back("resuming from the in-memory snapshot at step " +
                              std::to_string(StepOfCheckpoint(snapshot)) + " (newer than " +
                              (path_or_error.empty() ? std::string("any checkpoint") : path_or_error) + ")");
      path_or_error = snapshot;
    } else {
      resume_notes_.push_back("the in-memory snapshot " + snapshot +
                              " is not on every rank's host; resuming from disk");
    }
  }
  int64_t step = 0;
  if (!path_or_error.empty()) {
    const int64_t next_index = next_index_;
    ResumeInfo info = Restore(path_or_error);
    if (path_or_error == snapshot) {
      next_index_ = next_index;  // disk numbering goes on
    } else if (info.full) {
      // A job resumed at max_steps saves no second final checkpoint of the same state.
      last_step_ = info.step;
      last_type_ = CheckpointType::kFull;
      last_path_ = path_or_error;
    }
    step = info.step;
    resumed_from_ = path_or_error;
    resume_notes_.insert(resume_notes_.end(), info.notes.begin(), info.notes.end());
  } else if (c.resume_from == "latest") {
    resume_notes_.push_back("resume_from latest: no complete checkpoint in " + c.project_dir + "; starting fresh");
  }
  // Fine-tuning starts from the given weights; a resumed job from its checkpoint.
  if (path_or_error.empty() && !spec_.model.init_from.empty()) {
    for (std::string& note : LoadInitialWeights(State(), spec_.model.init_from, spec_.model.init_from_strict,
                                                spec_.model.init_from_prefix)) {
      resume_notes_.push_back(std::move(note));
    }
    resume_notes_.push_back("initial weights from " + spec_.model.init_from);
  }
  return step;
}

}  // namespace trainyard
