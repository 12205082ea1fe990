// WorkerRoutes: the workers' side of the coordinator (WorkerHandler) and
// the launchers' callbacks, each routed to WorkerSessions (or, for flight
// records, PendingRequests) under the JobManager's mutex. The JobManager
// owns it beside the people's side; the WorkerService and the launchers
// are given it.
//
// Thread-safe: every call takes the mutex it is given.
#ifndef TRAINYARD_SERVER_JOBS_WORKER_ROUTES_H_
#define TRAINYARD_SERVER_JOBS_WORKER_ROUTES_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "server/jobs/job_handlers.h"
#include "server/jobs/pending_requests.h"
#include "server/jobs/worker_sessions.h"

namespace trainyard {

class WorkerRoutes final : public WorkerHandler {
 public:
  // `sessions` and `requests` are guarded by `mu`; all must outlive this.
  WorkerRoutes(absl::Mutex* mu, WorkerSessions* sessions, PendingRequests* requests)
      : mu_(mu), sessions_(sessions), requests_(requests) {}

  absl::StatusOr<WorkerAttachment> AttachWorker(const std::string& job_id, int32_t rank, int32_t attempt,
                                                const std::string& token, const std::string& advertise_addr = "",
                                                int32_t rendezvous_port = 0, int32_t replica_store_port = 0,
                                                const MembershipView& held = {}, const std::string& node = "") override;
  bool HoldsWorkerToken(const std::string& job_id, const std::string& token) override;
  void ReportMetrics(const std::string& job_id, int32_t attempt, const std::vector<StepMetrics>& samples) override;
  void ReportResult(const std::string& job_id, int32_t attempt, int32_t rank, WorkerOutcome outcome,
                    const std::string& error) override;
  void ReportCheckpoint(const std::string& job_id, int32_t attempt, const CheckpointEvent& checkpoint,
                        int32_t rank = 0) override;
  void ReportReplica(const std::string& job_id, int32_t attempt, int32_t rank, const ReplicaReport& report) override;
  void ReportNote(const std::string& job_id, int32_t attempt, int32_t rank, const std::string& text) override;
  void ReportFlightRecord(const std::string& job_id, int32_t attempt, int64_t request_id, FlightRecord record) override;
  void DetachWorker(const std::string& job_id, int32_t attempt, int32_t rank,
                    const std::shared_ptr<WorkerChannel>& channel) override;
  // The launchers' exit callback: the ends one pass found.
  void OnRankExits(const std::vector<RankExit>& exits);
  void OnRankExit(const RankExit& exit) { OnRankExits({exit}); }
  // The launchers' note callback: what the cluster says of an attempt.
  void OnLauncherNote(const std::string& job_id, int32_t attempt, const std::string& text);

 private:
  absl::Mutex* const mu_;
  WorkerSessions* const sessions_;
  PendingRequests* const requests_;
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_JOBS_WORKER_ROUTES_H_
