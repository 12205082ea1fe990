// JobLifecycle: how a job moves between its states — queued, an attempt
// launched (or adopted after a coordinator restart), its first failure
// stopping the group, the restart policy deciding after its last rank ended
// (queued again to resume, with a backoff after repeated failures, or
// ended), and an ended job let go. It works on the parts the JobManager
// owns: the JobTable, the Scheduler and the Launchers.
//
// Not thread-safe: the JobManager calls it under its mutex.
#ifndef TRAINYARD_SERVER_JOB_LIFECYCLE_H_
#define TRAINYARD_SERVER_JOB_LIFECYCLE_H_

#include <chrono>
#include <string>

#include "server/active_job.h"
#include "server/attempt.h"
#include "server/job_table.h"
#include "server/launchers.h"
#include "server/scheduler.h"
#include "server/server_metrics.h"
#include "server/shutdown_mode.h"
#include "server/spec_admission.h"

namespace trainyard {

struct LifecycleOptions {
  // Address rank 0 binds its rendezvous store on (local jobs).
  std::string master_addr = "127.0.0.1";
  // Root of worker logs: <state_dir>/jobs/<id>/attempt-<n>/rank-<r>.log.
  std::string state_dir;
  // Base of the restart backoff (server/restart_policy.h).
  std::chrono::milliseconds restart_backoff{1000};
  // Where workers reach the WorkerService: on this host, and elsewhere.
  std::string coordinator_addr, remote_coordinator_addr;
};

class JobLifecycle {
 public:
  // Every part must outlive the lifecycle.
  JobLifecycle(JobTable* jobs, Scheduler* scheduler, Launchers* launchers, const SpecAdmission* admission,
               ServerMetrics* metrics, LifecycleOptions options);

  void set_coordinator_addr(const std::string& addr, const std::string& remote_addr);
  const LifecycleOptions& options() const { return options_; }

  // Queues the job (behind the jobs waiting already) and starts what can.
  void Enqueue(ActiveJob& job);
  // Starts the waiting jobs the scheduler lets start now and preempts the
  // running jobs it picks for them.
  void TrySchedule();
  // Tells the scheduler when running jobs are expected to end (their
  // remaining steps × rank 0's step time) and what waiting jobs will run.
  void UpdateEstimates();
  // A job found starting or running after a coordinator restart: its
  // attempt is followed again (RECOVERING), its ranks have
  // reattach_timeout_s to reconnect.
  void Adopt(ActiveJob& job);
  // Acts on what a change of the job's attempt did: records its event,
  // stops the group on its first failure, and once every rank has ended
  // lets the restart policy decide (which may queue the job again or end it).
  void Apply(ActiveJob& job, const Attempt::Update& update);
  // Stops the attempt's workers.
  void StopGroup(ActiveJob& job);
  // Cancels a job whose attempt runs (REQUIRES: job.attempt). With
  // `checkpoint`, a running job's rank 0 saves a checkpoint (request
  // `request_id`) at its next step boundary and every rank stops; a later
  // plain cancel stops it at once.
  void Cancel(ActiveJob& job, bool checkpoint, int64_t request_id);
  // The coordinator stops: treats a job whose attempt runs as `mode` says
  // (REQUIRES: job.attempt). Returns whether its workers are stopping.
  bool StopForShutdown(ActiveJob& job, ShutdownMode mode, int64_t request_id);
  // Ends the job in `state`: its resources, streams and series go.
  void End(ActiveJob& job, JobState state, const std::string& reason);
  // Starts nothing from now on; attempts that end are not requeued (but for
  // jobs stopped to resume after the restart).
  void Shutdown();
  bool shut_down() const { return shut_down_; }

  std::string LogDir(const std::string& job_id, int32_t attempt) const;

 private:
  Demand DemandOf(const JobSpec& spec) const;
  JobClaim ClaimOf(const ActiveJob& job) const;
  // Stops `victim` for `for_job`: rank 0 checkpoints at its next step
  // boundary and every rank stops; the job is queued again to resume.
  void Preempt(ActiveJob& victim, const Scheduler::Preemption& why);
  void StartJob(ActiveJob& job);
  void EndAttempt(ActiveJob& job);
  LaunchContext ContextOf(const ActiveJob& job) const;

  JobTable* const jobs_;
  Scheduler* const scheduler_;
  Launchers* const launchers_;
  const SpecAdmission* const admission_;
  ServerMetrics* const metrics_;
  LifecycleOptions options_;
  bool shut_down_ = false;
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_JOB_LIFECYCLE_H_
