// JobManager, people's side: submit, look up, list, cancel, checkpoint on
// request, resume and watch — and the checks a spec passes before it is
// queued (this server's launchers and resources, the paths it names).
#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/accelerate_config.h"
#include "common/checkpoint_dir.h"
#include "common/clock.h"
#include "common/paths.h"
#include "server/job_manager.h"
#include "spdlog/spdlog.h"

namespace trainyard {

absl::StatusOr<ActiveJob*> JobManager::FindActive(const std::string& id, const std::string& why_it_matters) {
  auto it = active_.find(id);
  if (it != active_.end()) return &it->second;
  auto rec = store_->Get(id);
  if (!rec.ok()) return rec.status();
  return absl::FailedPreconditionError(
      absl::StrCat("job ", id, " has ended (", JobStateName(rec->state), ")", why_it_matters));
}

absl::Status JobManager::CheckPaths(JobSpec& spec, const std::string& job_id) {
  CheckpointSpec& c = spec.checkpoint;
  if (c.project_dir.empty()) c.project_dir = absl::StrCat(options_.state_dir, "/jobs/", job_id);
  auto dir = ResolveUnderRoots(c.project_dir, options_.allowed_roots);
  if (!dir.ok())
    return absl::InvalidArgumentError(absl::StrCat("spec field 'checkpoint.project_dir': ", dir.status().message()));
  c.project_dir = *dir;
  // The files a job reads.
  for (auto [field, path] : {std::pair<const char*, std::string*>{"model.kind", &spec.model.path},
                             {"model.init_from", &spec.model.init_from},
                             {"data.kind", &spec.data.path},
                             {"data.eval_path", &spec.data.eval_path}}) {
    if (path->empty()) continue;
    auto resolved = ResolveUnderRoots(*path, options_.allowed_roots);
    if (!resolved.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("spec field '", field, "': ", resolved.status().message()));
    }
    *path = *resolved;
  }
  if (!c.resume_from.empty() && c.resume_from != "latest") {
    auto from = ResolveUnderRoots(c.resume_from, options_.allowed_roots);
    if (!from.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("spec field 'checkpoint.resume_from': ", from.status().message()));
    }
    c.resume_from = *from;
  }
  return absl::OkStatus();
}

absl::Status JobManager::CheckResources(const JobSpec& spec) {
  const LauncherKind kind = spec.launcher == LauncherKind::kDefault ? options_.default_launcher : spec.launcher;
  if (kind == LauncherKind::kExternal) return absl::OkStatus();
  auto it = launchers_.find(kind);
  if (it == launchers_.end() || it->second == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec field 'launcher': ", LauncherKindName(kind), " is not available on this server"));
  }
  if (auto s = it->second->Available(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("spec field 'launcher': ", s.message()));
  }
  if (kind != LauncherKind::kLocal) return absl::OkStatus();  // the cluster's scheduler decides
  if (spec.slurm.nodes > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec field 'slurm.nodes': ", spec.slurm.nodes,
                     " nodes need launcher slurm or external; the local launcher runs on one host"));
  }
  if (spec.device == Device::kCuda) {
    if (spec.num_processes > options_.gpus) {
      return absl::InvalidArgumentError(absl::StrCat(
          "spec field 'device': cuda needs one GPU per process (", spec.num_processes, "); this server has ",
          options_.gpus, options_.gpus == 0 ? " (no GPU found; --gpus N sets the count)" : " (--gpus)",
          ". device: cpu runs on CPU slots"));
    }
    return absl::OkStatus();
  }
  if (spec.num_processes > options_.slots) {
    return absl::InvalidArgumentError(absl::StrCat("spec field 'num_processes': ", spec.num_processes,
                                                   " exceeds this server's ", options_.slots,
                                                   " slots (start the server with --slots N to allow more)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<JobRecord> JobManager::Submit(const std::string& spec_text, const std::string& accelerate_config) {
  std::vector<std::string> warnings;
  auto spec = ParseJobSpecWithAccelerateConfig(spec_text, accelerate_config, options_.limits, &warnings);
  std::lock_guard<std::mutex> lock(mu_);
  if (!spec.ok()) {
    metrics_->CountRejected();
    return spec.status();
  }
  if (spec->launcher == LauncherKind::kDefault) spec->launcher = options_.default_launcher;
  if (auto s = CheckResources(*spec); !s.ok()) {
    metrics_->CountRejected();
    return s;
  }
  if (static_cast<int>(queue_.size()) >= options_.max_queued_jobs) {
    metrics_->CountRejected();
    return absl::ResourceExhaustedError(
        absl::StrCat("the queue already holds ", queue_.size(), " jobs (the limit); try again later"));
  }
  if (shut_down_) return absl::UnavailableError("the server is shutting down");

  const std::string new_id = NewJobId();
  if (auto s = CheckPaths(*spec, new_id); !s.ok()) {
    metrics_->CountRejected();
    return s;
  }
  ActiveJob job;
  job.spec = *spec;
  JobRecord& r = job.record;
  r.id = new_id;
  r.name = spec->name;
  r.state = JobState::kQueued;
  r.reason = "submitted";
  r.spec_json = JobSpecToJson(*spec);
  r.num_processes = spec->num_processes;
  r.max_steps = spec->max_steps;
  r.created_unix_millis = NowMillis();
  JobEvent event{r.created_unix_millis, JobState::kQueued, "submitted"};
  if (auto s = store_->Insert(r, event); !s.ok()) return s;
  for (const std::string& warning : warnings) {
    JobEvent note{r.created_unix_millis, JobState::kQueued, "accelerate config: " + warning};
    if (auto s = store_->Update(r, &note); !s.ok()) {
      spdlog::error("job {}: cannot persist event: {}", r.id, std::string(s.message()));
    }
    spdlog::info("job {}: {}", r.id, note.reason);
  }
  metrics_->CountSubmitted();
  counts_[JobState::kQueued]++;
  PublishCounts();
  std::string id = r.id;
  JobRecord copy = r;
  active_.emplace(id, std::move(job));
  queue_.push_back(id);
  spdlog::info("job {} ({}) queued: {} processes, {} steps", id, copy.name, copy.num_processes, copy.max_steps);
  TrySchedule();
  auto it = active_.find(id);
  return it == active_.end() ? copy : it->second.record;
}

absl::StatusOr<JobRecord> JobManager::Get(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = active_.find(id);
  if (it != active_.end()) return it->second.record;
  return store_->Get(id);
}

absl::StatusOr<std::vector<JobEvent>> JobManager::Events(const std::string& id) { return store_->Events(id); }

absl::StatusOr<JobManager::JobPage> JobManager::List(const std::set<JobState>& states, int page_size,
                                                     const std::string& page_token) {
  // The token is the last job's insertion number: "jobs-after-<n>".
  int64_t after = 0;
  if (!page_token.empty()) {
    constexpr std::string_view kPrefix = "jobs-after-";
    char* end = nullptr;
    const std::string number = page_token.substr(std::min(page_token.size(), kPrefix.size()));
    if (page_token.rfind(kPrefix, 0) != 0 || number.empty() ||
        (after = std::strtoll(number.c_str(), &end, 10), *end != '\0') || after < 0) {
      return absl::InvalidArgumentError("field 'page_token': not a token this server gave");
    }
  }
  const int size = page_size <= 0 ? kDefaultPageSize : std::min(page_size, kMaxPageSize);
  auto page = store_->ListPage(std::vector<JobState>(states.begin(), states.end()), after, size);
  if (!page.ok()) return page.status();
  std::lock_guard<std::mutex> lock(mu_);
  JobPage out;
  for (JobRecord& r : page->jobs) {
    auto it = active_.find(r.id);
    if (it != active_.end()) r = it->second.record;  // fresher than the store
    out.jobs.push_back(std::move(r));
  }
  if (page->more) out.next_page_token = absl::StrCat("jobs-after-", page->last);
  return out;
}

absl::StatusOr<JobRecord> JobManager::Cancel(const std::string& id, bool checkpoint) {
  std::lock_guard<std::mutex> lock(mu_);
  absl::StatusOr<ActiveJob*> found = FindActive(id, "");
  if (!found.ok()) return found.status();
  ActiveJob& job = **found;
  if (job.record.state == JobState::kQueued) {
    queue_.erase(std::remove(queue_.begin(), queue_.end(), id), queue_.end());
    Transition(job, JobState::kCancelled, "cancelled by user while queued");
    JobRecord out = job.record;
    Finish(id);
    return out;
  }
  auto rank0 = job.run.channels.find(0);
  if (checkpoint && !job.cancel_requested && job.record.state == JobState::kRunning &&
      rank0 != job.run.channels.end()) {
    job.cancel_requested = true;
    job.cancel_after_checkpoint = true;
    WorkerCommand cmd{WorkerCommand::Kind::kCheckpoint, "cancel --checkpoint"};
    cmd.request_id = next_request_id_++;
    cmd.stop_after = true;
    rank0->second->Push(cmd);
    AddEvent(job, absl::StrCat("cancel requested: checkpoint (request ", cmd.request_id, "), then stop"));
    return job.record;
  }
  if (!job.cancel_requested || job.cancel_after_checkpoint) {
    job.cancel_requested = true;
    job.cancel_after_checkpoint = false;
    spdlog::info("job {}: cancel requested; stopping {} ranks", id, job.record.num_processes);
    for (auto& [rank, ch] : job.run.channels) ch->Push({WorkerCommand::Kind::kStop, "cancelled by user"});
    StopGroup(job);
  }
  return job.record;
}

absl::StatusOr<int64_t> JobManager::RequestCheckpoint(const std::string& id, CheckpointType type) {
  std::lock_guard<std::mutex> lock(mu_);
  absl::StatusOr<ActiveJob*> found = FindActive(id, "; only a running job can checkpoint");
  if (!found.ok()) return found.status();
  ActiveJob& job = **found;
  auto rank0 = job.run.channels.find(0);
  if (job.record.state != JobState::kRunning || rank0 == job.run.channels.end() || job.cancel_requested) {
    return absl::FailedPreconditionError(absl::StrCat("job ", id, " is ", JobStateName(job.record.state),
                                                      job.cancel_requested ? " and being cancelled" : "",
                                                      "; only a running job can checkpoint"));
  }
  WorkerCommand cmd{WorkerCommand::Kind::kCheckpoint, "requested"};
  cmd.request_id = next_request_id_++;
  cmd.type = type;
  rank0->second->Push(cmd);
  spdlog::info("job {}: checkpoint requested (request {})", id, cmd.request_id);
  return cmd.request_id;
}

absl::StatusOr<CheckpointEvent> JobManager::WaitCheckpoint(const std::string& id, int64_t request_id,
                                                           std::chrono::system_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    auto r = checkpoint_results_.find(request_id);
    if (r != checkpoint_results_.end()) {
      CheckpointEvent e = r->second;
      checkpoint_results_.erase(r);
      return e;
    }
    if (!active_.count(id)) {
      return absl::AbortedError(
          absl::StrCat("job ", id, " ended before checkpoint request ", request_id, " completed"));
    }
    if (checkpoint_cv_.wait_until(lock, deadline) == std::cv_status::timeout &&
        std::chrono::system_clock::now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("checkpoint request ", request_id, " of job ", id,
                                                      " has not completed yet; see `trainctl checkpoints ", id, "`"));
    }
  }
}

absl::StatusOr<std::vector<CheckpointRecord>> JobManager::Checkpoints(const std::string& id) {
  auto rec = store_->Get(id);
  if (!rec.ok()) return rec.status();
  return store_->Checkpoints(id);
}

absl::StatusOr<JobRecord> JobManager::Resume(const std::string& id, const std::string& from, int32_t num_processes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (active_.count(id)) {
    return absl::FailedPreconditionError(absl::StrCat("job ", id, " has not ended (",
                                                      JobStateName(active_.at(id).record.state),
                                                      "); cancel it first, or checkpoint it while it runs"));
  }
  auto rec = store_->Get(id);
  if (!rec.ok()) return rec.status();
  if (shut_down_) return absl::UnavailableError("the server is shutting down");
  auto spec = ParseJobSpec(rec->spec_json, options_.limits);
  if (!spec.ok())
    return absl::FailedPreconditionError(absl::StrCat("stored spec no longer valid: ", spec.status().message()));
  if (num_processes < 0) {
    return absl::InvalidArgumentError(absl::StrCat("num_processes must be >= 1 (0: keep), got ", num_processes));
  }
  if (num_processes > 0) spec->num_processes = num_processes;
  if (auto s = ValidateJobSpec(*spec, options_.limits); !s.ok()) return s;
  if (auto s = CheckResources(*spec); !s.ok()) return s;
  spec->checkpoint.resume_from = from.empty() ? "latest" : from;
  if (auto s = CheckPaths(*spec, id); !s.ok()) return s;
  if (!from.empty()) {
    auto info = CheckCheckpoint(spec->checkpoint.resume_from, /*verify=*/false);
    if (!info.ok()) return absl::InvalidArgumentError(std::string(info.status().message()));
  }
  ActiveJob job;
  job.spec = *spec;
  job.record = *rec;
  JobRecord& r = job.record;
  r.spec_json = JobSpecToJson(*spec);
  r.num_processes = spec->num_processes;
  r.failed_rank = -1;
  r.ended_unix_millis = 0;
  active_.emplace(id, std::move(job));
  ActiveJob& added = active_.at(id);
  Transition(
      added, JobState::kQueued,
      absl::StrCat("resume requested from ", from.empty() ? "the latest checkpoint" : spec->checkpoint.resume_from,
                   " with ", spec->num_processes, " processes"));
  queue_.push_back(id);
  TrySchedule();
  auto it = active_.find(id);
  return it == active_.end() ? store_->Get(id) : absl::StatusOr<JobRecord>(it->second.record);
}

absl::StatusOr<std::shared_ptr<JobWatch>> JobManager::Watch(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto watch = std::make_shared<JobWatch>();
  auto it = active_.find(id);
  if (it == active_.end()) {
    auto rec = store_->Get(id);
    if (!rec.ok()) return rec.status();
    watch->Push({*rec, std::nullopt});
    watch->Close();
    return watch;
  }
  watch->Push({it->second.record, std::nullopt});
  it->second.watchers.push_back(watch);
  return watch;
}

absl::StatusOr<std::string> JobManager::LogPath(const std::string& id, int32_t rank) {
  auto rec = Get(id);
  if (!rec.ok()) return rec.status();
  if (rec->attempt == 0) {
    return absl::FailedPreconditionError(absl::StrCat("job ", id, " has not started yet: no logs"));
  }
  if (rank < 0 || rank >= rec->num_processes) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " is out of range: job ", id, " has ranks 0..", rec->num_processes - 1));
  }
  return absl::StrCat(LogDir(*rec, rec->attempt), "/rank-", rank, ".log");
}

}  // namespace trainyard
