#include "server/jobs/pending_requests.h"

namespace trainyard {

void PendingRequests::CheckpointReported(const CheckpointEvent& c) {
  if (c.request_id == 0) return;
  checkpoints_[c.request_id] = c;
  while (checkpoints_.size() > kCheckpointsKept) checkpoints_.erase(checkpoints_.begin());
}

std::optional<CheckpointEvent> PendingRequests::TakeCheckpoint(int64_t request_id) {
  auto it = checkpoints_.find(request_id);
  if (it == checkpoints_.end()) return std::nullopt;
  CheckpointEvent c = std::move(it->second);
  checkpoints_.erase(it);
  return c;
}

int64_t PendingRequests::StartDiagnosis(const std::string& job_id, int32_t attempt, int32_t world_size, Time deadline) {
  const int64_t id = NextId();
  PendingDiagnosis& p = diagnoses_[id];
  p.job_id = job_id;
  p.attempt = attempt;
  p.world_size = world_size;
  p.deadline = deadline;
  return id;
}

bool PendingRequests::AddFlightRecord(const std::string& job_id, int32_t attempt, int64_t request_id,
                                      FlightRecord record) {
  auto it = diagnoses_.find(request_id);
  if (it == diagnoses_.end() || it->second.job_id != job_id || it->second.attempt != attempt) return false;
  if (record.rank < 0 || record.rank >= it->second.world_size) return false;
  it->second.answers[record.rank] = std::move(record);
  return true;
}

const PendingDiagnosis* PendingRequests::diagnosis(int64_t request_id) const {
  auto it = diagnoses_.find(request_id);
  return it == diagnoses_.end() ? nullptr : &it->second;
}

std::optional<PendingDiagnosis> PendingRequests::TakeDiagnosis(int64_t request_id) {
  auto it = diagnoses_.find(request_id);
  if (it == diagnoses_.end()) return std::nullopt;
  PendingDiagnosis p = std::move(it->second);
  diagnoses_.erase(it);
  return p;
}

void PendingRequests::ExpireDiagnoses(Time now) {
  for (auto it = diagnoses_.begin(); it != diagnoses_.end();) {
    it = now - it->second.deadline > std::chrono::minutes(1) ? diagnoses_.erase(it) : std::next(it);
  }
}

}  // namespace trainyard
