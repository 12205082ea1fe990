#include "server/worker_sessions.h"

#include "absl/strings/str_cat.h"
#include "common/secrets.h"
#include "common/utf8.h"
#include "spdlog/spdlog.h"

namespace trainyard {

absl::StatusOr<WorkerAttachment> WorkerSessions::Attach(const std::string& job_id, int32_t rank, int32_t attempt,
                                                        const std::string& token, const std::string& advertise_addr,
                                                        int32_t rendezvous_port) {
  ActiveJob* found = jobs_->Find(job_id);
  if (found == nullptr) return absl::NotFoundError(absl::StrCat("job ", job_id, " is not running"));
  ActiveJob& job = *found;
  // Check the token before telling anything about the attempt.
  if (job.record.worker_token.empty() || !ConstantTimeEquals(token, job.record.worker_token)) {
    return absl::PermissionDeniedError(absl::StrCat("invalid worker token for job ", job_id));
  }
  const bool joining = launchers_->TraitsOf(job.spec).ranks_join;
  if (attempt == 0 && joining) attempt = job.record.attempt;
  if (attempt != job.record.attempt) {
    return absl::FailedPreconditionError(absl::StrCat("attempt ", attempt, " of job ", job_id,
                                                      " is stale; the current attempt is ", job.record.attempt));
  }
  if (job.record.state == JobState::kQueued || !job.attempt) {
    return absl::UnavailableError(absl::StrCat("job ", job_id, " is queued; it takes workers once it is started"));
  }
  Attempt& a = *job.attempt;
  if (auto s = a.CheckAttach(job_id, rank); !s.ok()) return s;
  if (joining && job.record.state == JobState::kStarting) {
    std::string event;
    if (auto s = a.Join(job_id, rank, advertise_addr, rendezvous_port, &event); !s.ok()) return s;
    if (!event.empty()) jobs_->AddEvent(job, event);
  }
  auto channel = std::make_shared<WorkerChannel>();
  a.Attach(rank, channel);
  if (a.cancel_requested()) channel->Push({WorkerCommand::Kind::kStop, "cancelled by user"});
  if (a.all_attached() && (job.record.state == JobState::kRecovering || job.record.state == JobState::kStarting)) {
    job.progress.Touch(clock_->SteadyNow());
    jobs_->Transition(
        job, JobState::kRunning,
        job.record.state == JobState::kRecovering
            ? absl::StrCat("all ", job.record.num_processes, " ranks reattached after a coordinator restart")
            : absl::StrCat("all ", job.record.num_processes, " ranks connected"));
  }
  return WorkerAttachment{job.record.spec_json, job.record.num_processes, a.number(),
                          a.master_addr(),      a.master_port(),          channel};
}

absl::StatusOr<JoinInfo> WorkerSessions::JoinInfoOf(const std::string& job_id,
                                                    const std::string& remote_coordinator_addr) {
  absl::StatusOr<ActiveJob*> found = jobs_->FindActive(job_id, "");
  if (!found.ok()) return found.status();
  const ActiveJob& job = **found;
  if (!launchers_->TraitsOf(job.spec).ranks_join) {
    return absl::FailedPreconditionError(absl::StrCat("job ", job_id, " is started by the ",
                                                      LauncherKindName(launchers_->KindOf(job.spec)),
                                                      " launcher; only launcher: external jobs take joining workers"));
  }
  if (job.record.worker_token.empty()) {
    return absl::UnavailableError(
        absl::StrCat("job ", job_id, " is ", JobStateName(job.record.state), "; it takes workers once it is started"));
  }
  return JoinInfo{job_id, job.record.worker_token, job.record.num_processes, job.record.attempt,
                  remote_coordinator_addr};
}

void WorkerSessions::Metrics(const std::string& job_id, int32_t attempt, const std::vector<StepMetrics>& samples) {
  ActiveJob* job = jobs_->FindAttempt(job_id, attempt);
  if (job == nullptr) return;
  const auto now = clock_->SteadyNow();
  for (const StepMetrics& agg : job->progress.OnSamples(samples, &job->record, now)) {
    for (auto& w : job->watchers) w->Push({std::nullopt, agg});
  }
  jobs_->PersistProgress(*job, now);
}

void WorkerSessions::Result(const std::string& job_id, int32_t attempt, int32_t rank, WorkerOutcome outcome,
                            const std::string& error) {
  ActiveJob* job = jobs_->FindAttempt(job_id, attempt);
  if (job == nullptr) return;
  spdlog::log(outcome == WorkerOutcome::kSucceeded ? spdlog::level::info : spdlog::level::warn,
              "job {}: rank {} reports {}{}{}", job_id, rank, WorkerOutcomeName(outcome), error.empty() ? "" : ": ",
              error);
  lifecycle_->Apply(*job, job->attempt->OnResult(rank, outcome, error));
}

void WorkerSessions::Checkpoint(const std::string& job_id, int32_t attempt, const CheckpointEvent& c) {
  ActiveJob* job = jobs_->FindAttempt(job_id, attempt);
  if (job == nullptr) return;
  jobs_->AddCheckpoint(*job, attempt, c);
  jobs_->AddEvent(*job, job->progress.OnCheckpoint(c, clock_->SteadyNow()));
  requests_->CheckpointReported(c);
}

void WorkerSessions::Note(const std::string& job_id, int32_t attempt, int32_t rank, const std::string& text) {
  ActiveJob* job = jobs_->FindAttempt(job_id, attempt);
  if (job == nullptr || !job->attempt->TakeNote(WorkerHandler::kMaxNotesPerAttempt)) return;
  // Events travel in proto strings: valid UTF-8 only.
  const std::string clean = AsValidUtf8(text.substr(0, 2000));
  const bool last = job->attempt->notes() == WorkerHandler::kMaxNotesPerAttempt;
  jobs_->AddEvent(
      *job, absl::StrCat("rank ", rank, ": ", clean, last ? " (later notes of this attempt: see the rank logs)" : ""));
}

void WorkerSessions::Detach(const std::string& job_id, int32_t attempt, int32_t rank,
                            const std::shared_ptr<WorkerChannel>& channel) {
  channel->Close();
  ActiveJob* job = jobs_->FindAttempt(job_id, attempt);
  if (job == nullptr) return;
  lifecycle_->Apply(*job, job->attempt->Detach(job_id, rank, channel, clock_->SteadyNow()));
}

void WorkerSessions::Exit(const RankExit& exit) {
  ActiveJob* job = jobs_->FindAttempt(exit.job_id, exit.attempt);
  if (job == nullptr) return;
  lifecycle_->Apply(*job, job->attempt->OnExit(exit, job->record.state == JobState::kRecovering));
}

}  // namespace trainyard
