// JobManager, workers' side: ranks attach (and external ranks join), report
// metrics, checkpoints and results, and detach; the watchdog that fails
// groups that hang or do not come back.
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/clock.h"
#include "common/secrets.h"
#include "common/utf8.h"
#include "common/worker_outcome.h"
#include "server/job_manager.h"
#include "spdlog/spdlog.h"

namespace trainyard {

void JobManager::ReportCheckpoint(const std::string& job_id, int32_t attempt, const CheckpointEvent& c) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = active_.find(job_id);
  if (it == active_.end() || it->second.record.attempt != attempt) return;
  ActiveJob& job = it->second;
  if (auto s = store_->AddCheckpoint(job_id, {attempt, c}); !s.ok()) {
    spdlog::error("job {}: cannot record checkpoint {}: {}", job_id, c.index, std::string(s.message()));
  }
  metrics_->RecordCheckpoint(job_id, c);
  metrics_->AddBadput(job_id, "checkpoint_blocking", c.blocking_seconds);
  job.last_progress = std::chrono::steady_clock::now();
  if (c.ok) job.goodput.Checkpointed(c.step);
  if (c.ok) {
    AddEvent(job,
             absl::StrCat(c.trigger, " checkpoint ", c.index, " at step ", c.step, " (", CheckpointTypeName(c.type),
                          ", ", c.bytes, " bytes, ", absl::StrFormat("%.2f", c.seconds), " s",
                          c.host_bytes > 0 ? absl::StrFormat(", training waited %.2f s", c.blocking_seconds) : "",
                          "): ", c.path));
  } else {
    AddEvent(job, absl::StrCat(c.trigger, " checkpoint at step ", c.step, " failed: ", c.error));
  }
  if (c.request_id != 0) {
    checkpoint_results_[c.request_id] = c;
    while (checkpoint_results_.size() > 1000) checkpoint_results_.erase(checkpoint_results_.begin());
    checkpoint_cv_.notify_all();
  }
}

absl::StatusOr<JoinInfo> JobManager::GetJoinInfo(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  absl::StatusOr<ActiveJob*> found = FindActive(id, "");
  if (!found.ok()) return found.status();
  const ActiveJob& job = **found;
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
  if (job.run.channels.count(rank)) {
    return absl::AlreadyExistsError(absl::StrCat("rank ", rank, " of job ", job_id, " is already connected"));
  }
  if (external) {
    if (job.run.exited.count(rank) || job.run.failed || job.cancel_requested || job.run.preempted) {
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
        job.run.master_addr = advertise_addr;
        job.run.master_port = rendezvous_port;
        AddEvent(job, absl::StrCat("rank 0 joined; rendezvous at ", advertise_addr, ":", rendezvous_port));
      } else if (job.run.master_addr.empty()) {
        return absl::UnavailableError(absl::StrCat("waiting for rank 0 of job ", job_id, " to join"));
      }
    }
    job.run.detached_at.erase(rank);
  }
  auto channel = std::make_shared<WorkerChannel>();
  job.run.channels[rank] = channel;
  job.run.attached.insert(rank);
  if (job.cancel_requested) channel->Push({WorkerCommand::Kind::kStop, "cancelled by user"});
  if (job.record.state == JobState::kRecovering &&
      static_cast<int>(job.run.attached.size()) == job.record.num_processes) {
    job.last_progress = std::chrono::steady_clock::now();
    Transition(job, JobState::kRunning,
               absl::StrCat("all ", job.record.num_processes, " ranks reattached after a coordinator restart"));
  }
  if (job.record.state == JobState::kStarting &&
      static_cast<int>(job.run.attached.size()) == job.record.num_processes) {
    job.last_progress = std::chrono::steady_clock::now();
    Transition(job, JobState::kRunning, absl::StrCat("all ", job.record.num_processes, " ranks connected"));
  }
  return WorkerAttachment{job.record.spec_json, job.record.num_processes, job.record.attempt,
                          job.run.master_addr,  job.run.master_port,      channel};
}

void JobManager::ReportNote(const std::string& job_id, int32_t attempt, int32_t rank, const std::string& text) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = active_.find(job_id);
  if (it == active_.end() || it->second.record.attempt != attempt) return;
  ActiveJob& job = it->second;
  if (job.run.notes >= kMaxNotesPerAttempt) return;
  ++job.run.notes;
  // Events travel in proto strings: valid UTF-8 only.
  std::string clean = text.substr(0, 2000);
  if (!ValidUtf8(clean)) {
    for (char& c : clean) {
      if (static_cast<unsigned char>(c) >= 0x80) c = '?';
    }
  }
  AddEvent(job, absl::StrCat(
                    "rank ", rank, ": ", clean,
                    job.run.notes == kMaxNotesPerAttempt ? " (later notes of this attempt: see the rank logs)" : ""));
}

void JobManager::ReportMetrics(const std::string& job_id, int32_t attempt, const std::vector<StepMetrics>& samples) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = active_.find(job_id);
  if (it == active_.end() || it->second.record.attempt != attempt) return;
  ActiveJob& job = it->second;
  for (const StepMetrics& m : samples) {
    metrics_->RecordStep(job_id, m);
    job.run.last_metrics[m.rank] = m;
    if (m.rank != 0) continue;
    job.last_progress = std::chrono::steady_clock::now();
    job.failures_in_a_row = 0;
    job.goodput.AddStep(m.step, m.step_seconds);
    metrics_->AddBadput(job_id, "data_wait", m.data_seconds);
    const int64_t at = m.unix_millis > 0 ? m.unix_millis : NowMillis();
    // Until this step began: the time before it was no step's.
    const double before_step = static_cast<double>(at) / 1000.0 - m.step_seconds;
    if (job.recovery_from_millis != 0 && m.step > 0) {
      // The first step of the attempt after a failure: resumed at m.step - 1.
      metrics_->RecordRecovery(job_id, std::max<int64_t>(0, at - job.recovery_from_millis) / 1000.0,
                               std::max<int64_t>(0, job.step_at_failure - (m.step - 1)));
      metrics_->AddBadput(job_id, "restart", before_step - job.recovery_from_millis / 1000.0);
      job.recovery_from_millis = 0;
      job.startup_from_millis = 0;
    }
    if (job.startup_from_millis != 0) {
      metrics_->AddBadput(job_id, "startup", before_step - job.startup_from_millis / 1000.0);
      job.startup_from_millis = 0;
    }
    if (job.record.step == 0 || m.step < job.record.step) job.record.first_loss = m.loss;
    job.record.step = m.step;
    job.record.loss = m.loss;
    double total = 0;
    for (const auto& [rank, last] : job.run.last_metrics) total += last.samples_per_second;
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
  // External ranks have no launcher to report their exit, and adopted ones
  // no exit code: their result is it.
  it->second.run.result_codes[rank] = ExitCodeOf(outcome);
  if (outcome == WorkerOutcome::kSucceeded) {
    spdlog::info("job {}: rank {} finished", job_id, rank);
    return;
  }
  if (outcome == WorkerOutcome::kPreempted) {
    if (!it->second.run.preempted) AddEvent(it->second, absl::StrCat("preempted: ", error));
    it->second.run.preempted = true;
    return;
  }
  if (outcome == WorkerOutcome::kUsage) it->second.run.usage_error = true;
  if (it->second.cancel_requested || it->second.stopped_for_restart) return;  // a stop we asked for is no failure
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
  auto ch = job.run.channels.find(rank);
  if (ch == job.run.channels.end() || ch->second != channel) return;
  job.run.channels.erase(ch);
  if (KindOf(job) != LauncherKind::kExternal || job.run.exited.count(rank)) return;
  auto code = job.run.result_codes.find(rank);
  if (code == job.run.result_codes.end()) {
    // Lost without a result: it may reconnect (a network blip); the
    // watchdog fails it after reattach_timeout_s.
    job.run.detached_at[rank] = std::chrono::steady_clock::now();
    return;
  }
  RankExit e{job_id, attempt, rank};
  e.exit_code = code->second;
  HandleRankExit(job, e);
}

void JobManager::CheckProgress() {
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  if (!queue_.empty()) TrySchedule();  // restarts whose backoff is over
  // Groups that did not reattach after a coordinator restart; ranks of
  // external jobs that are gone.
  std::vector<RankExit> gone;
  for (auto& [id, job] : active_) {
    if (job.record.state == JobState::kQueued) continue;
    if (job.record.state == JobState::kRecovering && now > job.run.reattach_deadline && !job.run.failed &&
        !job.cancel_requested) {
      job.run.reattach_failed = true;
      FailGroup(job, -1,
                absl::StrCat("the workers did not reattach within reattach_timeout_s (", job.spec.reattach_timeout_s,
                             " s) after a coordinator restart"));
    }
    if (KindOf(job) != LauncherKind::kExternal) continue;
    const bool stopping = job.run.failed || job.cancel_requested || job.run.preempted;
    const auto reattach = std::chrono::duration<double>(job.spec.reattach_timeout_s);
    for (int32_t rank = 0; rank < job.record.num_processes; ++rank) {
      if (job.run.exited.count(rank) || job.run.channels.count(rank)) continue;
      auto lost = job.run.detached_at.find(rank);
      RankExit e{id, job.record.attempt, rank};
      if (stopping) {
        // Not connected while its attempt stops: nothing to wait for.
        e.exit_code =
            ExitCodeOf(job.run.preempted && !job.run.failed ? WorkerOutcome::kPreempted : WorkerOutcome::kStopped);
        e.detail = absl::StrCat("rank ", rank, " was not connected when attempt ", job.record.attempt, " stopped");
      } else if (lost != job.run.detached_at.end() && now - lost->second > reattach) {
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
  CheckHangs(now);
}

}  // namespace trainyard
