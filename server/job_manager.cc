#include "server/job_manager.h"

#include <algorithm>
#include <filesystem>

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

bool JobManager::Fits(const ActiveJob& job) const {
  if (KindOf(job) != LauncherKind::kLocal) return true;
  return pool_.Fits(job.spec.device == Device::kCuda ? ResourcePool::Kind::kGpus : ResourcePool::Kind::kSlots,
                    job.record.num_processes);
}

void JobManager::ReleaseResources(ActiveJob& job) { pool_.Release(&job.run.held); }

LaunchRequest JobManager::MakeLaunchRequest(const ActiveJob& job) const {
  const JobRecord& r = job.record;
  LaunchRequest req;
  req.job_id = r.id;
  req.attempt = r.attempt;
  req.world_size = r.num_processes;
  req.master_addr = job.run.master_addr;
  req.master_port = job.run.master_port;
  req.coordinator_addr =
      KindOf(job) == LauncherKind::kLocal ? options_.coordinator_addr : options_.remote_coordinator_addr;
  req.token = r.worker_token;
  req.log_dir = LogDir(r, r.attempt);
  req.threads_per_process = job.spec.threads_per_process;
  req.job_name = job.spec.name;
  req.cuda = job.spec.device == Device::kCuda;
  req.gpus = job.run.held.gpus;
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
      if (KindOf(job) == LauncherKind::kLocal) {
        // Which GPUs it held is not stored: it holds as many.
        job.run.held =
            pool_.Take(job.spec.device == Device::kCuda ? ResourcePool::Kind::kGpus : ResourcePool::Kind::kSlots,
                       rec.num_processes, /*partial=*/job.spec.device == Device::kCuda);
      }
      // The launcher follows the processes (local: found by command line)
      // or the batch job (Slurm: found by name) and reports their ends.
      if (Launcher* l = LauncherOf(job); l != nullptr && KindOf(job) != LauncherKind::kExternal) {
        l->Adopt(MakeLaunchRequest(job));
      }
      job.run.reattach_deadline =
          std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                 std::chrono::duration<double>(job.spec.reattach_timeout_s));
      job.last_progress = std::chrono::steady_clock::now();
      job.goodput.StartOnce(job.last_progress);
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

void JobManager::OnRankExit(const RankExit& e) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = active_.find(e.job_id);
  if (it == active_.end() || it->second.record.attempt != e.attempt) return;
  HandleRankExit(it->second, e);
}

void JobManager::HandleRankExit(ActiveJob& job, const RankExit& exit) {
  if (job.run.exited.count(exit.rank)) return;
  job.run.exited.insert(exit.rank);
  RankExit e = exit;
  if (e.code_unknown) {
    // Not the launcher's child (adopted): the rank's own report says how it ended.
    auto code = job.run.result_codes.find(e.rank);
    e.code_unknown = code == job.run.result_codes.end();
    if (!e.code_unknown) e.exit_code = code->second;
    // Gone without a word before reattaching (killed with the coordinator,
    // say) is the coordinator's loss, not the job's: no restart is counted.
    if (e.code_unknown && job.record.state == JobState::kRecovering) job.run.reattach_failed = true;
  }
  const bool exited = e.signal == 0 && !e.code_unknown;
  if (exited && OutcomeOfExitCode(e.exit_code) == WorkerOutcome::kUsage) job.run.usage_error = true;
  if (exited && OutcomeOfExitCode(e.exit_code) == WorkerOutcome::kPreempted) {
    job.run.preempted = true;
    // The other ranks stop at the same step; nothing to stop here.
  } else if (!e.ok() && !job.cancel_requested && !job.stopped_for_restart) {
    FailGroup(job, e.rank, e.Describe());
  }
  if (static_cast<int>(job.run.exited.size()) < job.record.num_processes) return;
  // A rank that did not end well failed the group (above), unless preempted.
  if (EndAttempt(job, /*all_succeeded=*/!job.run.failed && !job.run.preempted)) {
    Finish(e.job_id);
    TrySchedule();
  }
}

bool JobManager::EndAttempt(ActiveJob& job, bool all_succeeded) {
  AttemptEnd end;
  end.cancel_requested = job.cancel_requested;
  end.failed = job.run.failed;
  end.failure = job.run.failure;
  end.reattach_failed = job.run.reattach_failed;
  end.usage_error = job.run.usage_error;
  end.stopped_for_restart = job.stopped_for_restart;
  end.preempted = job.run.preempted;
  end.all_succeeded = all_succeeded;
  end.shutting_down = shut_down_;
  end.restarts = job.restarts;
  end.max_restarts = job.spec.max_restarts;
  end.preemptible = job.spec.preemptible;
  end.num_processes = job.record.num_processes;
  end.step = job.record.step;
  const NextStep next = DecideAfterAttempt(end);
  switch (next.kind) {
    case NextStep::Kind::kRequeue: {
      std::string reason = next.reason;
      if (next.counts_restart) {
        ++job.restarts;
        ++job.failures_in_a_row;
        metrics_->CountRestart(job.record.id);
        // Repeated failures (no attempt trained a step in between): back off
        // (1x, 2x, 4x ... the base, at most 30 s). A group that trained
        // before it failed restarts at once.
        if (job.failures_in_a_row > 1 && options_.restart_backoff.count() > 0) {
          const auto backoff = std::min<std::chrono::milliseconds>(
              options_.restart_backoff * (int64_t{1} << std::min(job.failures_in_a_row - 2, 20)),
              std::chrono::seconds(30));
          job.start_not_before = std::chrono::steady_clock::now() + backoff;
          reason += absl::StrCat(" (starts in ", backoff.count() / 1000.0, " s: backoff after repeated failures)");
        }
      }
      Requeue(job, reason);
      return false;
    }
    case NextStep::Kind::kCancelled: Transition(job, JobState::kCancelled, next.reason); break;
    case NextStep::Kind::kFailed: Transition(job, JobState::kFailed, next.reason); break;
    case NextStep::Kind::kSucceeded: Transition(job, JobState::kSucceeded, next.reason); break;
  }
  return true;
}

void JobManager::StopGroup(ActiveJob& job) {
  if (KindOf(job) == LauncherKind::kExternal) {
    // No process of ours: the workers stop on the command; ranks that are
    // not connected are accounted for by CheckProgress.
    for (auto& [rank, ch] : job.run.channels) ch->Push({WorkerCommand::Kind::kStop, "the attempt is stopping"});
    return;
  }
  if (Launcher* l = LauncherOf(job)) l->Stop(job.record.id, job.record.attempt);
}

void JobManager::Requeue(ActiveJob& job, const std::string& reason) {
  JobRecord& r = job.record;
  metrics_->AddBadput(r.id, "lost_work", job.goodput.Unkept());
  job.goodput.AttemptEnded();
  StartRecoveryClock(job);  // preemptions and stops: from the attempt's end
  ReleaseResources(job);
  job.run = AttemptState{};
  job.spec.checkpoint.resume_from = "latest";
  r.spec_json = JobSpecToJson(job.spec);
  Transition(job, JobState::kQueued, reason);
  queue_.push_front(r.id);  // ahead of jobs that have not started yet
  TrySchedule();
}

void JobManager::StartRecoveryClock(ActiveJob& job) {
  if (job.recovery_from_millis != 0) return;
  job.recovery_from_millis = NowMillis();
  job.step_at_failure = job.record.step;
}

void JobManager::PublishGoodput(ActiveJob& job) {
  const double ratio = job.goodput.Ratio(std::chrono::steady_clock::now());
  if (ratio >= 0) metrics_->SetGoodput(job.record.id, ratio);
}

std::vector<std::string> JobManager::Shutdown(ShutdownMode mode) {
  std::lock_guard<std::mutex> lock(mu_);
  shut_down_ = true;
  std::vector<std::string> running;
  for (auto& [id, job] : active_) {
    if (job.record.state == JobState::kQueued) continue;
    if (mode == ShutdownMode::kDetach) {
      // The streams end; the workers go on and reconnect to the next coordinator.
      for (auto& [rank, ch] : job.run.channels) ch->Close();
      for (auto& w : job.watchers) w->Close();
      continue;
    }
    running.push_back(id);
    if (mode == ShutdownMode::kStop) {
      StopGroup(job);
      Transition(job, JobState::kFailed, "the coordinator shut down while the job was running");
      continue;
    }
    if (job.cancel_requested) continue;  // it stops anyway, and ends CANCELLED
    job.stopped_for_restart = true;
    auto rank0 = job.run.channels.find(0);
    if (job.record.state == JobState::kRunning && rank0 != job.run.channels.end() && !job.run.failed) {
      WorkerCommand cmd{WorkerCommand::Kind::kCheckpoint, "the coordinator is stopping"};
      cmd.request_id = next_request_id_++;
      cmd.stop_after = true;
      rank0->second->Push(cmd);
      AddEvent(job, absl::StrCat("the coordinator is stopping: checkpoint (request ", cmd.request_id,
                                 "), then stop; the job resumes when it starts again"));
    } else {
      StopGroup(job);
      AddEvent(job, "the coordinator is stopping: the job resumes from its latest checkpoint when it starts again");
    }
  }
  if (mode == ShutdownMode::kStop) {
    for (const auto& id : running) Finish(id);
  }
  return running;
}

void JobManager::StopGroups(const std::vector<std::string>& ids) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::string& id : ids) {
    auto it = active_.find(id);
    if (it != active_.end() && it->second.record.state != JobState::kQueued) StopGroup(it->second);
  }
}

// ---- private -----------------------------------------------------------------

void JobManager::FailGroup(ActiveJob& job, int32_t rank, const std::string& reason) {
  if (job.run.failed) return;  // keep the root cause: the first failure
  StartRecoveryClock(job);
  job.run.failed = true;
  job.run.failure = reason;
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
  if (KindOf(job) == LauncherKind::kLocal && job.spec.checkpoint.snapshot_every_steps > 0) {
    // The job's in-memory snapshots on this host (its workers remove them
    // when they end well; a failed or cancelled job leaves them).
    std::error_code ec;
    std::filesystem::remove_all(SnapshotDir(id), ec);
  }
  for (auto& [rank, ch] : job.run.channels) ch->Close();
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
    if (std::chrono::steady_clock::now() < job.start_not_before) {  // backing off: takes nothing, blocks nobody
      ++i;
      continue;
    }
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
  job.run = AttemptState{};
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
    job.run.master_port = port;
    if (kind == LauncherKind::kLocal) job.run.master_addr = options_.master_addr;
  }
  r.attempt += 1;
  // A new token fences the previous attempt's workers. Joined workers are
  // fenced by the attempt number alone: their token is the job's.
  if (kind != LauncherKind::kExternal || r.worker_token.empty()) r.worker_token = NewWorkerToken();
  job.goodput.StartOnce(std::chrono::steady_clock::now());
  if (job.recovery_from_millis == 0) job.startup_from_millis = NowMillis();
  if (kind == LauncherKind::kLocal) {
    job.run.held = pool_.Take(job.spec.device == Device::kCuda ? ResourcePool::Kind::kGpus : ResourcePool::Kind::kSlots,
                              r.num_processes);
  }
  if (kind == LauncherKind::kExternal) {
    Transition(job, JobState::kStarting,
               absl::StrCat("attempt ", r.attempt, ": waiting for ", r.num_processes,
                            " ranks to join (trainyard-worker --join ", r.id, "; `trainctl join-info ", r.id, "`)"));
    return;
  }
  Transition(job, JobState::kStarting,
             absl::StrCat(
                 "launching ", r.num_processes, " ranks (attempt ", r.attempt, ", ", LauncherKindName(kind),
                 job.run.held.gpus.empty() ? "" : absl::StrCat(", GPUs ", absl::StrJoin(job.run.held.gpus, ",")), ")"));
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
