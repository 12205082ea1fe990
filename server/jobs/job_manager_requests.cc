// The JobManager's requests to a running job's ranks that are answered
// later: a checkpoint (trainctl checkpoint --wait) and a diagnosis
// (trainctl diagnose); both wait on the manager's mutex for the answer.
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "server/jobs/hang_watchdog.h"
#include "server/jobs/job_manager.h"
#include "server/jobs/manager_lock.h"

namespace trainyard {

absl::StatusOr<int64_t> JobManager::RequestCheckpoint(const std::string& id, CheckpointType type) {
  ManagerLock lock(&mu_);
  absl::StatusOr<ActiveJob*> found = jobs_.FindActive(id, "; only a running job can checkpoint");
  if (!found.ok()) return found.status();
  const int64_t request_id = requests_.NextId();
  if (auto s = stops_.RequestCheckpoint(**found, type, request_id); !s.ok()) return s;
  return request_id;
}

absl::StatusOr<CheckpointEvent> JobManager::WaitCheckpoint(const std::string& id, int64_t request_id,
                                                           std::chrono::system_clock::time_point deadline) {
  ManagerLock lock(&mu_);
  auto answered_or_ended = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return requests_.has_checkpoint(request_id) || jobs_.Find(id) == nullptr;
  };
  mu_.AwaitWithDeadline(absl::Condition(&answered_or_ended), absl::FromChrono(deadline));
  if (std::optional<CheckpointEvent> c = requests_.TakeCheckpoint(request_id)) return *c;
  if (jobs_.Find(id) == nullptr) {
    return absl::AbortedError(absl::StrCat("job ", id, " ended before checkpoint request ", request_id, " completed"));
  }
  return absl::DeadlineExceededError(absl::StrCat("checkpoint request ", request_id, " of job ", id,
                                                  " has not completed yet; see `trainctl checkpoints ", id, "`"));
}

absl::StatusOr<int64_t> JobManager::RequestDiagnosis(const std::string& id, std::chrono::milliseconds wait) {
  ManagerLock lock(&mu_);
  absl::StatusOr<ActiveJob*> found = jobs_.FindActive(id, "; only a running job can be diagnosed");
  if (!found.ok()) return found.status();
  return trainyard::RequestDiagnosis(**found, *clock_, &requests_, wait);
}

absl::StatusOr<Diagnosis> JobManager::WaitDiagnosis(int64_t request_id) {
  ManagerLock lock(&mu_);
  const PendingDiagnosis* p = requests_.diagnosis(request_id);
  if (p == nullptr) return absl::NotFoundError(absl::StrCat("no diagnose request ", request_id));
  auto answered = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const PendingDiagnosis* q = requests_.diagnosis(request_id);
    return q == nullptr || q->complete();
  };
  mu_.AwaitWithTimeout(absl::Condition(&answered), absl::FromChrono(p->deadline - clock_->SteadyNow()));
  std::optional<Diagnosis> d = TakeDiagnosis(request_id, *clock_, &requests_);
  if (!d) return absl::NotFoundError(absl::StrCat("no diagnose request ", request_id));
  return *d;
}

}  // namespace trainyard
