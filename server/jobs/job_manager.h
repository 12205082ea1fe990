// JobManager: the coordinator's core, a locked router. Under one mutex it
// routes people's requests and workers' reports to the parts that own the
// rules (docs/design/coordinator.md draws them):
//   Admission       what a job must pass to be queued (or resumed);
//   JobTable        the jobs not ended, and the only door to the JobStore;
//   Scheduler       the queue, this host's slots and GPUs, what starts next;
//   JobLifecycle    launches, failures, restarts, ends, the periodic look;
//   WorkerSessions  ranks attaching, their reports, exits (WorkerRoutes
//                   routes the workers' calls to it);
//   Launchers       one Launcher per kind (local, slurm, external);
//   PendingRequests checkpoint and diagnose requests someone waits on.
// The parts read the time from the TimeSource it is given.
//
// Thread-safe. The store, launchers and metrics are called with the mutex
// held and never call back into the manager synchronously (launchers
// report exits from their own threads).
#ifndef TRAINYARD_SERVER_JOBS_JOB_MANAGER_H_
#define TRAINYARD_SERVER_JOBS_JOB_MANAGER_H_

#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "common/policy.h"
#include "server/auth/caller.h"
#include "server/jobs/admission.h"
#include "server/jobs/attempt_watch.h"
#include "server/jobs/job_handlers.h"
#include "server/jobs/job_lifecycle.h"
#include "server/jobs/job_manager_options.h"
#include "server/jobs/job_stops.h"
#include "server/jobs/job_table.h"
#include "server/jobs/launchers.h"
#include "server/jobs/pending_requests.h"
#include "server/jobs/refusal_log.h"
#include "server/jobs/shutdown_mode.h"
#include "server/jobs/worker_routes.h"
#include "server/jobs/worker_sessions.h"
#include "server/launch/external_launcher.h"
#include "server/metrics/server_metrics.h"
#include "server/scheduling/scheduler.h"
#include "server/store/job_store.h"

namespace trainyard {

class JobManager final : public JobRequestHandler {
 public:
  // `launcher` starts local jobs; external jobs' ranks join; RegisterLauncher
  // adds others. Every part must outlive the manager.
  JobManager(JobStore* store, Launcher* launcher, ServerMetrics* metrics, JobManagerOptions options,
             const TimeSource* clock = TimeSource::Real());
  ~JobManager() override;

  // Loads the store (JobLifecycle::Recover): jobs that were starting or
  // running when the previous coordinator stopped become RECOVERING, their
  // workers have reattach_timeout_s to reconnect. Call once, before serving.
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
  absl::StatusOr<JobRecord> Submit(const std::string& spec_text, const std::string& accelerate_config, const Caller& by,
                                   const TrialOf& trial_of = {}) override;
  // As anyone on a server without users.
  absl::StatusOr<JobRecord> Submit(const std::string& spec_text, const std::string& accelerate_config = "") {
    return Submit(spec_text, accelerate_config, Caller{});
  }
  absl::Status Authorize(const Caller& by, const std::string& id, const std::string& action, bool read_only) override;
  absl::StatusOr<QueuePage> Queue(const Caller& by, bool all_users, int32_t skip, int32_t count) override;
  absl::StatusOr<std::vector<QuotaUse>> Usage(const Caller& by, bool all_users) override;
  absl::StatusOr<JobRecord> Get(const std::string& id) override;
  absl::StatusOr<std::vector<JobEvent>> Events(const std::string& id) override;
  std::vector<StepMetrics> RankSamples(const std::string& id, int32_t first, int32_t count) override;
  std::optional<Placement> PlacementOf(const std::string& id, int32_t first, int32_t count) override;
  std::optional<ReplicaStatus> Replicas(const std::string& id) override;
  absl::StatusOr<JobRecord> Scale(const std::string& id, int32_t num_processes, const Caller& by) override;
  absl::StatusOr<JobPage> List(const std::set<JobState>& states, int page_size, const std::string& page_token,
                               const Caller& by, bool all_users, bool newest_first = false) override;
  absl::Status Delete(const std::string& id, const Caller& by) override;
  absl::StatusOr<JobPage> List(const std::set<JobState>& states, int page_size, const std::string& page_token) {
    return List(states, page_size, page_token, Caller{}, /*all_users=*/true);
  }
  absl::StatusOr<JobRecord> Cancel(const std::string& id, bool checkpoint = false,
                                   const std::string& reason = "") override;
  absl::Status AwaitRunning(const std::string& id, std::chrono::system_clock::time_point deadline) override;
  absl::StatusOr<int64_t> RequestCheckpoint(const std::string& id, CheckpointType type) override;
  absl::StatusOr<CheckpointEvent> WaitCheckpoint(const std::string& id, int64_t request_id,
                                                 std::chrono::system_clock::time_point deadline) override;
  absl::StatusOr<std::vector<CheckpointRecord>> Checkpoints(const std::string& id) override;
  absl::StatusOr<JobHistory> History(const std::string& id) override;
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

  // The workers' side and the launchers' callbacks (WorkerRoutes).
  WorkerRoutes& workers() { return routes_; }

  // Call periodically: ranks on lost nodes ended
  // (WorkerSessions::EndLostRanks), AttemptWatch::Supervise (back-offs over, reattach
  // deadlines, ranks gone, preemption grace, and the hang watchdog, whose
  // ranks answer within kWatchdogDiagnoseWait), then the usage metrics.
  static constexpr std::chrono::seconds kWatchdogDiagnoseWait{5};
  void CheckProgress();

  // Takes no more jobs and starts nothing; treats the running jobs as
  // `mode` says. Returns the ids of the jobs whose workers are stopping (none
  // for kDetach), for the caller to wait for (and StopGroups after a timeout).
  std::vector<std::string> Shutdown(ShutdownMode mode);
  // Stops the groups of these jobs that have not ended (SIGINT, then
  // SIGKILL after the grace): --on-shutdown checkpoint's time is up.
  void StopGroups(const std::vector<std::string>& ids);

  int free_slots() override;
  int free_gpus() override;

 private:
  ServerMetrics* const metrics_;
  const TimeSource* const clock_;
  const JobManagerOptions options_;
  const Admission admission_;

  absl::Mutex mu_;
  JobTable jobs_ ABSL_GUARDED_BY(mu_);  // every job not ended
  Scheduler scheduler_ ABSL_GUARDED_BY(mu_);
  PendingRequests requests_ ABSL_GUARDED_BY(mu_);
  Launchers launchers_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> reserved_ids_ ABSL_GUARDED_BY(mu_);  // drawn by a Submit still reading its files
  ExternalLauncher external_;                                // called by launchers_, under mu_
  JobLifecycle lifecycle_ ABSL_GUARDED_BY(mu_);
  WorkerSessions workers_ ABSL_GUARDED_BY(mu_);
  AttemptWatch watch_ ABSL_GUARDED_BY(mu_);
  JobStops stops_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const Policy> policy_ ABSL_GUARDED_BY(mu_);
  RefusalLog refused_ ABSL_GUARDED_BY(mu_);  // since this server started
  WorkerRoutes routes_;                      // over workers_ and requests_, under mu_
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_JOBS_JOB_MANAGER_H_
