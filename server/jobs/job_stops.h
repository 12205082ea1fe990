// JobStops: the stops the coordinator asks of a job — a cancel (at once, or
// after rank 0 saved a checkpoint), a checkpoint request, and its own
// shutdown (the workers detached, stopped, or checkpointed to resume after
// the restart). What follows a group's end is the JobLifecycle's.
//
// Not thread-safe: the JobManager calls it under its mutex.
#ifndef TRAINYARD_SERVER_JOBS_JOB_STOPS_H_
#define TRAINYARD_SERVER_JOBS_JOB_STOPS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/jobs/job_lifecycle.h"
#include "server/jobs/job_table.h"
#include "server/jobs/pending_requests.h"
#include "server/jobs/shutdown_mode.h"

namespace trainyard {

class JobStops {
 public:
  // Every part must outlive the stops.
  JobStops(JobTable* jobs, JobLifecycle* lifecycle) : jobs_(jobs), lifecycle_(lifecycle) {}

  // Cancels a job: a queued one ends CANCELLED at once. With `checkpoint`,
  // a running job's rank 0 saves a checkpoint (request `request_id`) at its
  // next step boundary and every rank stops; a later plain cancel stops it
  // at once. Returns its record.
  // `reason`: who cancels and why, as the job's end and its ranks say it
  // ("": a user, "cancelled by user").
  JobRecord Cancel(ActiveJob& job, bool checkpoint, int64_t request_id, const std::string& reason = "");
  // Rank 0 of a running job saves a checkpoint of `type` (request
  // `request_id`); FailedPrecondition when the job is not running.
  absl::Status RequestCheckpoint(ActiveJob& job, CheckpointType type, int64_t request_id);
  // The coordinator stops: starts nothing from now on (attempts that end
  // are not requeued but for jobs stopped to resume after the restart), and
  // treats every job whose attempt runs as `mode` says. Returns the ids of
  // the jobs whose workers are stopping.
  std::vector<std::string> Shutdown(ShutdownMode mode, PendingRequests* requests);
  // Stops the groups of these jobs that have not ended.
  void StopGroups(const std::vector<std::string>& ids);

 private:
  // Treats a job whose attempt runs as `mode` says (REQUIRES: job.attempt).
  // Returns whether its workers are stopping.
  bool StopForShutdown(ActiveJob& job, ShutdownMode mode, int64_t request_id);

  JobTable* const jobs_;
  JobLifecycle* const lifecycle_;
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_JOBS_JOB_STOPS_H_
