#include "server/job_manager.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>

#include "absl/strings/str_format.h"
#include "common/accelerate_config.h"
#include "common/checkpoint_dir.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/clock.h"
#include "common/paths.h"
#include "common/placement.h"
#include "common/secrets.h"
#include "common/worker_outcome.h"
#include "server/restart_policy.h"
#include "spdlog/spdlog.h"

namespace trainyard {
namespace {}  // namespace

// ---- JobManager --------------------------------------------------------------

JobManager::JobManager(JobStore* store, Launcher* launcher, ServerMetrics* metrics, JobManagerOptions options)
    : store_(store),
      launcher_(launcher),
      metrics_(metrics),
      options_(std::move(options)),
      pool_(options_.slots, options_.gpus) {
  launchers_[LauncherKind::kLocal] = launcher;
  std::error_code ec;
  options_.state_dir = std::filesystem::absolute(options_.state_dir, ec).lexically_normal().string();
  if (options_.allowed_roots.empty()) {
    options_.allowed_roots = {options_.state_dir, std::filesystem::current_path(ec).string()};
  }
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

JobManager::~JobManager() = default;

void JobManager::set_coordinator_addr(const std::string& addr, const std::string& remote_addr) {
  std::lock_guard<std::mutex> lock(mu_);
  options_.coordinator_addr = addr;
  options_.remote_coordinator_addr = remote_addr.empty() ? addr : remote_addr;
}

int JobManager::free_slots() {
  std::lock_guard<std::mutex> lock(mu_);
  return pool_.free_slots();
}

int JobManager::free_gpus() {
  std::lock_guard<std::mutex> lock(mu_);
  return pool_.free_gpus();
}

void JobManager::RegisterLauncher(LauncherKind kind, Launcher* launcher) {
  std::lock_guard<std::mutex> lock(mu_);
  launchers_[kind] = launcher;
}

LauncherKind JobManager::KindOf(const ActiveJob& job) const {
  return job.spec.launcher == LauncherKind::kDefault ? options_.default_launcher : job.spec.launcher;
}

Launcher* JobManager::LauncherOf(const ActiveJob& job) {
  auto it = launchers_.find(KindOf(job));
  return it == launchers_.end() ? nullptr : it->second;
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

bool JobManager::Fits(const ActiveJob& job) const {
  if (KindOf(job) != LauncherKind::kLocal) return true;
  return pool_.Fits(job.spec.device == Device::kCuda ? ResourcePool::Kind::kGpus : ResourcePool::Kind::kSlots,
                    job.record.num_processes);
}

void JobManager::ReleaseResources(ActiveJob& job) { pool_.Release(&job.held); }

LaunchRequest JobManager::MakeLaunchRequest(const ActiveJob& job) const {
  const JobRecord& r = job.record;
  LaunchRequest req;
  req.job_id = r.id;
  req.attempt = r.attempt;
  req.world_size = r.num_processes;
  req.master_addr = job.master_addr;
  req.master_port = job.master_port;
  req.coordinator_addr =
      KindOf(job) == LauncherKind::kLocal ? options_.coordinator_addr : options_.remote_coordinator_addr;
  req.token = r.worker_token;
  req.log_dir = LogDir(r, r.attempt);
  req.threads_per_process = job.spec.threads_per_process;
  req.job_name = job.spec.name;
  req.cuda = job.spec.device == Device::kCuda;
  req.gpus = job.held.gpus;
  req.preemptible = job.spec.preemptible;
  req.preemption_grace_s = job.spec.preemption_grace_s;
  req.slurm = job.spec.slurm;
  return req;
}

absl::Status JobManager::Recover() {
  std::lock_guard<std::mutex> lock(mu_);
  auto jobs = store_->List(std::numeric_limits<int>::max());
  if (!jobs.ok()) return jobs.status();
  for (JobRecord& rec : *jobs) {
    if (IsTerminal(rec.state)) {
      counts_[rec.state]++;
      continue;
    }
    auto spec = ParseJobSpec(rec.spec_json, options_.limits);
    ActiveJob job;
    job.record = rec;
    if (!spec.ok()) {
      counts_[rec.state]++;
      Transition(job, JobState::kFailed, absl::StrCat("stored spec no longer valid: ", spec.status().message()));
      continue;
    }
    job.spec = *spec;
    counts_[rec.state]++;
    if (rec.state == JobState::kQueued) {
      active_.emplace(rec.id, std::move(job));
      queue_.push_back(rec.id);
    } else {
      // Its workers may still be training: wait for them to reattach.
      const LauncherKind kind = KindOf(job);
      if (kind == LauncherKind::kLocal) {
        // Not this process's children: followed through /proc.
        job.adopted = true;
        // Which GPUs it held is not stored: it holds as many.
        job.held = pool_.Take(job.spec.device == Device::kCuda ? ResourcePool::Kind::kGpus : ResourcePool::Kind::kSlots,
                              rec.num_processes, /*partial=*/job.spec.device == Device::kCuda);
      } else if (kind == LauncherKind::kSlurm) {
        // The Slurm job is found by name and followed like a new one.
        if (Launcher* l = LauncherOf(job)) l->Adopt(MakeLaunchRequest(job));
      }
      job.reattach_deadline =
          std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                 std::chrono::duration<double>(job.spec.reattach_timeout_s));
      job.last_progress = std::chrono::steady_clock::now();
      job.first_start = job.last_progress;
      const std::string id = rec.id;
      active_.emplace(id, std::move(job));
      Transition(active_.at(id), JobState::kRecovering,
                 absl::StrCat("the coordinator restarted; waiting up to ", active_.at(id).spec.reattach_timeout_s,
                              " s for the workers of attempt ", rec.attempt, " to reattach"));
    }
  }
  PublishCounts();
  TrySchedule();
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
  auto it = active_.find(id);
  if (it == active_.end()) {
    auto rec = store_->Get(id);
    if (!rec.ok()) return rec.status();
    return absl::FailedPreconditionError(
        absl::StrCat("job ", id, " has already ended (", JobStateName(rec->state), ")"));
  }
  ActiveJob& job = it->second;
  if (job.record.state == JobState::kQueued) {
    queue_.erase(std::remove(queue_.begin(), queue_.end(), id), queue_.end());
    Transition(job, JobState::kCancelled, "cancelled by user while queued");
    JobRecord out = job.record;
    Finish(id);
    return out;
  }
  auto rank0 = job.channels.find(0);
  if (checkpoint && !job.cancel_requested && job.record.state == JobState::kRunning && rank0 != job.channels.end()) {
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
    for (auto& [rank, ch] : job.channels) ch->Push({WorkerCommand::Kind::kStop, "cancelled by user"});
    StopGroup(job);
  }
  return job.record;
}

absl::StatusOr<int64_t> JobManager::RequestCheckpoint(const std::string& id, CheckpointType type) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = active_.find(id);
  if (it == active_.end()) {
    auto rec = store_->Get(id);
    if (!rec.ok()) return rec.status();
    return absl::FailedPreconditionError(
        absl::StrCat("job ", id, " has ended (", JobStateName(rec->state), "); only a running job can checkpoint"));
  }
  ActiveJob& job = it->second;
  auto rank0 = job.channels.find(0);
  if (job.record.state != JobState::kRunning || rank0 == job.channels.end() || job.cancel_requested) {
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

void JobManager::ReportCheckpoint(const std::string& job_id, int32_t attempt, const CheckpointEvent& c) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = active_.find(job_id);
  if (it == active_.end() || it->second.record.attempt != attempt) return;
  ActiveJob& job = it->second;
  if (auto s = store_->AddCheckpoint(job_id, {attempt, c}); !s.ok()) {
    spdlog::error("job {}: cannot record checkpoint {}: {}", job_id, c.index, std::string(s.message()));
  }
  metrics_->RecordCheckpoint(job_id, c);
  job.last_progress = std::chrono::steady_clock::now();
  if (c.ok) job.checkpointed_step_seconds = job.attempt_step_seconds;
  if (c.ok) {
    AddEvent(job,
             absl::StrCat(c.trigger, " checkpoint ", c.index, " at step ", c.step, " (", CheckpointTypeName(c.type),
                          ", ", c.bytes, " bytes, ", absl::StrFormat("%.2f", c.seconds), " s): ", c.path));
  } else {
    AddEvent(job, absl::StrCat(c.trigger, " checkpoint at step ", c.step, " failed: ", c.error));
  }
  if (c.request_id != 0) {
    checkpoint_results_[c.request_id] = c;
    while (checkpoint_results_.size() > 1000) checkpoint_results_.erase(checkpoint_results_.begin());
    checkpoint_cv_.notify_all();
  }
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

absl::StatusOr<JoinInfo> JobManager::GetJoinInfo(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = active_.find(id);
  if (it == active_.end()) {
    auto rec = store_->Get(id);
    if (!rec.ok()) return rec.status();
    return absl::FailedPreconditionError(absl::StrCat("job ", id, " has ended (", JobStateName(rec->state), ")"));
  }
  const ActiveJob& job = it->second;
  if (KindOf(job) != LauncherKind::kExternal) {
    return absl::FailedPreconditionError(absl::StrCat("job ", id, " is started by the ", LauncherKindName(KindOf(job)),
                                                      " launcher; only launcher: external jobs take joining workers"));
  }
  if (job.record.worker_token.empty()) {
    return absl::UnavailableError(
        absl::StrCat("job ", id, " is ", JobStateName(job.record.state), "; it takes workers once it is started"));
  }
  return JoinInfo{id, job.record.worker_token, job.record.num_processes, job.record.attempt,
                  options_.remote_coordinator_addr};
}

absl::StatusOr<WorkerAttachment> JobManager::AttachWorker(const std::string& job_id, int32_t rank, int32_t attempt,
                                                          const std::string& token, const std::string& advertise_addr,
                                                          int32_t rendezvous_port) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = active_.find(job_id);
  if (it == active_.end()) return absl::NotFoundError(absl::StrCat("job ", job_id, " is not running"));
  ActiveJob& job = it->second;
  // Check the token before telling anything about the attempt.
  if (job.record.worker_token.empty() || !ConstantTimeEquals(token, job.record.worker_token)) {
    return absl::PermissionDeniedError(absl::StrCat("invalid worker token for job ", job_id));
  }
  const bool external = KindOf(job) == LauncherKind::kExternal;
  if (attempt == 0 && external) attempt = job.record.attempt;  // joining
  if (attempt != job.record.attempt) {
    return absl::FailedPreconditionError(absl::StrCat("attempt ", attempt, " of job ", job_id,
                                                      " is stale; the current attempt is ", job.record.attempt));
  }
  if (job.record.state == JobState::kQueued) {
    return absl::UnavailableError(absl::StrCat("job ", job_id, " is queued; it takes workers once it is started"));
  }
  if (rank < 0 || rank >= job.record.num_processes) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " is out of range for job ", job_id, " (ranks 0..",
                                                   job.record.num_processes - 1, ")"));
  }
  if (job.channels.count(rank)) {
    return absl::AlreadyExistsError(absl::StrCat("rank ", rank, " of job ", job_id, " is already connected"));
  }
  if (external) {
    if (job.exited.count(rank) || job.failed || job.cancel_requested || job.preempted) {
      return absl::FailedPreconditionError(
          absl::StrCat("attempt ", attempt, " of job ", job_id, " is stopping; join again when the next one starts"));
    }
    if (job.record.state == JobState::kStarting) {
      if (rank == 0) {
        if (advertise_addr.empty() || rendezvous_port <= 0 || rendezvous_port > 65535) {
          return absl::InvalidArgumentError(
              "rank 0 of a joined job must say where its rendezvous store listens "
              "(trainyard-worker --advertise-addr, --master-port)");
        }
        job.master_addr = advertise_addr;
        job.master_port = rendezvous_port;
        AddEvent(job, absl::StrCat("rank 0 joined; rendezvous at ", advertise_addr, ":", rendezvous_port));
      } else if (job.master_addr.empty()) {
        return absl::UnavailableError(absl::StrCat("waiting for rank 0 of job ", job_id, " to join"));
      }
    }
    job.detached_at.erase(rank);
  }
  auto channel = std::make_shared<WorkerChannel>();
  job.channels[rank] = channel;
  job.attached.insert(rank);
  if (job.cancel_requested) channel->Push({WorkerCommand::Kind::kStop, "cancelled by user"});
  if (job.record.state == JobState::kRecovering && static_cast<int>(job.attached.size()) == job.record.num_processes) {
    job.last_progress = std::chrono::steady_clock::now();
    Transition(job, JobState::kRunning,
               absl::StrCat("all ", job.record.num_processes, " ranks reattached after a coordinator restart"));
  }
  if (job.record.state == JobState::kStarting && static_cast<int>(job.attached.size()) == job.record.num_processes) {
    job.last_progress = std::chrono::steady_clock::now();
    Transition(job, JobState::kRunning, absl::StrCat("all ", job.record.num_processes, " ranks connected"));
  }
  return WorkerAttachment{job.record.spec_json, job.record.num_processes, job.record.attempt,
                          job.master_addr,      job.master_port,          channel};
}

void JobManager::ReportMetrics(const std::string& job_id, int32_t attempt, const std::vector<StepMetrics>& samples) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = active_.find(job_id);
  if (it == active_.end() || it->second.record.attempt != attempt) return;
  ActiveJob& job = it->second;
  for (const StepMetrics& m : samples) {
    metrics_->RecordStep(job_id, m);
    job.last_metrics[m.rank] = m;
    if (m.rank != 0) continue;
    job.last_progress = std::chrono::steady_clock::now();
    job.attempt_step_seconds += m.step_seconds;
    if (job.record.step == 0 || m.step < job.record.step) job.record.first_loss = m.loss;
    job.record.step = m.step;
    job.record.loss = m.loss;
    double total = 0;
    for (const auto& [rank, last] : job.last_metrics) total += last.samples_per_second;
    job.record.samples_per_second = total;
    StepMetrics agg = m;
    agg.samples_per_second = total;
    for (auto& w : job.watchers) w->Push({std::nullopt, agg});
  }
  PublishGoodput(job);
  auto now = std::chrono::steady_clock::now();
  if (now - job.last_persist > std::chrono::seconds(1)) {
    job.last_persist = now;
    if (auto s = store_->Update(job.record, nullptr); !s.ok()) {
      spdlog::warn("job {}: cannot persist progress: {}", job_id, std::string(s.message()));
    }
  }
}

void JobManager::ReportResult(const std::string& job_id, int32_t attempt, int32_t rank, WorkerOutcome outcome,
                              const std::string& error) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = active_.find(job_id);
  if (it == active_.end() || it->second.record.attempt != attempt) return;
  // External ranks have no launcher to report their exit: their result is it.
  it->second.result_codes[rank] = ExitCodeOf(outcome);
  if (outcome == WorkerOutcome::kSucceeded) {
    spdlog::info("job {}: rank {} finished", job_id, rank);
    it->second.results_ok.insert(rank);
    return;
  }
  if (outcome == WorkerOutcome::kPreempted) {
    if (!it->second.preempted) AddEvent(it->second, absl::StrCat("preempted: ", error));
    it->second.preempted = true;
    return;
  }
  if (it->second.cancel_requested) return;  // a stop we asked for is no failure
  spdlog::warn("job {}: rank {} failed: {}", job_id, rank, error);
  FailGroup(it->second, rank, absl::StrCat("rank ", rank, ": ", error));
}

void JobManager::DetachWorker(const std::string& job_id, int32_t attempt, int32_t rank,
                              const std::shared_ptr<WorkerChannel>& channel) {
  std::lock_guard<std::mutex> lock(mu_);
  channel->Close();
  auto it = active_.find(job_id);
  if (it == active_.end() || it->second.record.attempt != attempt) return;
  ActiveJob& job = it->second;
  auto ch = job.channels.find(rank);
  if (ch == job.channels.end() || ch->second != channel) return;
  job.channels.erase(ch);
  if (KindOf(job) != LauncherKind::kExternal || job.exited.count(rank)) return;
  auto code = job.result_codes.find(rank);
  if (code == job.result_codes.end()) {
    // Lost without a result: it may reconnect (a network blip); the
    // watchdog fails it after reattach_timeout_s.
    job.detached_at[rank] = std::chrono::steady_clock::now();
    return;
  }
  RankExit e{job_id, attempt, rank};
  e.exit_code = code->second;
  HandleRankExit(job, e);
}

void JobManager::OnRankExit(const RankExit& e) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = active_.find(e.job_id);
  if (it == active_.end() || it->second.record.attempt != e.attempt) return;
  HandleRankExit(it->second, e);
}

void JobManager::HandleRankExit(ActiveJob& job, const RankExit& e) {
  if (job.exited.count(e.rank)) return;
  job.exited.insert(e.rank);
  if (e.signal == 0 && OutcomeOfExitCode(e.exit_code) == WorkerOutcome::kPreempted) {
    job.preempted = true;
    // The other ranks stop at the same step; nothing to stop here.
  } else if (!e.ok() && !job.cancel_requested) {
    FailGroup(job, e.rank, e.Describe());
  }
  if (static_cast<int>(job.exited.size()) < job.record.num_processes) return;
  // A rank that did not end well failed the group (above), unless preempted.
  if (EndAttempt(job, /*all_succeeded=*/!job.failed && !job.preempted)) {
    Finish(e.job_id);
    TrySchedule();
  }
}

bool JobManager::EndAttempt(ActiveJob& job, bool all_succeeded) {
  AttemptEnd end;
  end.cancel_requested = job.cancel_requested;
  end.failed = job.failed;
  end.failure = job.failure;
  end.reattach_failed = job.reattach_failed;
  end.preempted = job.preempted;
  end.all_succeeded = all_succeeded;
  end.shutting_down = shut_down_;
  end.restarts = job.restarts;
  end.max_restarts = job.spec.max_restarts;
  end.preemptible = job.spec.preemptible;
  end.num_processes = job.record.num_processes;
  end.step = job.record.step;
  const NextStep next = DecideAfterAttempt(end);
  switch (next.kind) {
    case NextStep::Kind::kRequeue:
      if (next.counts_restart) {
        ++job.restarts;
        metrics_->CountRestart(job.record.id);
      }
      Requeue(job, next.reason);
      return false;
    case NextStep::Kind::kCancelled: Transition(job, JobState::kCancelled, next.reason); break;
    case NextStep::Kind::kFailed: Transition(job, JobState::kFailed, next.reason); break;
    case NextStep::Kind::kSucceeded: Transition(job, JobState::kSucceeded, next.reason); break;
  }
  return true;
}

void JobManager::CheckProgress() {
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  std::vector<std::string> finished, adopted;
  for (auto& [id, job] : active_) {
    if (job.adopted) adopted.push_back(id);
  }
  for (const std::string& id : adopted) {
    auto it = active_.find(id);  // an earlier one's restart may have changed the map
    if (it != active_.end() && it->second.adopted) CheckAdopted(it->second, &finished);
  }
  for (const std::string& id : finished) Finish(id);
  if (!finished.empty()) TrySchedule();
  // Groups followed by their launcher (Slurm) or their streams (external)
  // after a coordinator restart; ranks of external jobs that are gone.
  std::vector<RankExit> gone;
  for (auto& [id, job] : active_) {
    if (job.adopted || job.record.state == JobState::kQueued) continue;
    if (job.record.state == JobState::kRecovering && now > job.reattach_deadline && !job.failed &&
        !job.cancel_requested) {
      job.reattach_failed = true;
      FailGroup(job, -1,
                absl::StrCat("the workers did not reattach within reattach_timeout_s (", job.spec.reattach_timeout_s,
                             " s) after a coordinator restart"));
    }
    if (KindOf(job) != LauncherKind::kExternal) continue;
    const bool stopping = job.failed || job.cancel_requested || job.preempted;
    const auto reattach = std::chrono::duration<double>(job.spec.reattach_timeout_s);
    for (int32_t rank = 0; rank < job.record.num_processes; ++rank) {
      if (job.exited.count(rank) || job.channels.count(rank)) continue;
      auto lost = job.detached_at.find(rank);
      RankExit e{id, job.record.attempt, rank};
      if (stopping) {
        // Not connected while its attempt stops: nothing to wait for.
        e.exit_code = ExitCodeOf(job.preempted && !job.failed ? WorkerOutcome::kPreempted : WorkerOutcome::kStopped);
        e.detail = absl::StrCat("rank ", rank, " was not connected when attempt ", job.record.attempt, " stopped");
      } else if (lost != job.detached_at.end() && now - lost->second > reattach) {
        e.exit_code = ExitCodeOf(WorkerOutcome::kFailed);
        e.detail = absl::StrCat("rank ", rank, " lost its connection without a result and did not reconnect within ",
                                job.spec.reattach_timeout_s, " s");
      } else {
        continue;
      }
      gone.push_back(e);
    }
  }
  for (const RankExit& e : gone) {
    auto it = active_.find(e.job_id);  // an earlier exit may have ended or requeued it
    if (it != active_.end() && it->second.record.attempt == e.attempt && it->second.record.state != JobState::kQueued) {
      HandleRankExit(it->second, e);
    }
  }
  for (auto& [id, job] : active_) {
    if (job.record.state != JobState::kRunning || job.failed || job.cancel_requested || job.preempted) continue;
    const double timeout = job.spec.step_timeout_s;
    if (timeout <= 0) continue;
    if (now - job.last_progress > std::chrono::duration<double>(timeout)) {
      FailGroup(job, -1,
                absl::StrCat("no step progress within step_timeout_s (", timeout, " s) at step ", job.record.step,
                             ": the job is hung"));
    }
  }
}

namespace {

// Processes on this host whose command line says they are workers of
// `job_id`'s attempt `attempt` (…--job <id> … --attempt <n> …).
std::vector<pid_t> FindWorkerPids(const std::string& job_id, int32_t attempt) {
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    std::ifstream in(e.path() / "cmdline", std::ios::binary);
    std::string cmd((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<std::string> args;
    size_t start = 0;
    for (size_t i = 0; i < cmd.size(); ++i) {
      if (cmd[i] != '\0') continue;
      args.push_back(cmd.substr(start, i - start));
      start = i + 1;
    }
    bool job = false, att = false;
    for (size_t i = 0; i + 1 < args.size(); ++i) {
      job |= args[i] == "--job" && args[i + 1] == job_id;
      att |= args[i] == "--attempt" && args[i + 1] == std::to_string(attempt);
    }
    if (job && att && !args.empty() && args[0].find("trainyard-worker") != std::string::npos) {
      out.push_back(static_cast<pid_t>(std::stol(name)));
    }
  }
  return out;
}

}  // namespace

void JobManager::StopGroup(ActiveJob& job) {
  if (KindOf(job) == LauncherKind::kExternal) {
    // No process of ours: the workers stop on the command; ranks that are
    // not connected are accounted for by CheckProgress.
    for (auto& [rank, ch] : job.channels) ch->Push({WorkerCommand::Kind::kStop, "the attempt is stopping"});
    return;
  }
  if (Launcher* l = LauncherOf(job)) l->Stop(job.record.id, job.record.attempt);
  if (!job.adopted) return;
  for (pid_t pid : FindWorkerPids(job.record.id, job.record.attempt)) kill(pid, SIGINT);
  job.kill_at = std::chrono::steady_clock::now() + options_.stop_grace;
}

void JobManager::CheckAdopted(ActiveJob& job, std::vector<std::string>* finished) {
  const auto now = std::chrono::steady_clock::now();
  const std::vector<pid_t> pids = FindWorkerPids(job.record.id, job.record.attempt);
  if (job.record.state == JobState::kRecovering && now > job.reattach_deadline && !job.failed &&
      !job.cancel_requested) {
    job.reattach_failed = true;
    FailGroup(job, -1,
              absl::StrCat("the workers did not reattach within reattach_timeout_s (", job.spec.reattach_timeout_s,
                           " s) after a coordinator restart"));
  }
  if ((job.failed || job.cancel_requested) && job.kill_at != std::chrono::steady_clock::time_point{} &&
      now > job.kill_at) {
    for (pid_t pid : pids) kill(pid, SIGKILL);
  }
  if (!pids.empty()) return;
  // No process of the attempt is left: it ended. Gone before reattaching is
  // the coordinator's loss, not the job's: no restart is counted for it.
  if (job.record.state == JobState::kRecovering) job.reattach_failed = true;
  // Not this coordinator's children: a rank succeeded when it said so.
  const bool all_succeeded = static_cast<int>(job.results_ok.size()) == job.record.num_processes;
  if (EndAttempt(job, all_succeeded)) finished->push_back(job.record.id);
}

void JobManager::Requeue(ActiveJob& job, const std::string& reason) {
  JobRecord& r = job.record;
  // What this attempt kept for goodput: steps up to its last checkpoint.
  job.kept_step_seconds += job.checkpointed_step_seconds;
  job.attempt_step_seconds = job.checkpointed_step_seconds = 0;
  ReleaseResources(job);
  job.failed = false;
  job.preempted = false;
  job.adopted = false;
  job.reattach_failed = false;
  job.kill_at = {};
  job.results_ok.clear();
  job.failure.clear();
  job.channels.clear();
  job.last_metrics.clear();
  job.result_codes.clear();
  job.detached_at.clear();
  job.master_addr.clear();
  job.master_port = 0;
  job.spec.checkpoint.resume_from = "latest";
  r.spec_json = JobSpecToJson(job.spec);
  Transition(job, JobState::kQueued, reason);
  queue_.push_front(r.id);  // ahead of jobs that have not started yet
  TrySchedule();
}

void JobManager::PublishGoodput(ActiveJob& job) {
  if (job.first_start == std::chrono::steady_clock::time_point{}) return;
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - job.first_start).count();
  if (wall <= 0) return;
  metrics_->SetGoodput(job.record.id, std::min(1.0, (job.kept_step_seconds + job.attempt_step_seconds) / wall));
}

std::vector<std::string> JobManager::Shutdown() {
  std::lock_guard<std::mutex> lock(mu_);
  shut_down_ = true;
  std::vector<std::string> running;
  for (auto& [id, job] : active_) {
    if (job.record.state == JobState::kQueued) continue;
    StopGroup(job);
    Transition(job, JobState::kFailed, "the coordinator shut down while the job was running");
    running.push_back(id);
  }
  for (const auto& id : running) Finish(id);
  return running;
}

// ---- private -----------------------------------------------------------------

void JobManager::FailGroup(ActiveJob& job, int32_t rank, const std::string& reason) {
  if (job.failed) return;  // keep the root cause: the first failure
  job.failed = true;
  job.failure = reason;
  job.record.failed_rank = rank;
  spdlog::warn("job {}: {}; stopping the other ranks", job.record.id, reason);
  StopGroup(job);
}

void JobManager::Transition(ActiveJob& job, JobState state, const std::string& reason) {
  JobRecord& r = job.record;
  counts_[r.state]--;
  counts_[state]++;
  r.state = state;
  r.reason = reason;
  const int64_t now = NowMillis();
  if (state == JobState::kStarting && r.started_unix_millis == 0) r.started_unix_millis = now;
  if (IsTerminal(state)) r.ended_unix_millis = now;
  JobEvent event{now, state, reason};
  absl::Status s = store_->Update(r, &event);
  if (!s.ok()) spdlog::error("job {}: cannot persist {}: {}", r.id, JobStateName(state), std::string(s.message()));
  spdlog::info("job {} -> {}: {}", r.id, JobStateName(state), reason);
  for (auto& w : job.watchers) w->Push({r, std::nullopt});
  PublishCounts();
}

void JobManager::Finish(const std::string& id) {
  auto it = active_.find(id);
  if (it == active_.end()) return;
  ActiveJob& job = it->second;
  ReleaseResources(job);
  for (auto& [rank, ch] : job.channels) ch->Close();
  for (auto& w : job.watchers) w->Close();
  metrics_->RemoveJob(id);
  active_.erase(it);
  checkpoint_cv_.notify_all();  // waiters of this job's checkpoints give up
}

void JobManager::TrySchedule() {
  // FIFO within each resource of this host: a job waits only behind earlier
  // jobs that need the same kind (CPU slots or GPUs). Slurm and external
  // jobs take none of them and start at once.
  enum Pool { kNone, kSlots, kGpus };
  std::set<Pool> blocked;
  for (size_t i = 0; i < queue_.size() && !shut_down_;) {
    auto it = active_.find(queue_[i]);
    if (it == active_.end()) {
      queue_.erase(queue_.begin() + static_cast<std::ptrdiff_t>(i));
      continue;
    }
    const ActiveJob& job = it->second;
    const Pool pool = KindOf(job) != LauncherKind::kLocal ? kNone : job.spec.device == Device::kCuda ? kGpus : kSlots;
    if (pool != kNone && (blocked.count(pool) || !Fits(job))) {
      blocked.insert(pool);
      ++i;
      continue;
    }
    queue_.erase(queue_.begin() + static_cast<std::ptrdiff_t>(i));
    StartJob(it->second);
  }
}

void JobManager::StartJob(ActiveJob& job) {
  JobRecord& r = job.record;
  const LauncherKind kind = KindOf(job);
  Launcher* launcher = LauncherOf(job);
  if (kind != LauncherKind::kExternal && launcher == nullptr) {
    Transition(job, JobState::kFailed,
               absl::StrCat("launcher ", LauncherKindName(kind), " is not available on this server"));
    Finish(r.id);
    return;
  }
  job.master_addr.clear();
  job.master_port = 0;
  if (kind != LauncherKind::kExternal) {
    // Local: rank 0 serves the store on this host. Slurm: on the first node
    // of the step (the worker reads it from Slurm); the port is a guess
    // that is free here.
    const int port = PickFreePortOn(options_.master_addr);
    if (port == 0) {
      Transition(job, JobState::kFailed, "cannot find a free port for the rendezvous");
      Finish(r.id);
      return;
    }
    job.master_port = port;
    if (kind == LauncherKind::kLocal) job.master_addr = options_.master_addr;
  }
  r.attempt += 1;
  // A new token fences the previous attempt's workers. Joined workers are
  // fenced by the attempt number alone: their token is the job's.
  if (kind != LauncherKind::kExternal || r.worker_token.empty()) r.worker_token = NewWorkerToken();
  if (job.first_start == std::chrono::steady_clock::time_point{}) job.first_start = std::chrono::steady_clock::now();
  if (kind == LauncherKind::kLocal) {
    job.held = pool_.Take(job.spec.device == Device::kCuda ? ResourcePool::Kind::kGpus : ResourcePool::Kind::kSlots,
                          r.num_processes);
  }
  job.attached.clear();
  job.exited.clear();
  job.result_codes.clear();
  job.detached_at.clear();
  if (kind == LauncherKind::kExternal) {
    Transition(job, JobState::kStarting,
               absl::StrCat("attempt ", r.attempt, ": waiting for ", r.num_processes,
                            " ranks to join (trainyard-worker --join ", r.id, "; `trainctl join-info ", r.id, "`)"));
    return;
  }
  Transition(
      job, JobState::kStarting,
      absl::StrCat("launching ", r.num_processes, " ranks (attempt ", r.attempt, ", ", LauncherKindName(kind),
                   job.held.gpus.empty() ? "" : absl::StrCat(", GPUs ", absl::StrJoin(job.held.gpus, ",")), ")"));
  if (auto s = launcher->Launch(MakeLaunchRequest(job)); !s.ok()) {
    Transition(job, JobState::kFailed, absl::StrCat("launch failed: ", s.message()));
    Finish(r.id);
  }
}

void JobManager::PublishCounts() { metrics_->SetJobCounts(counts_); }

void JobManager::AddEvent(ActiveJob& job, const std::string& reason) {
  JobEvent event{NowMillis(), job.record.state, reason};
  if (auto s = store_->Update(job.record, &event); !s.ok()) {
    spdlog::error("job {}: cannot persist event: {}", job.record.id, std::string(s.message()));
  }
  spdlog::info("job {}: {}", job.record.id, reason);
}

std::string JobManager::NewJobId() {
  for (;;) {
    std::string id = "job-" + RandomHex(4);
    if (active_.count(id)) continue;
    if (store_->Get(id).status().code() == absl::StatusCode::kNotFound) return id;
  }
}

std::string JobManager::LogDir(const JobRecord& job, int32_t attempt) const {
  return absl::StrCat(options_.state_dir, "/jobs/", job.id, "/attempt-", attempt);
}

}  // namespace trainyard
