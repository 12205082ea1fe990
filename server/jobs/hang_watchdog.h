// The hang watchdog's rules for one running job: when rank 0 made no
// progress (a step or a checkpoint) within the job's step_timeout_s, ask
// every connected rank for its flight record, wait for the answers (at most
// a few seconds), and then call the job hung with the diagnosis of what
// came (server/health/hang_diagnosis.h). Progress in the meantime calls it off.
//
// Not thread-safe: the JobManager calls it under its mutex.
#ifndef TRAINYARD_SERVER_JOBS_HANG_WATCHDOG_H_
#define TRAINYARD_SERVER_JOBS_HANG_WATCHDOG_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "server/jobs/active_job.h"
#include "server/jobs/job_handlers.h"
#include "server/jobs/pending_requests.h"

namespace trainyard {

// Sends a diagnose request to every connected rank of the job's attempt,
// to be answered within `wait` of the clock's now; returns its id.
int64_t AskForFlightRecords(ActiveJob& job, const TimeSource& clock, PendingRequests* requests,
                            std::chrono::milliseconds wait);

// `diagnose`: asks the ranks of a running (or recovering) job;
// FailedPrecondition for a job in another state.
absl::StatusOr<int64_t> RequestDiagnosis(ActiveJob& job, const TimeSource& clock, PendingRequests* requests,
                                         std::chrono::milliseconds wait);

// The diagnose request `request_id` with what its ranks answered, diagnosed
// at the clock's now (then forgotten); none when unknown or taken.
std::optional<Diagnosis> TakeDiagnosis(int64_t request_id, const TimeSource& clock, PendingRequests* requests);

struct HangVerdict {
  bool hung = false;
  std::string failure;    // the group's failure, when hung
  std::string diagnosis;  // what the flight records say (may be empty)
  // The ranks the diagnosis blames: behind, or silent (ascending, each once).
  std::vector<int32_t> culprits;
};

// One look at a running job at the clock's now (REQUIRES: job.attempt): may
// send the diagnose request (recorded in the attempt), and says when the
// job is hung.
HangVerdict CheckForHang(ActiveJob& job, const TimeSource& clock, PendingRequests* requests,
                         std::chrono::milliseconds diagnose_wait);

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_JOBS_HANG_WATCHDOG_H_
