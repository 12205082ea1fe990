// ActiveJob: what the coordinator holds for one job that has not ended —
// its record and spec as stored, its current attempt (server/jobs/attempt.h),
// its progress across attempts (server/jobs/job_progress.h), its restarts and
// the people watching it. Each part keeps its own rules; the JobManager
// holds the jobs under its mutex and routes requests to their parts.
#ifndef TRAINYARD_SERVER_JOBS_ACTIVE_JOB_H_
#define TRAINYARD_SERVER_JOBS_ACTIVE_JOB_H_

#include <chrono>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/job_record.h"
#include "common/job_spec.h"
#include "server/jobs/attempt.h"
#include "server/jobs/job_history.h"
#include "server/jobs/job_progress.h"
#include "server/jobs/job_streams.h"

namespace trainyard {

struct ActiveJob {
  ActiveJob(JobRecord r, JobSpec s, ServerMetrics* metrics, const TimeSource* clock)
      : record(std::move(r)), spec(std::move(s)), progress(record.id, metrics, clock) {}

  JobRecord record;
  JobSpec spec;
  // The attempt launched last; null before the first launch and while
  // queued again.
  std::unique_ptr<Attempt> attempt;
  JobProgress progress;
  int restarts = 0;  // whole-group restarts after failures
  // Preempted by the scheduler: if its ranks have not stopped by then
  // (preemption_grace_s), the group is stopped.
  std::optional<std::chrono::steady_clock::time_point> preempt_deadline;
  std::vector<std::shared_ptr<JobWatch>> watchers;
  // Nodes presumed lost while the job's ranks ran there (a rank's stream
  // lost without an end reported: Attempt::WatchForLostNodes): its later
  // attempts and replacements leave them out.
  std::set<std::string> lost_nodes;
  // Its series across attempts (JobTable saves them to the store).
  JobHistory history;
  std::chrono::steady_clock::time_point history_saved{};
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_JOBS_ACTIVE_JOB_H_
