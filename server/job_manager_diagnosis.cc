// JobManager: hang diagnosis — diagnose requests down the workers' streams,
// their flight records back, and the watchdog that uses them.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "server/job_manager.h"

namespace trainyard {
int64_t JobManager::StartDiagnosis(ActiveJob& job, std::chrono::milliseconds wait) {
  const int64_t request_id = next_request_id_++;
  PendingDiagnosis& p = diagnoses_[request_id];
  p.job_id = job.record.id;
  p.attempt = job.record.attempt;
  p.world_size = job.record.num_processes;
  p.deadline = std::chrono::steady_clock::now() + wait;
  WorkerCommand cmd{WorkerCommand::Kind::kDiagnose, "diagnose"};
  cmd.request_id = request_id;
  for (auto& [rank, channel] : job.run.channels) channel->Push(cmd);
  spdlog::info("job {}: diagnose request {} sent to {} of {} ranks", job.record.id, request_id, job.run.channels.size(),
               p.world_size);
  return request_id;
}

absl::StatusOr<int64_t> JobManager::RequestDiagnosis(const std::string& id, std::chrono::milliseconds wait) {
  std::lock_guard<std::mutex> lock(mu_);
  absl::StatusOr<ActiveJob*> found = FindActive(id, "; only a running job can be diagnosed");
  if (!found.ok()) return found.status();
  ActiveJob& job = **found;
  if (job.record.state != JobState::kRunning && job.record.state != JobState::kRecovering) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", id, " is ", JobStateName(job.record.state), "; only a running job can be diagnosed"));
  }
  return StartDiagnosis(job, wait);
}

void JobManager::ReportFlightRecord(const std::string& job_id, int32_t attempt, int64_t request_id,
                                    FlightRecord record) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = diagnoses_.find(request_id);
  if (it == diagnoses_.end() || it->second.job_id != job_id || it->second.attempt != attempt) return;
  if (record.rank < 0 || record.rank >= it->second.world_size) return;
  it->second.answers[record.rank] = std::move(record);
  diagnosis_cv_.notify_all();
}

absl::StatusOr<JobManager::Diagnosis> JobManager::WaitDiagnosis(int64_t request_id) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = diagnoses_.find(request_id);
  if (it == diagnoses_.end()) return absl::NotFoundError(absl::StrCat("no diagnose request ", request_id));
  const auto deadline = it->second.deadline;
  diagnosis_cv_.wait_until(lock, deadline, [&] {
    auto p = diagnoses_.find(request_id);
    return p == diagnoses_.end() || p->second.complete();
  });
  it = diagnoses_.find(request_id);
  if (it == diagnoses_.end()) return absl::NotFoundError(absl::StrCat("no diagnose request ", request_id));
  Diagnosis d;
  d.attempt = it->second.attempt;
  d.answers = std::move(it->second.answers);
  d.result = DiagnoseHang(it->second.world_size, d.answers, NowMicros());
  diagnoses_.erase(it);
  return d;
}

void JobManager::CheckHangs(SteadyTime now) {
  for (auto& [id, job] : active_) {
    if (job.record.state != JobState::kRunning || job.run.failed || job.cancel_requested || job.run.preempted) continue;
    const double timeout = job.spec.step_timeout_s;
    const bool hung = timeout > 0 && now - job.last_progress > std::chrono::duration<double>(timeout);
    if (!hung) {
      // It moved again while its ranks were being asked.
      if (job.run.hang_diagnosis != 0) diagnoses_.erase(job.run.hang_diagnosis);
      job.run.hang_diagnosis = 0;
      continue;
    }
    if (job.run.hang_diagnosis == 0) {
      spdlog::warn("job {}: no step progress within step_timeout_s ({} s); asking its ranks why", id, timeout);
      job.run.hang_diagnosis =
          StartDiagnosis(job, std::chrono::duration_cast<std::chrono::milliseconds>(kWatchdogDiagnoseWait));
      continue;
    }
    auto p = diagnoses_.find(job.run.hang_diagnosis);
    if (p != diagnoses_.end() && !p->second.complete() && now < p->second.deadline) continue;
    std::string verdict;
    if (p != diagnoses_.end()) {
      verdict = DiagnoseHang(p->second.world_size, p->second.answers, NowMicros()).verdict;
      diagnoses_.erase(p);
    }
    job.run.hang_diagnosis = 0;
    if (!verdict.empty()) AddEvent(job, absl::StrCat("hang diagnosis: ", verdict));
    FailGroup(job, -1,
              absl::StrCat("no step progress within step_timeout_s (", timeout, " s) at step ", job.record.step,
                           ": the job is hung", verdict.empty() ? "" : absl::StrCat(" (", verdict, ")")));
  }
  // Requests nobody waits for any more (their job ended or a client left).
  for (auto it = diagnoses_.begin(); it != diagnoses_.end();) {
    it = now - it->second.deadline > std::chrono::minutes(1) ? diagnoses_.erase(it) : std::next(it);
  }
}

}  // namespace trainyard
