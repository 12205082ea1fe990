// AttemptWatch: the periodic look at every attempt (the JobManager's
// watchdog, every 500 ms). It updates the scheduler's estimates and starts
// what may start now (back-offs over), then for each attempt: fails one
// whose workers did not reattach in time after a coordinator restart,
// stops a group preempted past its grace, takes
// out ranks whose stream stayed lost (where the fault-tolerance mode takes
// ranks out), names or evicts a straggler, and fails a hung group (the
// hang watchdog) or, where the mode allows, evicts the ranks it blames.
// What follows each finding is the JobLifecycle's; what one pass finds of an
// attempt changes its group once (RankSupervisor::BeginBatch).
//
// Not thread-safe: the JobManager calls it under its mutex.
#ifndef TRAINYARD_SERVER_JOBS_ATTEMPT_WATCH_H_
#define TRAINYARD_SERVER_JOBS_ATTEMPT_WATCH_H_

#include <chrono>
#include <string>
#include <vector>

#include "common/clock.h"
#include "server/jobs/job_lifecycle.h"
#include "server/jobs/job_table.h"
#include "server/jobs/launchers.h"
#include "server/jobs/pending_requests.h"
#include "server/jobs/worker_sessions.h"

namespace trainyard {

class AttemptWatch {
 public:
  // Every part must outlive the watch.
  AttemptWatch(JobTable* jobs, JobLifecycle* lifecycle, const Launchers* launchers, WorkerSessions* sessions,
               const TimeSource* clock)
      : jobs_(jobs), lifecycle_(lifecycle), launchers_(launchers), sessions_(sessions), clock_(clock) {}

  // One look at every job; the hang watchdog asks hung ranks through
  // `requests` and waits for their answers at most `diagnose_wait`.
  void Supervise(PendingRequests* requests, std::chrono::milliseconds diagnose_wait);

 private:
  // The job `id` if it has an attempt (not queued), else null.
  ActiveJob* AttemptOf(const std::string& id);
  // One look at attempt `a` of job `id`, inside the batch Supervise opens.
  void SuperviseAttempt(const std::string& id, Attempt* a, SteadyTime now, PendingRequests* requests,
                        std::chrono::milliseconds diagnose_wait);
  // Takes `ranks` out of their group and kills their processes (their ends
  // launch the replacements) where the mode allows it; `why` names them in
  // the job's events (one event for all). Returns false when the attempt
  // failed by it.
  bool Evict(ActiveJob& job, const std::vector<int32_t>& ranks, const std::string& why);
  // A DDP rank whose own work stays far slower than the others' (the job's
  // StragglerWatch): evicted where the mode allows it, else named in an
  // event. Returns false when the attempt failed by it.
  bool LookForStraggler(ActiveJob& job, SteadyTime now);

  JobTable* const jobs_;
  JobLifecycle* const lifecycle_;
  const Launchers* const launchers_;
  WorkerSessions* const sessions_;
  const TimeSource* const clock_;
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_JOBS_ATTEMPT_WATCH_H_
