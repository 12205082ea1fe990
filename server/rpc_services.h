// The gRPC services: thin layers that convert requests, call the handlers
// (server/job_handlers.h, the JobManager) and map their Status to gRPC
// codes. Thread-safe as the handlers are.
#ifndef TRAINYARD_SERVER_RPC_SERVICES_H_
#define TRAINYARD_SERVER_RPC_SERVICES_H_

#include <atomic>

#include "server/identities.h"
#include "server/job_handlers.h"
#include "trainyard/v1/trainyard.grpc.pb.h"

namespace trainyard {

class JobServiceImpl final : public v1::JobService::Service {
 public:
  // `identities` (null: anyone may do anything) say who a call comes from:
  // a call they refuse fails with UNAUTHENTICATED; a job that is not the
  // caller's, with PERMISSION_DENIED. Must outlive the service.
  explicit JobServiceImpl(JobRequestHandler* manager, const Identities* identities = nullptr)
      : manager_(manager), identities_(identities) {}

  grpc::Status SubmitJob(grpc::ServerContext*, const v1::SubmitJobRequest*, v1::SubmitJobResponse*) override;
  grpc::Status GetJob(grpc::ServerContext*, const v1::GetJobRequest*, v1::GetJobResponse*) override;
  grpc::Status ListJobs(grpc::ServerContext*, const v1::ListJobsRequest*, v1::ListJobsResponse*) override;
  grpc::Status GetQueue(grpc::ServerContext*, const v1::GetQueueRequest*, v1::GetQueueResponse*) override;
  grpc::Status CancelJob(grpc::ServerContext*, const v1::CancelJobRequest*, v1::CancelJobResponse*) override;
  grpc::Status ScaleJob(grpc::ServerContext*, const v1::ScaleJobRequest*, v1::ScaleJobResponse*) override;
  grpc::Status WatchJob(grpc::ServerContext*, const v1::WatchJobRequest*,
                        grpc::ServerWriter<v1::WatchJobResponse>*) override;
  grpc::Status GetLogs(grpc::ServerContext*, const v1::GetLogsRequest*, v1::GetLogsResponse*) override;
  grpc::Status CheckpointJob(grpc::ServerContext*, const v1::CheckpointJobRequest*,
                             v1::CheckpointJobResponse*) override;
  grpc::Status ListCheckpoints(grpc::ServerContext*, const v1::ListCheckpointsRequest*,
                               v1::ListCheckpointsResponse*) override;
  grpc::Status ResumeJob(grpc::ServerContext*, const v1::ResumeJobRequest*, v1::ResumeJobResponse*) override;
  grpc::Status GetJoinInfo(grpc::ServerContext*, const v1::GetJoinInfoRequest*, v1::GetJoinInfoResponse*) override;
  grpc::Status DiagnoseJob(grpc::ServerContext*, const v1::DiagnoseJobRequest*, v1::DiagnoseJobResponse*) override;

  // Ends open WatchJob streams (server shutdown).
  void Shutdown() { shutting_down_ = true; }

 private:
  // Who calls (UNAUTHENTICATED when nobody this server knows).
  grpc::Status Authenticate(grpc::ServerContext* ctx, Caller* caller) const;
  // Authenticate; then the id and the request's other `fields` (their
  // check's result); then whether the caller may `action` job `id`.
  grpc::Status Authorize(grpc::ServerContext* ctx, const std::string& id, const char* action, bool read_only,
                         Caller* caller = nullptr, const absl::Status& fields = absl::OkStatus()) const;
  JobRequestHandler* const manager_;
  const Identities* const identities_;
  std::atomic<bool> shutting_down_{false};
};

class WorkerServiceImpl final : public v1::WorkerService::Service {
 public:
  explicit WorkerServiceImpl(WorkerHandler* manager) : manager_(manager) {}

  grpc::Status Connect(grpc::ServerContext*,
                       grpc::ServerReaderWriter<v1::CoordinatorMessage, v1::WorkerMessage>*) override;

 private:
  WorkerHandler* const manager_;
};

void JobToProto(const JobRecord& job, const std::vector<JobEvent>& events, v1::Job* out);

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_RPC_SERVICES_H_
