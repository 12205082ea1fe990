// JobLifecycle: how a job moves between its states — queued, an attempt
// launched (or adopted after a coordinator restart), its first failure
// stopping the group, the restart policy deciding after its last rank ended
// (queued again to resume, with a backoff after repeated failures, or
// ended), an ended job let go, the jobs a restart finds taken up again,
// and the periodic look at attempts that must end (workers that did not
// reattach, ranks gone, preemptions past their grace, hung groups: the
// AttemptWatch finds them, the lifecycle acts). What
// follows a rank's loss is the fault-tolerance mode's to decide (each
// attempt's RankSupervisor); the lifecycle applies its RankActions. It
// works on the parts the JobManager owns: the JobTable, the Scheduler and
// the Launchers, and reads the time from the TimeSource it is given.
//
// Not thread-safe: the JobManager calls it under its mutex.
#ifndef TRAINYARD_SERVER_JOBS_JOB_LIFECYCLE_H_
#define TRAINYARD_SERVER_JOBS_JOB_LIFECYCLE_H_

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "server/jobs/active_job.h"
#include "server/jobs/attempt.h"
#include "server/jobs/job_table.h"
#include "server/jobs/launchers.h"
#include "server/jobs/pending_requests.h"
#include "server/jobs/shutdown_mode.h"
#include "server/metrics/server_metrics.h"
#include "server/scheduling/scheduler.h"

namespace trainyard {

struct LifecycleOptions {
  // Address rank 0 binds its rendezvous store on (local jobs).
  std::string master_addr = "127.0.0.1";
  // Root of worker logs: <state_dir>/jobs/<id>/attempt-<n>/rank-<r>.log.
  std::string state_dir;
  // Base of the restart backoff (server/health/restart_policy.h).
  std::chrono::milliseconds restart_backoff{1000};
  // Where workers reach the WorkerService: on this host, and elsewhere.
  std::string coordinator_addr, remote_coordinator_addr;
  // Ranks on other hosts (Slurm): a stream lost without a result for this
  // long ends the rank, its node presumed lost (Attempt::WatchForLostNodes);
  // the job's later attempts exclude that node.
  std::chrono::milliseconds node_loss_grace{5000};
};

class JobLifecycle {
 public:
  // Every part must outlive the lifecycle.
  JobLifecycle(JobTable* jobs, Scheduler* scheduler, Launchers* launchers, ServerMetrics* metrics,
               const TimeSource* clock, LifecycleOptions options);

  void set_coordinator_addr(const std::string& addr, const std::string& remote_addr);
  const LifecycleOptions& options() const { return options_; }

  // Takes up the jobs of the store (specs parsed with `limits`): queued
  // ones are queued again; starting or running ones are adopted; one whose
  // stored spec no longer parses ends FAILED.
  absl::Status Recover(const SpecLimits& limits);
  // Queues the job (behind the jobs waiting already) and starts what can.
  void Enqueue(ActiveJob& job);
  // Queues an ended job again (`stored`: its record) to run with `spec`
  // (resuming from `from`, "" for its latest checkpoint); returns its record.
  JobRecord Resume(const JobRecord& stored, const JobSpec& spec, const std::string& from);
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
  // Acts on a decision of the attempt's RankSupervisor about `rank` (-1:
  // none): records its event, sends its command, records a heal, kills and
  // launches ranks, parks a rank that left; a failure (or a rank that
  // cannot be launched) fails the attempt. Returns false when the attempt
  // failed by it.
  bool Act(ActiveJob& job, const RankActions& actions, int32_t rank);
  // A running elastic job runs `n` ranks from now on (`trainctl scale` by
  // `by`): the scheduler takes or marks the slots, the membership launches
  // or lets go of ranks. InvalidArgument out of the spec's bounds;
  // FailedPrecondition when the job is not elastic, not running, or what
  // growing needs is not free.
  absl::Status Scale(ActiveJob& job, int32_t n, const std::string& by);
  // Stops the attempt's workers.
  void StopGroup(ActiveJob& job);
  // Ends the job in `state`: its resources, streams and series go.
  void End(ActiveJob& job, JobState state, const std::string& reason);
  // The coordinator stops (JobStops::Shutdown): nothing starts from now
  // on, and attempts that end are not requeued but for jobs stopped to
  // resume after the restart.
  void BeginShutdown();
  bool shut_down() const { return shut_down_; }

  std::string LogDir(const std::string& job_id, int32_t attempt) const;
  // The log of `rank` in attempt `attempt` (0: the latest) of the job of
  // `record`, and that attempt; InvalidArgument out of range.
  absl::StatusOr<std::pair<std::string, int32_t>> LogPath(const JobRecord& record, int32_t rank, int32_t attempt) const;
  // What a job of `spec` takes from the scheduler: slots or GPUs, how many,
  // and at least how many (an elastic job's minimum).
  Demand DemandOf(const JobSpec& spec) const;

 private:
  JobClaim ClaimOf(const ActiveJob& job) const;
  // Stops `victim` for `for_job`: rank 0 checkpoints at its next step
  // boundary and every rank stops; the job is queued again to resume.
  void Preempt(ActiveJob& victim, const Scheduler::Preemption& why);
  void StartJob(ActiveJob& job);
  // The scheduler grew or shrank elastic job `job` to `n` ranks (`why`).
  void Resize(ActiveJob& job, int32_t n, const std::string& why);
  void EndAttempt(ActiveJob& job);
  LaunchContext ContextOf(const ActiveJob& job) const;
  // The attempt's id in the cluster's scheduler (Slurm's job id), kept and
  // told in an event once known.
  void NoteExternalId(ActiveJob& job);
  // The job's next attempt (record.attempt), as its launcher runs ranks.
  std::unique_ptr<Attempt> NewAttempt(const ActiveJob& job, const Launcher::Traits& traits) const;

  JobTable* const jobs_;
  Scheduler* const scheduler_;
  Launchers* const launchers_;
  ServerMetrics* const metrics_;
  const TimeSource* const clock_;
  LifecycleOptions options_;
  bool shut_down_ = false;
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_JOBS_JOB_LIFECYCLE_H_
