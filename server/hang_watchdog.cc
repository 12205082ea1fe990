#include "server/hang_watchdog.h"

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "spdlog/spdlog.h"

namespace trainyard {

int64_t AskForFlightRecords(ActiveJob& job, PendingRequests* requests, std::chrono::milliseconds wait) {
  const int64_t request_id = requests->StartDiagnosis(job.record.id, job.record.attempt, job.record.num_processes,
                                                      std::chrono::steady_clock::now() + wait);
  WorkerCommand cmd{WorkerCommand::Kind::kDiagnose, "diagnose"};
  cmd.request_id = request_id;
  job.attempt->Broadcast(cmd);
  spdlog::info("job {}: diagnose request {} sent to {} of {} ranks", job.record.id, request_id,
               job.attempt->channels().size(), job.record.num_processes);
  return request_id;
}

HangVerdict CheckForHang(ActiveJob& job, std::chrono::steady_clock::time_point now, PendingRequests* requests,
                         std::chrono::milliseconds diagnose_wait) {
  Attempt& a = *job.attempt;
  if (job.record.state != JobState::kRunning || a.stopping()) return {};
  const double timeout = job.spec.step_timeout_s;
  if (timeout <= 0 || now - job.progress.last_progress() <= std::chrono::duration<double>(timeout)) {
    // It moved again while its ranks were being asked.
    if (a.hang_diagnosis() != 0) requests->TakeDiagnosis(a.hang_diagnosis());
    a.set_hang_diagnosis(0);
    return {};
  }
  if (a.hang_diagnosis() == 0) {
    spdlog::warn("job {}: no step progress within step_timeout_s ({} s); asking its ranks why", job.record.id, timeout);
    a.set_hang_diagnosis(AskForFlightRecords(job, requests, diagnose_wait));
    return {};
  }
  const PendingDiagnosis* p = requests->diagnosis(a.hang_diagnosis());
  if (p != nullptr && !p->complete() && now < p->deadline) return {};  // still answering
  HangVerdict v;
  v.hung = true;
  if (std::optional<PendingDiagnosis> done = requests->TakeDiagnosis(a.hang_diagnosis())) {
    v.diagnosis = DiagnoseHang(done->world_size, done->answers, NowMicros()).verdict;
  }
  a.set_hang_diagnosis(0);
  v.failure = absl::StrCat("no step progress within step_timeout_s (", timeout, " s) at step ", job.record.step,
                           ": the job is hung", v.diagnosis.empty() ? "" : absl::StrCat(" (", v.diagnosis, ")"));
  return v;
}

}  // namespace trainyard
