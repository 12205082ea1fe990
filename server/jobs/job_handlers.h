// The coordinator's request handlers as the gRPC services see them:
// people's requests (JobService) and workers' (WorkerService). The services
// only convert between proto and these calls; the JobManager implements
// both, and tests call them directly, without a channel.
//
// Implementations are thread-safe: every method may be called from any
// thread.
#ifndef TRAINYARD_SERVER_JOBS_JOB_HANDLERS_H_
#define TRAINYARD_SERVER_JOBS_JOB_HANDLERS_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/checkpoint_type.h"
#include "common/flight_record.h"
#include "common/job_record.h"
#include "common/job_state.h"
#include "common/replica_protocol.h"
#include "common/step_metrics.h"
#include "common/worker_outcome.h"
#include "server/auth/caller.h"
#include "server/health/hang_diagnosis.h"
#include "server/jobs/job_history.h"
#include "server/jobs/job_streams.h"
#include "server/scheduling/resource_pool.h"

namespace trainyard {

// One page of a job listing; next_page_token is empty on the last page.
// A waiting job, as the queue shows it.
struct QueuedJob {
  JobRecord job;
  int position = 0;  // 1: starts first
  std::string priority_class;
  bool local = false;  // takes this host's slots or GPUs (not Slurm, external)
  ResourcePool::Kind kind = ResourcePool::Kind::kSlots;
  std::string reason;
  int64_t estimated_start_unix_millis = 0;  // 0: unknown
  double owner_usage = 0;                   // fair share: its owner's decayed rank-seconds
  bool preemptible = false;
};
struct QueuePage {
  std::vector<QueuedJob> jobs;
  int32_t total = 0;  // waiting jobs in the scope asked for, on this page or not
};

// What a user or group has in use and waiting, against its quotas (-1: no
// limit).
struct QuotaUse {
  std::string name;
  bool group = false;
  int slots = 0, gpus = 0, queued_jobs = 0;
  int64_t slots_quota = -1, gpus_quota = -1, queued_jobs_quota = -1;
};

struct JobPage {
  std::vector<JobRecord> jobs;
  std::string next_page_token;
};

// What workers started outside the server need to join a job.
struct JoinInfo {
  std::string job_id;
  std::string token;
  int32_t world_size = 0;
  int32_t attempt = 0;
  std::string coordinator_addr;
};

// A hang diagnosis of one attempt, from the flight records of the ranks
// that answered.
struct Diagnosis {
  int32_t attempt = 0;
  HangDiagnosis result;
  std::map<int32_t, FlightRecord> answers;  // by rank
};

// The sweep whose trial a job is (JobRecord::sweep_id, sweep_trial): what
// the SweepManager submits its trials with.
struct TrialOf {
  std::string sweep_id;
  int32_t trial = -1;
};

// People's side.
class JobRequestHandler {
 public:
  static constexpr int kDefaultPageSize = 100;
  static constexpr int kMaxPageSize = 1000;
  // GetJob's pages of ranks.
  static constexpr int kDefaultRankPageSize = 256;
  static constexpr int kMaxRankPageSize = 1000;

  virtual ~JobRequestHandler() = default;
  // Queues a job. `accelerate_config`, when not empty, is an Accelerate
  // config file applied to the spec (ParseJobSpecWithAccelerateConfig); each
  // of its warnings becomes a QUEUED event "accelerate config: <warning>".
  // `by` owns it: its group, its roots for the paths the spec names, its
  // priority class (checked against the policy's classes and maximums) and
  // its quota of queued jobs. `trial_of`: the sweep whose trial it is, kept
  // with the job.
  virtual absl::StatusOr<JobRecord> Submit(const std::string& spec_text, const std::string& accelerate_config,
                                           const Caller& by, const TrialOf& trial_of = {}) = 0;
  // Whether `by` may do `action` ("cancel", "read the logs of"...) to job
  // `id`: admins and the owner may do anything; with the policy's
  // group_visibility, members of the job's group may look (`read_only`).
  // NotFound, worded as for an unknown job, when `by` may not even see it
  // (so that a refusal does not tell which job ids exist); PermissionDenied
  // naming the job and the user when `by` may see it but not do `action`.
  // The first refusal of each user becomes an event of the job; later ones
  // are counted in the denied-requests metric only (a user cannot grow
  // another's job by asking).
  virtual absl::Status Authorize(const Caller& by, const std::string& id, const std::string& action,
                                 bool read_only) = 0;
  // The waiting jobs in the order they start (the caller's own unless
  // `all_users`, as List), with why each waits and when it may start.
  // A page: the `count` after the first `skip` (in that order), and how
  // many wait in all.
  virtual absl::StatusOr<QueuePage> Queue(const Caller& by, bool all_users, int32_t skip = 0,
                                          int32_t count = INT32_MAX) = 0;
  // What users and groups have in use against their quotas: `by`'s own and
  // their groups' (admins, and `all_users` where Queue allows it: everyone's).
  virtual absl::StatusOr<std::vector<QuotaUse>> Usage(const Caller& by, bool all_users) = 0;
  // What the server's own hosts have free now (its --slots and --gpus).
  virtual int free_slots() = 0;
  virtual int free_gpus() = 0;
  virtual absl::StatusOr<JobRecord> Get(const std::string& id) = 0;
  virtual absl::StatusOr<std::vector<JobEvent>> Events(const std::string& id) = 0;
  // Each rank's last step sample in the job's current attempt (its GPU
  // readings included), by rank; empty for a job that is not running.
  // The last sample of each of the job's ranks `first` .. `first + count - 1`.
  virtual std::vector<StepMetrics> RankSamples(const std::string& /*id*/, int32_t /*first*/, int32_t /*count*/) {
    return {};
  }
  // Where a running job's attempt runs: each connected rank's node, and the
  // attempt's id in the cluster's scheduler (Slurm's job id; "" for none).
  struct Placement {
    std::map<int32_t, std::string> nodes;
    std::string external_id;
  };
  // (`nodes`: of ranks `first` .. `first + count - 1`.)
  virtual std::optional<Placement> PlacementOf(const std::string& /*id*/, int32_t /*first*/, int32_t /*count*/) {
    return std::nullopt;
  }
  // The current membership of a running fault_tolerance.mode replica job
  // (common/replica_protocol.h); none for other jobs.
  using ReplicaStatus = trainyard::ReplicaStatus;
  virtual std::optional<ReplicaStatus> Replicas(const std::string& /*id*/) { return std::nullopt; }
  // One page of the jobs in `states` (all when empty), oldest first (newest
  // first with `newest_first`), after the page that `page_token` ends
  // (empty: the first), at most page_size (capped at kMaxPageSize). A
  // malformed token, or one of the other order, is InvalidArgument.
  // Only `by`'s own jobs unless `all_users` (admins: everyone's; others:
  // their groups' too where the policy has group_visibility, else refused).
  virtual absl::StatusOr<JobPage> List(const std::set<JobState>& states, int page_size, const std::string& page_token,
                                       const Caller& by, bool all_users, bool newest_first = false) = 0;
  // Forgets an ended job: its record, events, checkpoint entries and history
  // leave the store (its files stay). FailedPrecondition while it has not
  // ended; NotFound for an unknown id. `by` is named in the server log.
  virtual absl::Status Delete(const std::string& id, const Caller& by) = 0;
  // With `checkpoint`, a running job saves a checkpoint at its next step
  // boundary and then stops (a later plain Cancel stops it at once).
  // `reason`: who cancels and why, as the job's end and its ranks say it
  // ("": a user).
  virtual absl::StatusOr<JobRecord> Cancel(const std::string& id, bool checkpoint, const std::string& reason = "") = 0;
  // A running elastic job runs `num_processes` ranks from now on (ranks
  // leave or are launched); `by` is named in its events.
  virtual absl::StatusOr<JobRecord> Scale(const std::string& id, int32_t num_processes, const Caller& by) = 0;
  // Waits until the job runs, ends or `deadline` passes; OK unless the job
  // is still waiting to run (QUEUED, STARTING, RECOVERING) at `deadline`
  // (DeadlineExceeded naming its state).
  virtual absl::Status AwaitRunning(const std::string& id, std::chrono::system_clock::time_point deadline) = 0;
  // Asks a running job's rank 0 for a checkpoint; returns the request id.
  virtual absl::StatusOr<int64_t> RequestCheckpoint(const std::string& id, CheckpointType type) = 0;
  // Waits until the job reports the checkpoint of `request_id` (ok or not),
  // the job ends (Aborted) or `deadline` passes (DeadlineExceeded).
  virtual absl::StatusOr<CheckpointEvent> WaitCheckpoint(const std::string& id, int64_t request_id,
                                                         std::chrono::system_clock::time_point deadline) = 0;
  virtual absl::StatusOr<std::vector<CheckpointRecord>> Checkpoints(const std::string& id) = 0;
  // The job's series across its attempts (empty for a job that reported no
  // step); NotFound for an unknown job.
  virtual absl::StatusOr<JobHistory> History(const std::string& id) = 0;
  // Starts an ended job again (same id, next attempt) from `from` (a
  // checkpoint directory) or, when empty, its latest complete checkpoint;
  // num_processes > 0 changes its world size.
  virtual absl::StatusOr<JobRecord> Resume(const std::string& id, const std::string& from, int32_t num_processes,
                                           const Caller& by) = 0;
  virtual absl::StatusOr<std::shared_ptr<JobWatch>> Watch(const std::string& id) = 0;
  // The log of `rank` in `attempt` (0: the latest), and that attempt.
  virtual absl::StatusOr<std::pair<std::string, int32_t>> LogPath(const std::string& id, int32_t rank,
                                                                  int32_t attempt) = 0;
  // The worker token of a job whose launcher is external (not ended).
  virtual absl::StatusOr<JoinInfo> GetJoinInfo(const std::string& id) = 0;
  // Asks every connected rank of a running job for its flight record, to
  // be answered within `wait`; returns the request id.
  virtual absl::StatusOr<int64_t> RequestDiagnosis(const std::string& id, std::chrono::milliseconds wait) = 0;
  // Waits until every rank answered request `request_id` or its wait ended,
  // then diagnoses what came. NotFound for an unknown (or taken) request.
  virtual absl::StatusOr<Diagnosis> WaitDiagnosis(int64_t request_id) = 0;
};

// What a worker learns when it attaches to its job.
struct WorkerAttachment {
  std::string spec_json;
  int32_t world_size = 0;
  int32_t attempt = 0;
  // Rank 0's rendezvous store; empty address: the launcher told the worker.
  std::string master_addr;
  int master_port = 0;
  std::shared_ptr<WorkerChannel> channel;
};

// Workers' side. Reports of another attempt than the job's current one are
// ignored.
class WorkerHandler {
 public:
  static constexpr int kMaxNotesPerAttempt = 100;

  virtual ~WorkerHandler() = default;
  // attempt 0: join the current attempt (external jobs only). Rank 0 of an
  // external job says where its rendezvous store listens
  // (advertise_addr:rendezvous_port); the other ranks wait for it
  // (UNAVAILABLE until then).
  // fault_tolerance.mode replica: every rank's own store listens at
  // advertise_addr (empty: the attempt's master address) on
  // replica_store_port.
  // `held`: the newest membership the rank was offered (replica jobs; a
  // coordinator that restarted takes the group on from it). `node`: where
  // the rank runs (GetJob's places).
  virtual absl::StatusOr<WorkerAttachment> AttachWorker(const std::string& job_id, int32_t rank, int32_t attempt,
                                                        const std::string& token, const std::string& advertise_addr,
                                                        int32_t rendezvous_port, int32_t replica_store_port,
                                                        const MembershipView& held, const std::string& node) = 0;
  // Whether `token` is job `job_id`'s worker token: a stream that proves
  // it when it opens is counted against its job's budget of streams that
  // have not said hello yet, not its host's (server/api/hello_guard.h).
  virtual bool HoldsWorkerToken(const std::string& job_id, const std::string& token) = 0;
  virtual void ReportMetrics(const std::string& job_id, int32_t attempt, const std::vector<StepMetrics>& samples) = 0;
  // How one rank ended, as it reports (external ranks: in place of an exit).
  virtual void ReportResult(const std::string& job_id, int32_t attempt, int32_t rank, WorkerOutcome outcome,
                            const std::string& error) = 0;
  // A checkpoint `rank` reports; only the lead's counts (rank 0, or the
  // first member of a replica job's membership).
  virtual void ReportCheckpoint(const std::string& job_id, int32_t attempt, const CheckpointEvent& checkpoint,
                                int32_t rank) = 0;
  // fault_tolerance.mode replica: `rank`'s side of its membership.
  virtual void ReportReplica(const std::string& job_id, int32_t attempt, int32_t rank, const ReplicaReport& report) = 0;
  // A rank's note becomes a job event "rank R: <text>" (at most
  // kMaxNotesPerAttempt per attempt; text cut at 2000 bytes).
  virtual void ReportNote(const std::string& job_id, int32_t attempt, int32_t rank, const std::string& text) = 0;
  virtual void ReportFlightRecord(const std::string& job_id, int32_t attempt, int64_t request_id,
                                  FlightRecord record) = 0;
  virtual void DetachWorker(const std::string& job_id, int32_t attempt, int32_t rank,
                            const std::shared_ptr<WorkerChannel>& channel) = 0;
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_JOBS_JOB_HANDLERS_H_
