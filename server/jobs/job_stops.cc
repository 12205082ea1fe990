#include "server/jobs/job_stops.h"

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace trainyard {

JobRecord JobStops::Cancel(ActiveJob& job, bool checkpoint, int64_t request_id, const std::string& reason) {
  if (job.record.state == JobState::kQueued) {
    JobRecord r = job.record;
    lifecycle_->End(job, JobState::kCancelled,
                    reason.empty() ? "cancelled by user while queued" : absl::StrCat(reason, " while queued"));
    return *jobs_->Record(r.id);
  }
  Attempt& a = *job.attempt;
  WorkerChannel* rank0 = a.channel(a.lead_rank());
  if (checkpoint && !a.cancel_requested() && job.record.state == JobState::kRunning && rank0 != nullptr) {
    a.RequestStop(Attempt::Stop::kCancelAfterCheckpoint);
    WorkerCommand cmd{WorkerCommand::Kind::kCheckpoint, "cancel --checkpoint"};
    cmd.request_id = request_id;
    cmd.stop_after = true;
    rank0->Push(cmd);
    jobs_->AddEvent(job, absl::StrCat("cancel requested: checkpoint (request ", request_id, "), then stop"));
    return job.record;
  }
  if (a.stop() == Attempt::Stop::kCancel) return job.record;  // stopping already
  if (checkpoint && !a.cancel_requested() && job.record.state != JobState::kRunning) {
    jobs_->AddEvent(job, absl::StrCat("cancel --checkpoint of a ", JobStateName(job.record.state),
                                      " job: no step of this attempt has run, so there is nothing new to save; "
                                      "stopping without a checkpoint (`trainctl resume` starts from its latest "
                                      "checkpoint, or from the beginning if it has none)"));
  }
  a.RequestStop(Attempt::Stop::kCancel, reason);
  spdlog::info("job {}: cancel requested; stopping {} ranks", job.record.id, job.record.num_processes);
  if (!reason.empty()) jobs_->AddEvent(job, reason);
  a.Broadcast({WorkerCommand::Kind::kStop, a.stop_reason()});
  lifecycle_->StopGroup(job);
  return job.record;
}

absl::Status JobStops::RequestCheckpoint(ActiveJob& job, CheckpointType type, int64_t request_id) {
  WorkerChannel* rank0 = job.attempt ? job.attempt->channel(job.attempt->lead_rank()) : nullptr;
  const bool cancelling = job.attempt && job.attempt->cancel_requested();
  if (job.record.state != JobState::kRunning || rank0 == nullptr || cancelling) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job.record.id, " is ", JobStateName(job.record.state), cancelling ? " and being cancelled" : "",
        "; only a running job can checkpoint", cancelling ? "" : " (--wait waits until it runs)"));
  }
  WorkerCommand cmd{WorkerCommand::Kind::kCheckpoint, "requested"};
  cmd.request_id = request_id;
  cmd.type = type;
  rank0->Push(cmd);
  spdlog::info("job {}: checkpoint requested (request {})", job.record.id, request_id);
  return absl::OkStatus();
}

bool JobStops::StopForShutdown(ActiveJob& job, ShutdownMode mode, int64_t request_id) {
  Attempt& a = *job.attempt;
  switch (mode) {
    case ShutdownMode::kDetach:
      // The streams end; the workers go on and reconnect to the next coordinator.
      jobs_->AddEvent(job,
                      "the coordinator stopped (--on-shutdown detach): the job trains on, and a coordinator started "
                      "on the same state directory adopts it");
      a.CloseChannels();
      for (auto& w : job.watchers) w->Close();
      return false;
    case ShutdownMode::kStop:
      lifecycle_->StopGroup(job);
      lifecycle_->End(job, JobState::kFailed, "the coordinator shut down while the job was running");
      return true;
    case ShutdownMode::kCheckpoint: break;
  }
  if (a.cancel_requested()) return true;  // it stops anyway, and ends CANCELLED
  a.RequestStop(Attempt::Stop::kForRestart);
  WorkerChannel* rank0 = a.channel(a.lead_rank());
  if (job.record.state == JobState::kRunning && rank0 != nullptr && !a.failed()) {
    WorkerCommand cmd{WorkerCommand::Kind::kCheckpoint, "the coordinator is stopping"};
    cmd.request_id = request_id;
    cmd.stop_after = true;
    rank0->Push(cmd);
    jobs_->AddEvent(job, absl::StrCat("the coordinator is stopping: checkpoint (request ", request_id,
                                      "), then stop; the job resumes when it starts again"));
  } else {
    lifecycle_->StopGroup(job);
    jobs_->AddEvent(job,
                    "the coordinator is stopping: the job resumes from its latest checkpoint when it starts again");
  }
  return true;
}

std::vector<std::string> JobStops::Shutdown(ShutdownMode mode, PendingRequests* requests) {
  lifecycle_->BeginShutdown();
  std::vector<std::string> stopping;
  int running = 0;
  for (const std::string& id : jobs_->ids()) {
    ActiveJob& job = *jobs_->Find(id);
    if (!job.attempt || job.record.state == JobState::kQueued) continue;
    ++running;
    if (StopForShutdown(job, mode, requests->NextId())) stopping.push_back(id);
  }
  if (mode == ShutdownMode::kDetach && running > 0) {
    spdlog::warn(
        "trainyard-server: {} job(s) left training, detached (--on-shutdown detach): a server started on the same "
        "state directory adopts them; --on-shutdown stop or checkpoint stops them with the server",
        running);
  }
  return stopping;
}

void JobStops::StopGroups(const std::vector<std::string>& ids) {
  for (const std::string& id : ids) {
    ActiveJob* job = jobs_->Find(id);
    if (job != nullptr && job->attempt && job->record.state != JobState::kQueued) lifecycle_->StopGroup(*job);
  }
}

}  // namespace trainyard
