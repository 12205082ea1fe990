// WorkerSessions: the workers' side of the coordinator — a rank attaching
// to its job's attempt (launched, reattaching after a restart, or joining),
// its reports (metrics, results, checkpoints, notes), its stream closing and
// its process exiting — each routed to the job's Attempt, JobProgress and
// JobTable, with what follows left to the JobLifecycle.
//
// Not thread-safe: the JobManager calls it under its mutex.
#ifndef TRAINYARD_SERVER_JOBS_WORKER_SESSIONS_H_
#define TRAINYARD_SERVER_JOBS_WORKER_SESSIONS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "server/jobs/job_handlers.h"
#include "server/jobs/job_lifecycle.h"
#include "server/jobs/job_table.h"
#include "server/jobs/launchers.h"
#include "server/jobs/pending_requests.h"

namespace trainyard {

class WorkerSessions {
 public:
  // Every part must outlive the sessions.
  WorkerSessions(JobTable* jobs, JobLifecycle* lifecycle, const Launchers* launchers, PendingRequests* requests,
                 const TimeSource* clock)
      : jobs_(jobs), lifecycle_(lifecycle), launchers_(launchers), requests_(requests), clock_(clock) {}

  // Rank `rank` of attempt `attempt` attaches with `token` (attempt 0: a
  // rank joining the current attempt of a job whose ranks join). Once every
  // rank is attached the job runs.
  // `held`: the newest membership a replica rank was offered; a group
  // adopted after a coordinator restart is taken on from it.
  absl::StatusOr<WorkerAttachment> Attach(const std::string& job_id, int32_t rank, int32_t attempt,
                                          const std::string& token, const std::string& advertise_addr,
                                          int32_t rendezvous_port, int32_t replica_store_port = 0,
                                          const MembershipView& held = {}, const std::string& node = "");
  // Whether `token` is job `job_id`'s worker token (the job is in memory
  // and has one); compared in constant time.
  bool HoldsToken(const std::string& job_id, const std::string& token);
  // What a joining worker needs to join the job (jobs whose ranks join only).
  absl::StatusOr<JoinInfo> JoinInfoOf(const std::string& job_id, const std::string& remote_coordinator_addr);

  // Reports of the current attempt (others' are ignored).
  void Metrics(const std::string& job_id, int32_t attempt, const std::vector<StepMetrics>& samples);
  void Result(const std::string& job_id, int32_t attempt, int32_t rank, WorkerOutcome outcome,
              const std::string& error);
  // Only the lead rank's (Attempt::lead_rank) counts.
  void Checkpoint(const std::string& job_id, int32_t attempt, const CheckpointEvent& checkpoint, int32_t rank = 0);
  // fault_tolerance.mode replica: a member's report on its membership.
  void Replica(const std::string& job_id, int32_t attempt, int32_t rank, const ReplicaReport& report);
  // A note for the job's events; at most kMaxNotesPerAttempt an attempt.
  void Note(const std::string& job_id, int32_t attempt, int32_t rank, const std::string& text);
  // What the launcher's cluster says of the attempt (Slurm's state
  // changes), for the job's events; counted with the ranks' notes.
  void LauncherNote(const std::string& job_id, int32_t attempt, const std::string& text);
  void Detach(const std::string& job_id, int32_t attempt, int32_t rank, const std::shared_ptr<WorkerChannel>& channel);
  // A rank's process ended: the attempt's RankSupervisor may take the end
  // (a replica that ended before the job did is replaced while enough
  // replicas are left: JobLifecycle::Act); else the attempt's own rules.
  void Exit(const RankExit& exit);
  // Ends found together (one reaping pass of a launcher): each group they
  // change changes once (RankSupervisor::BeginBatch).
  void Exits(const std::vector<RankExit>& exits);
  // Call periodically: ranks whose end no launcher reports end as if their
  // launcher said so (one batch per attempt): joined ranks lost past the
  // reattach timeout (Attempt::LostRanks), and ranks on other hosts whose
  // stream was lost without a result and whose end was not reported in
  // time (Attempt::RanksOnLostNodes), their nodes presumed lost
  // (NoteLostNode).
  void EndLostRanks();

 private:
  // Closes the batches Exits opened (attempts by job id and number) and acts on them.
  void EndBatches(const std::vector<std::pair<std::string, int32_t>>& attempts);
  // The attempt runs, is not stopping, and the coordinator is not shutting
  // down: a rank's loss is the fault-tolerance mode's to decide.
  bool Live(const ActiveJob& job) const;
  // The node `rank` of the current attempt ran on is presumed lost (an
  // event; the job's later launches and replacements exclude it).
  void NoteLostNode(ActiveJob& job, int32_t rank);
  // A starting or recovering job whose ranks have all attached (or are
  // parked) runs.
  void RunningOnceAllAttached(ActiveJob& job);

  JobTable* const jobs_;
  JobLifecycle* const lifecycle_;
  const Launchers* const launchers_;
  PendingRequests* const requests_;
  const TimeSource* const clock_;
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_JOBS_WORKER_SESSIONS_H_
