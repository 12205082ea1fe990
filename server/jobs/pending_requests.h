// PendingRequests: what the coordinator asked of a job's ranks and someone
// waits to hear back — checkpoint requests (answered by rank 0's checkpoint
// report) and diagnose requests (answered by every rank's flight record) —
// under one numbering of request ids.
//
// Not thread-safe: the JobManager calls it under its mutex and waits for
// answers on that mutex.
#ifndef TRAINYARD_SERVER_JOBS_PENDING_REQUESTS_H_
#define TRAINYARD_SERVER_JOBS_PENDING_REQUESTS_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "common/flight_record.h"
#include "common/step_metrics.h"
#include "server/health/hang_diagnosis.h"

namespace trainyard {

class PendingRequests {
 public:
  using Time = std::chrono::steady_clock::time_point;

  int64_t NextId() { return next_id_++; }

  // Rank 0's report of a checkpoint; kept when it answers a request
  // (request_id != 0), the newest kCheckpointsKept of them.
  static constexpr size_t kCheckpointsKept = 1000;
  void CheckpointReported(const CheckpointEvent& c);
  bool has_checkpoint(int64_t request_id) const { return checkpoints_.count(request_id) > 0; }
  // The report answering `request_id`, once (then forgotten).
  std::optional<CheckpointEvent> TakeCheckpoint(int64_t request_id);

  // A diagnose request to the `world_size` ranks of attempt `attempt` of
  // `job_id`, answered until `deadline`; returns its id.
  int64_t StartDiagnosis(const std::string& job_id, int32_t attempt, int32_t world_size, Time deadline);
  // One rank's answer; ignored unless it answers that request of that attempt.
  bool AddFlightRecord(const std::string& job_id, int32_t attempt, int64_t request_id, FlightRecord record);
  // The request, or null when unknown (or taken).
  const PendingDiagnosis* diagnosis(int64_t request_id) const;
  // The request with its answers so far, once (then forgotten).
  std::optional<PendingDiagnosis> TakeDiagnosis(int64_t request_id);
  // Forgets requests nobody waits for any more: their deadline passed a
  // minute before `now`.
  void ExpireDiagnoses(Time now);

 private:
  int64_t next_id_ = 1;
  std::map<int64_t, CheckpointEvent> checkpoints_;  // by request id
  std::map<int64_t, PendingDiagnosis> diagnoses_;   // by request id
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_JOBS_PENDING_REQUESTS_H_
