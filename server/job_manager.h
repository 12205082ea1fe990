// JobManager: the coordinator's core. Owns the queue and the lifecycle of
// every job that has not ended; persists each state change through the
// JobStore; starts, stops and (after a restart) adopts workers through the
// Launchers; feeds ServerMetrics and the watchers of a job. It holds the job
// state machine and calls small plain parts for the rest: ResourcePool (slots
// and GPUs), DecideAfterAttempt (the restart policy), ActiveJob (one job's
// state), BlockingQueues (job_streams.h).
//
// Thread-safe: every public method may be called from any thread (gRPC
// handlers, the launcher's exit thread). One mutex guards all state; the
// store, launcher and metrics are called with it held and never call back
// into the manager synchronously.
//
// One class in three files: job_manager.cc (recovery, scheduling, attempts
// and their ends), job_manager_requests.cc (people's requests and the
// checks a spec passes), job_manager_workers.cc (workers' attach and
// reports, the watchdog).
#ifndef TRAINYARD_SERVER_JOB_MANAGER_H_
#define TRAINYARD_SERVER_JOB_MANAGER_H_

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/job_spec.h"
#include "common/step_metrics.h"
#include "common/worker_outcome.h"
#include "server/active_job.h"
#include "server/hang_diagnosis.h"
#include "server/job_store.h"
#include "server/launcher.h"
#include "server/server_metrics.h"
#include "server/shutdown_mode.h"

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
  // Between repeated failures of a job (no attempt trained a step in
  // between), its restart waits: not after the first failure, then
  // restart_backoff, doubling up to 30 s (0: never).
  std::chrono::milliseconds restart_backoff{1000};
  // The launcher of specs that name none (launcher: default).
  LauncherKind default_launcher = LauncherKind::kLocal;
};

// What workers started outside the server need to join a job.
struct JoinInfo {
  std::string job_id;
  std::string token;
  int32_t world_size = 0;
  int32_t attempt = 0;
  std::string coordinator_addr;
};

struct WorkerAttachment {
  std::string spec_json;
  int32_t world_size = 0;
  int32_t attempt = 0;
  // Rank 0's rendezvous store; empty address: the launcher told the worker.
  std::string master_addr;
  int master_port = 0;
  std::shared_ptr<WorkerChannel> channel;
};

class JobManager {
 public:
  // `launcher` starts local jobs; RegisterLauncher adds others.
  JobManager(JobStore* store, Launcher* launcher, ServerMetrics* metrics, JobManagerOptions options);
  ~JobManager();
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

  // People's side.
  // Queues a job. `accelerate_config`, when not empty, is an Accelerate
  // config file applied to the spec (ParseJobSpecWithAccelerateConfig); each
  // of its warnings becomes a QUEUED event "accelerate config: <warning>".
  absl::StatusOr<JobRecord> Submit(const std::string& spec_text, const std::string& accelerate_config = "");
  absl::StatusOr<JobRecord> Get(const std::string& id);
  absl::StatusOr<std::vector<JobEvent>> Events(const std::string& id);
  // One page of the jobs in `states` (all when empty), oldest first, after
  // the page that `page_token` ends (empty: the first), at most page_size
  // (capped at kMaxPageSize); its next_page_token is empty on the last page.
  // A malformed token is InvalidArgument.
  struct JobPage {
    std::vector<JobRecord> jobs;
    std::string next_page_token;
  };
  static constexpr int kDefaultPageSize = 100;
  static constexpr int kMaxPageSize = 1000;
  absl::StatusOr<JobPage> List(const std::set<JobState>& states, int page_size, const std::string& page_token);
  // With `checkpoint`, a running job saves a checkpoint at its next step
  // boundary and then stops (a later plain Cancel stops it at once).
  absl::StatusOr<JobRecord> Cancel(const std::string& id, bool checkpoint = false);
  // Asks a running job's rank 0 for a checkpoint; returns the request id.
  absl::StatusOr<int64_t> RequestCheckpoint(const std::string& id, CheckpointType type);
  // Waits until the job reports the checkpoint of `request_id` (ok or not),
  // the job ends (Aborted) or `deadline` passes (DeadlineExceeded).
  absl::StatusOr<CheckpointEvent> WaitCheckpoint(const std::string& id, int64_t request_id,
                                                 std::chrono::system_clock::time_point deadline);
  absl::StatusOr<std::vector<CheckpointRecord>> Checkpoints(const std::string& id);
  // Starts an ended job again (same id, next attempt) from `from` (a
  // checkpoint directory) or, when empty, its latest complete checkpoint;
  // num_processes > 0 changes its world size.
  absl::StatusOr<JobRecord> Resume(const std::string& id, const std::string& from, int32_t num_processes);
  absl::StatusOr<std::shared_ptr<JobWatch>> Watch(const std::string& id);
  absl::StatusOr<std::string> LogPath(const std::string& id, int32_t rank);
  // The worker token of a job whose launcher is external (not ended).
  absl::StatusOr<JoinInfo> GetJoinInfo(const std::string& id);

  // Workers' side.
  // attempt 0: join the current attempt (external jobs only). Rank 0 of an
  // external job says where its rendezvous store listens
  // (advertise_addr:rendezvous_port); the other ranks wait for it
  // (UNAVAILABLE until then).
  absl::StatusOr<WorkerAttachment> AttachWorker(const std::string& job_id, int32_t rank, int32_t attempt,
                                                const std::string& token, const std::string& advertise_addr = "",
                                                int32_t rendezvous_port = 0);
  void ReportMetrics(const std::string& job_id, int32_t attempt, const std::vector<StepMetrics>& samples);
  // How one rank ended, as it reports (external ranks: in place of an exit).
  void ReportResult(const std::string& job_id, int32_t attempt, int32_t rank, WorkerOutcome outcome,
                    const std::string& error);
  void ReportCheckpoint(const std::string& job_id, int32_t attempt, const CheckpointEvent& checkpoint);
  // A rank's note becomes a job event "rank R: <text>" (at most
  // kMaxNotesPerAttempt per attempt; text cut at 2000 bytes).
  static constexpr int kMaxNotesPerAttempt = 100;
  void ReportNote(const std::string& job_id, int32_t attempt, int32_t rank, const std::string& text);
  void DetachWorker(const std::string& job_id, int32_t attempt, int32_t rank,
                    const std::shared_ptr<WorkerChannel>& channel);

  // The launcher's exit callback.
  void OnRankExit(const RankExit& exit);

  // Hang diagnosis (server/hang_diagnosis.h). Asks every connected rank of
  // a running job for its flight record, to be answered within `wait`;
  // returns the request id.
  absl::StatusOr<int64_t> RequestDiagnosis(const std::string& id, std::chrono::milliseconds wait);
  void ReportFlightRecord(const std::string& job_id, int32_t attempt, int64_t request_id, FlightRecord record);
  struct Diagnosis {
    int32_t attempt = 0;
    HangDiagnosis result;
    std::map<int32_t, FlightRecord> answers;  // by rank
  };
  // Waits until every rank answered request `request_id` or its wait ended,
  // then diagnoses what came. NotFound for an unknown (or taken) request.
  absl::StatusOr<Diagnosis> WaitDiagnosis(int64_t request_id);

  // The hang watchdog: when a running job's rank 0 made no progress (step
  // or checkpoint) within its step_timeout_s, asks its ranks for their
  // flight records (at most kWatchdogDiagnoseWait), records the diagnosis
  // as a job event and fails the group; the restart policy takes it from
  // there. Call periodically.
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
  // All REQUIRE mu_ held.
  // The job `id` if it has not ended; else NotFound, or FailedPrecondition
  // "job <id> has ended (<STATE>)<why_it_matters>".
  absl::StatusOr<ActiveJob*> FindActive(const std::string& id, const std::string& why_it_matters);
  LauncherKind KindOf(const ActiveJob& job) const;
  Launcher* LauncherOf(const ActiveJob& job);
  // A spec this server can run at all: slots, GPUs, the launcher.
  absl::Status CheckResources(const JobSpec& spec);
  bool Fits(const ActiveJob& job) const;
  void ReleaseResources(ActiveJob& job);
  // One rank's end, from a launcher or (external jobs) from its stream; may
  // requeue or finish the job.
  void HandleRankExit(ActiveJob& job, const RankExit& e);
  // Every rank of the attempt has ended: the restart policy decides what
  // follows (requeue, or the end state). True when the job ended; the
  // caller then Finishes it.
  bool EndAttempt(ActiveJob& job, bool all_succeeded);
  LaunchRequest MakeLaunchRequest(const ActiveJob& job) const;
  void Transition(ActiveJob& job, JobState state, const std::string& reason);
  void TrySchedule();
  void StartJob(ActiveJob& job);
  void FailGroup(ActiveJob& job, int32_t rank, const std::string& reason);
  // After every rank of a failed or preempted attempt exited: queue it again
  // to resume from its latest checkpoint.
  void Requeue(ActiveJob& job, const std::string& reason);
  void PublishGoodput(ActiveJob& job);
  // A failure or stop was detected: the recovery clock starts (once).
  void StartRecoveryClock(ActiveJob& job);
  // Stops the attempt's workers: through its launcher, or (external jobs)
  // by a stop command down each connected rank's stream.
  void StopGroup(ActiveJob& job);
  void Finish(const std::string& id);
  void PublishCounts();
  // The watchdog's part of CheckProgress (job_manager_diagnosis.cc).
  void CheckHangs(SteadyTime now);
  // Sends the diagnose command to the job's connected ranks; the request id.
  int64_t StartDiagnosis(ActiveJob& job, std::chrono::milliseconds wait);
  void AddEvent(ActiveJob& job, const std::string& reason);
  absl::Status CheckPaths(JobSpec& spec, const std::string& job_id);
  std::string NewJobId();
  std::string LogDir(const JobRecord& job, int32_t attempt) const;

  JobStore* const store_;
  Launcher* const launcher_;
  ServerMetrics* const metrics_;
  JobManagerOptions options_;

  std::mutex mu_;
  std::map<std::string, ActiveJob> active_;  // guarded by mu_; every job not ended
  std::deque<std::string> queue_;            // guarded by mu_; FIFO of QUEUED ids
  ResourcePool pool_;                        // guarded by mu_
  std::map<LauncherKind, Launcher*> launchers_;
  std::map<JobState, int> counts_;                         // guarded by mu_
  bool shut_down_ = false;                                 // guarded by mu_
  int64_t next_request_id_ = 1;                            // guarded by mu_
  std::map<int64_t, CheckpointEvent> checkpoint_results_;  // guarded by mu_; reports of requests, by id
  std::condition_variable checkpoint_cv_;                  // signalled on reports and job ends
  std::map<int64_t, PendingDiagnosis> diagnoses_;          // guarded by mu_; by request id
  std::condition_variable diagnosis_cv_;                   // signalled on flight records
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_JOB_MANAGER_H_
