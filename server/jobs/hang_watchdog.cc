#include "server/jobs/hang_watchdog.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "spdlog/spdlog.h"

namespace trainyard {

int64_t AskForFlightRecords(ActiveJob& job, const TimeSource& clock, PendingRequests* requests,
                            std::chrono::milliseconds wait) {
  const int64_t request_id =
      requests->StartDiagnosis(job.record.id, job.record.attempt, job.record.num_processes, clock.SteadyNow() + wait);
  WorkerCommand cmd{WorkerCommand::Kind::kDiagnose, "diagnose"};
  cmd.request_id = request_id;
  job.attempt->Broadcast(cmd);
  spdlog::info("job {}: diagnose request {} sent to {} of {} ranks", job.record.id, request_id,
               job.attempt->channels().size(), job.record.num_processes);
  return request_id;
}

absl::StatusOr<int64_t> RequestDiagnosis(ActiveJob& job, const TimeSource& clock, PendingRequests* requests,
                                         std::chrono::milliseconds wait) {
  if (job.record.state != JobState::kRunning && job.record.state != JobState::kRecovering) {
    return absl::FailedPreconditionError(absl::StrCat("job ", job.record.id, " is ", JobStateName(job.record.state),
                                                      "; only a running job can be diagnosed"));
  }
  return AskForFlightRecords(job, clock, requests, wait);
}

std::optional<Diagnosis> TakeDiagnosis(int64_t request_id, const TimeSource& clock, PendingRequests* requests) {
  std::optional<PendingDiagnosis> done = requests->TakeDiagnosis(request_id);
  if (!done) return std::nullopt;
  Diagnosis d;
  d.attempt = done->attempt;
  d.answers = std::move(done->answers);
  d.result = DiagnoseHang(done->world_size, d.answers, clock.UnixMicros());
  return d;
}

HangVerdict CheckForHang(ActiveJob& job, const TimeSource& clock, PendingRequests* requests,
                         std::chrono::milliseconds diagnose_wait) {
  const auto now = clock.SteadyNow();
  Attempt& a = *job.attempt;
  if (job.record.state != JobState::kRunning || a.stopping()) return {};
  const double timeout = job.spec.step_timeout_s;
  if (timeout <= 0 || now - job.progress.last_progress() <= std::chrono::duration<double>(timeout)) {
    // It moved again while its ranks were being asked.
    if (a.watch().hang_diagnosis != 0) requests->TakeDiagnosis(a.watch().hang_diagnosis);
    a.watch().hang_diagnosis = 0;
    return {};
  }
  if (a.watch().hang_diagnosis == 0) {
    spdlog::warn("job {}: no step progress within step_timeout_s ({} s); asking its ranks why", job.record.id, timeout);
    a.watch().hang_diagnosis = AskForFlightRecords(job, clock, requests, diagnose_wait);
    return {};
  }
  const PendingDiagnosis* p = requests->diagnosis(a.watch().hang_diagnosis);
  if (p != nullptr && !p->complete() && now < p->deadline) return {};  // still answering
  HangVerdict v;
  v.hung = true;
  if (std::optional<PendingDiagnosis> done = requests->TakeDiagnosis(a.watch().hang_diagnosis)) {
    const HangDiagnosis d = DiagnoseHang(done->world_size, done->answers, clock.UnixMicros());
    v.diagnosis = d.verdict;
    std::set<int32_t> blamed(d.behind_ranks.begin(), d.behind_ranks.end());
    blamed.insert(d.silent_ranks.begin(), d.silent_ranks.end());
    v.culprits.assign(blamed.begin(), blamed.end());
  }
  a.watch().hang_diagnosis = 0;
  v.failure = absl::StrCat("no step progress within step_timeout_s (", timeout, " s) at step ", job.record.step,
                           ": the job is hung", v.diagnosis.empty() ? "" : absl::StrCat(" (", v.diagnosis, ")"));
  return v;
}

}  // namespace trainyard
