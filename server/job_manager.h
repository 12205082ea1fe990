// JobManager: the coordinator's core, a locked router. It holds every job
// that has not ended (ActiveJob) and, under one mutex, routes people's
// requests and workers' reports to the parts that own the rules:
//   SpecAdmission   what a spec must pass on this server;
//   Scheduler       the queue, this host's slots and GPUs, what starts next;
//   JobTable        the jobs not ended, their durable record and watchers;
//   JobLifecycle    launches, failures, what follows an attempt's end;
//   Attempt         one attempt's ranks and how they end;
//   JobProgress     steps, goodput, badput, recovery;
//   PendingRequests checkpoint and diagnose requests someone waits on.
// It persists every state change through the JobStore, starts and stops
// workers through the Launchers and tells the job's watchers.
//
// Thread-safe (JobRequestHandler, WorkerHandler). The store, launchers and
// metrics are called with the mutex held and never call back into the
// manager synchronously (launchers report exits from their own threads).
#ifndef TRAINYARD_SERVER_JOB_MANAGER_H_
#define TRAINYARD_SERVER_JOB_MANAGER_H_

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/job_spec.h"
#include "common/policy.h"
#include "server/active_job.h"
#include "server/caller.h"
#include "server/job_handlers.h"
#include "server/job_lifecycle.h"
#include "server/job_store.h"
#include "server/job_table.h"
#include "server/launcher.h"
#include "server/launchers.h"
#include "server/pending_requests.h"
#include "server/scheduler.h"
#include "server/server_metrics.h"
#include "server/shutdown_mode.h"
#include "server/spec_admission.h"

namespace trainyard {

struct JobManagerOptions {
  // CPU slots of this host; a job takes num_processes of them.
  int slots = 1;
  // Root of worker logs: <state_dir>/jobs/<id>/attempt-<n>/rank-<r>.log.
  std::string state_dir = "trainyard-state";
  // Where workers reach the WorkerService (host:port): local ones, and
  // those on other hosts.
  std::string coordinator_addr;
  std::string remote_coordinator_addr;
  // Address rank 0 binds its rendezvous store on; other ranks connect to it.
  std::string master_addr = "127.0.0.1";
  SpecLimits limits;
  // Jobs waiting in the queue at most; further submissions are refused.
  int max_queued_jobs = 1000;
  // Paths a job may name (checkpoint.project_dir, resume sources) must lie
  // under one of these; empty: the state directory and the working directory.
  std::vector<std::string> allowed_roots;
  // GPUs of this host for local CUDA jobs: one per rank, never shared.
  int gpus = 0;
  int ranks_per_gpu = 1;  // ranks of local CUDA jobs one GPU may take
  // Between repeated failures of a job (no attempt trained a step in
  // between), its restart waits: not after the first failure, then
  // restart_backoff, doubling up to 30 s (0: never).
  std::chrono::milliseconds restart_backoff{1000};
  // The launcher of specs that name none (launcher: default).
  LauncherKind default_launcher = LauncherKind::kLocal;
  // The Python of script jobs whose spec names none (--script-python).
  std::string script_python = "python3";
  // Fair share: how fast past usage fades (--fair-share-half-life).
  std::chrono::seconds fair_share_half_life{24 * 3600};
  // A job is not preempted for another before it ran this long since it
  // started (--preemption-min-run-time).
  std::chrono::seconds preemption_min_run_time{600};
};

class JobManager final : public JobRequestHandler, public WorkerHandler {
 public:
  // `launcher` starts local jobs; RegisterLauncher adds others.
  JobManager(JobStore* store, Launcher* launcher, ServerMetrics* metrics, JobManagerOptions options);
  ~JobManager() override;
  JobManager(const JobManager&) = delete;
  JobManager& operator=(const JobManager&) = delete;

  // Loads the store: queued jobs are queued again; jobs that were starting or
  // running when the previous coordinator stopped become RECOVERING: their
  // workers (which keep training) have reattach_timeout_s to reconnect with
  // the same attempt and token and go on; a group that does not is stopped
  // and restarted from its latest checkpoint. Call once, before serving.
  absl::Status Recover();
  // Where workers reach the WorkerService: local ones, and those on other
  // hosts (Slurm, external; default: the same).
  void set_coordinator_addr(const std::string& addr, const std::string& remote_addr = "");
  // Makes `kind` (slurm) available to jobs. Call before Recover.
  void RegisterLauncher(LauncherKind kind, Launcher* launcher);

  // The users' policy (classes, quotas, group visibility) from now on: at
  // start and on every reload. What runs keeps running; queued jobs keep
  // the priority they were submitted with.
  void SetPolicy(std::shared_ptr<const Policy> policy);

  // JobRequestHandler.
  absl::StatusOr<JobRecord> Submit(const std::string& spec_text, const std::string& accelerate_config,
                                   const Caller& by) override;
  // As anyone on a server without users.
  absl::StatusOr<JobRecord> Submit(const std::string& spec_text, const std::string& accelerate_config = "") {
    return Submit(spec_text, accelerate_config, Caller{});
  }
  absl::Status Authorize(const Caller& by, const std::string& id, const std::string& action, bool read_only) override;
  absl::StatusOr<std::vector<QueuedJob>> Queue(const Caller& by, bool all_users) override;
  absl::StatusOr<JobRecord> Get(const std::string& id) override;
  absl::StatusOr<std::vector<JobEvent>> Events(const std::string& id) override;
  std::vector<StepMetrics> RankSamples(const std::string& id) override;
  absl::StatusOr<JobPage> List(const std::set<JobState>& states, int page_size, const std::string& page_token,
                               const Caller& by, bool all_users) override;
  absl::StatusOr<JobPage> List(const std::set<JobState>& states, int page_size, const std::string& page_token) {
    return List(states, page_size, page_token, Caller{}, /*all_users=*/true);
  }
  absl::StatusOr<JobRecord> Cancel(const std::string& id, bool checkpoint = false) override;
  absl::StatusOr<int64_t> RequestCheckpoint(const std::string& id, CheckpointType type) override;
  absl::StatusOr<CheckpointEvent> WaitCheckpoint(const std::string& id, int64_t request_id,
                                                 std::chrono::system_clock::time_point deadline) override;
  absl::StatusOr<std::vector<CheckpointRecord>> Checkpoints(const std::string& id) override;
  absl::StatusOr<JobRecord> Resume(const std::string& id, const std::string& from, int32_t num_processes,
                                   const Caller& by) override;
  absl::StatusOr<JobRecord> Resume(const std::string& id, const std::string& from, int32_t num_processes) {
    return Resume(id, from, num_processes, Caller{});
  }
  absl::StatusOr<std::shared_ptr<JobWatch>> Watch(const std::string& id) override;
  absl::StatusOr<std::pair<std::string, int32_t>> LogPath(const std::string& id, int32_t rank,
                                                          int32_t attempt) override;
  absl::StatusOr<JoinInfo> GetJoinInfo(const std::string& id) override;
  absl::StatusOr<int64_t> RequestDiagnosis(const std::string& id, std::chrono::milliseconds wait) override;
  absl::StatusOr<Diagnosis> WaitDiagnosis(int64_t request_id) override;

  // WorkerHandler.
  absl::StatusOr<WorkerAttachment> AttachWorker(const std::string& job_id, int32_t rank, int32_t attempt,
                                                const std::string& token, const std::string& advertise_addr = "",
                                                int32_t rendezvous_port = 0) override;
  void ReportMetrics(const std::string& job_id, int32_t attempt, const std::vector<StepMetrics>& samples) override;
  void ReportResult(const std::string& job_id, int32_t attempt, int32_t rank, WorkerOutcome outcome,
                    const std::string& error) override;
  void ReportCheckpoint(const std::string& job_id, int32_t attempt, const CheckpointEvent& checkpoint) override;
  void ReportNote(const std::string& job_id, int32_t attempt, int32_t rank, const std::string& text) override;
  void ReportFlightRecord(const std::string& job_id, int32_t attempt, int64_t request_id, FlightRecord record) override;
  void DetachWorker(const std::string& job_id, int32_t attempt, int32_t rank,
                    const std::shared_ptr<WorkerChannel>& channel) override;

  // The launchers' exit callback.
  void OnRankExit(const RankExit& exit);

  // Call periodically: starts jobs whose restart backoff is over, ends
  // attempts whose workers did not reattach or whose external ranks are
  // gone, and runs the hang watchdog: when a running job's rank 0 made no
  // progress (step or checkpoint) within its step_timeout_s, asks its ranks
  // for their flight records (at most kWatchdogDiagnoseWait), records the
  // diagnosis as a job event and fails the group; the restart policy takes
  // it from there.
  static constexpr std::chrono::seconds kWatchdogDiagnoseWait{5};
  void CheckProgress();

  // Takes no more jobs and starts nothing; treats the running jobs as
  // `mode` says. Returns the ids of the jobs whose workers are stopping (none
  // for kDetach), for the caller to wait for (and StopGroups after a timeout).
  std::vector<std::string> Shutdown(ShutdownMode mode);
  // Stops the groups of these jobs that have not ended (SIGINT, then
  // SIGKILL after the grace): --on-shutdown checkpoint's time is up.
  void StopGroups(const std::vector<std::string>& ids);

  int free_slots();
  int free_gpus();

 private:
  SchedulerPolicy SchedulingOf(const Policy& policy) const;

  JobStore* const store_;
  ServerMetrics* const metrics_;
  const JobManagerOptions options_;
  const SpecAdmission admission_;

  absl::Mutex mu_;
  JobTable jobs_ ABSL_GUARDED_BY(mu_);  // every job not ended
  Scheduler scheduler_ ABSL_GUARDED_BY(mu_);
  PendingRequests requests_ ABSL_GUARDED_BY(mu_);
  Launchers launchers_ ABSL_GUARDED_BY(mu_);
  JobLifecycle lifecycle_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const Policy> policy_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_JOB_MANAGER_H_
