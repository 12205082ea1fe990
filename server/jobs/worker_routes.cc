#include "server/jobs/worker_routes.h"

#include <utility>

#include "server/jobs/manager_lock.h"

namespace trainyard {

absl::StatusOr<WorkerAttachment> WorkerRoutes::AttachWorker(const std::string& job_id, int32_t rank, int32_t attempt,
                                                            const std::string& token, const std::string& advertise_addr,
                                                            int32_t rendezvous_port, int32_t replica_store_port,
                                                            const MembershipView& held, const std::string& node) {
  ManagerLock lock(mu_);
  return sessions_->Attach(job_id, rank, attempt, token, advertise_addr, rendezvous_port, replica_store_port, held,
                           node);
}

bool WorkerRoutes::HoldsWorkerToken(const std::string& job_id, const std::string& token) {
  ManagerLock lock(mu_);
  return sessions_->HoldsToken(job_id, token);
}

void WorkerRoutes::ReportMetrics(const std::string& job_id, int32_t attempt, const std::vector<StepMetrics>& samples) {
  ManagerLock lock(mu_);
  sessions_->Metrics(job_id, attempt, samples);
}

void WorkerRoutes::ReportResult(const std::string& job_id, int32_t attempt, int32_t rank, WorkerOutcome outcome,
                                const std::string& error) {
  ManagerLock lock(mu_);
  sessions_->Result(job_id, attempt, rank, outcome, error);
}

void WorkerRoutes::ReportCheckpoint(const std::string& job_id, int32_t attempt, const CheckpointEvent& checkpoint,
                                    int32_t rank) {
  ManagerLock lock(mu_);
  sessions_->Checkpoint(job_id, attempt, checkpoint, rank);
}

void WorkerRoutes::ReportReplica(const std::string& job_id, int32_t attempt, int32_t rank,
                                 const ReplicaReport& report) {
  ManagerLock lock(mu_);
  sessions_->Replica(job_id, attempt, rank, report);
}

void WorkerRoutes::ReportNote(const std::string& job_id, int32_t attempt, int32_t rank, const std::string& text) {
  ManagerLock lock(mu_);
  sessions_->Note(job_id, attempt, rank, text);
}

void WorkerRoutes::ReportFlightRecord(const std::string& job_id, int32_t attempt, int64_t request_id,
                                      FlightRecord record) {
  ManagerLock lock(mu_);
  requests_->AddFlightRecord(job_id, attempt, request_id, std::move(record));
}

void WorkerRoutes::DetachWorker(const std::string& job_id, int32_t attempt, int32_t rank,
                                const std::shared_ptr<WorkerChannel>& channel) {
  ManagerLock lock(mu_);
  sessions_->Detach(job_id, attempt, rank, channel);
}

void WorkerRoutes::OnRankExits(const std::vector<RankExit>& exits) {
  ManagerLock lock(mu_);
  sessions_->Exits(exits);
}

void WorkerRoutes::OnLauncherNote(const std::string& job_id, int32_t attempt, const std::string& text) {
  ManagerLock lock(mu_);
  sessions_->LauncherNote(job_id, attempt, text);
}

}  // namespace trainyard
