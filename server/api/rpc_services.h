// The gRPC services: thin layers that convert requests, call the handlers
// (server/jobs/job_handlers.h, the JobManager) and map their Status to gRPC
// codes. Thread-safe as the handlers are.
#ifndef TRAINYARD_SERVER_API_RPC_SERVICES_H_
#define TRAINYARD_SERVER_API_RPC_SERVICES_H_

#include <atomic>
#include <chrono>
#include <functional>

#include "server/api/hello_guard.h"
#include "server/auth/identities.h"
#include "server/jobs/job_handlers.h"
#include "server/sweeps/sweep_manager.h"
#include "trainyard/v1/trainyard.grpc.pb.h"

namespace trainyard {

// What a call may know of its context beyond its caller: until when it may
// wait, and whether its client went away.
struct CallContext {
  std::chrono::system_clock::time_point deadline = std::chrono::system_clock::time_point::max();
  std::function<bool()> cancelled;
};

class JobServiceImpl final : public v1::JobService::Service {
 public:
  // `identities` (null: anyone may do anything) say who a call comes from:
  // a call they refuse fails with UNAUTHENTICATED; a job that is not the
  // caller's, with PERMISSION_DENIED. Must outlive the service.
  // `sweeps` (null: the sweep calls are UNIMPLEMENTED) runs sweeps.
  explicit JobServiceImpl(JobRequestHandler* manager, const Identities* identities = nullptr,
                          SweepManager* sweeps = nullptr)
      : manager_(manager), identities_(identities), sweeps_(sweeps) {}

  // Each unary method twice: as gRPC calls it (the caller authenticated
  // from the call's metadata and certificate), and for a caller already
  // known (the web UI's signed-in user) — the same rules either way.
#define TRAINYARD_UNARY_RPC(Name)                                                                                \
  grpc::Status Name(grpc::ServerContext* ctx, const v1::Name##Request* req, v1::Name##Response* resp) override { \
    Caller caller;                                                                                               \
    if (grpc::Status auth = Authenticate(ctx, &caller); !auth.ok()) return auth;                                 \
    return Name(caller, req, resp, CallContext{ctx->deadline(), [ctx] { return ctx->IsCancelled(); }});          \
  }                                                                                                              \
  grpc::Status Name(const Caller& caller, const v1::Name##Request* req, v1::Name##Response* resp,                \
                    const CallContext& call = CallContext());
  TRAINYARD_UNARY_RPC(SubmitJob)
  TRAINYARD_UNARY_RPC(GetJob)
  TRAINYARD_UNARY_RPC(ListJobs)
  TRAINYARD_UNARY_RPC(GetQueue)
  TRAINYARD_UNARY_RPC(CancelJob)
  TRAINYARD_UNARY_RPC(DeleteJob)
  TRAINYARD_UNARY_RPC(ScaleJob)
  TRAINYARD_UNARY_RPC(GetLogs)
  TRAINYARD_UNARY_RPC(CheckpointJob)
  TRAINYARD_UNARY_RPC(ListCheckpoints)
  TRAINYARD_UNARY_RPC(ResumeJob)
  TRAINYARD_UNARY_RPC(GetJoinInfo)
  TRAINYARD_UNARY_RPC(DiagnoseJob)
  TRAINYARD_UNARY_RPC(GetJobHistory)
  TRAINYARD_UNARY_RPC(SubmitSweep)  // server/api/sweep_rpcs.cc
  TRAINYARD_UNARY_RPC(GetSweep)
  TRAINYARD_UNARY_RPC(ListSweeps)
  TRAINYARD_UNARY_RPC(CancelSweep)
#undef TRAINYARD_UNARY_RPC
  grpc::Status WatchJob(grpc::ServerContext*, const v1::WatchJobRequest*,
                        grpc::ServerWriter<v1::WatchJobResponse>*) override;

  // Ends open WatchJob streams (server shutdown).
  void Shutdown() { shutting_down_ = true; }

 private:
  // Who calls (UNAUTHENTICATED when nobody this server knows).
  grpc::Status Authenticate(grpc::ServerContext* ctx, Caller* caller) const;
  // The id and the request's other `fields` (their check's result); then
  // whether `who` may `action` job `id`.
  grpc::Status Authorize(const Caller& who, const std::string& id, const char* action, bool read_only,
                         const absl::Status& fields = absl::OkStatus()) const;
  JobRequestHandler* const manager_;
  const Identities* const identities_;
  SweepManager* const sweeps_;
  std::atomic<bool> shutting_down_{false};
};

class WorkerServiceImpl final : public v1::WorkerService::CallbackService {
 public:
  // A stream must say hello within `hellos.timeout` (5 s); how many may
  // wait to, per job, per host and from all hosts: HelloGuard.
  explicit WorkerServiceImpl(WorkerHandler* manager, const HelloLimits& hellos = {})
      : manager_(manager), hellos_(hellos) {}

  // Each stream is a WorkerStream (server/api/worker_stream.h).
  grpc::ServerBidiReactor<v1::WorkerMessage, v1::CoordinatorMessage>* Connect(
      grpc::CallbackServerContext* ctx) override;

  // The streams that have not said hello yet.
  int waiting_for_hello() { return hellos_.waiting(); }

  // Where the term stamped on every message down (the welcome and each
  // command: CoordinatorMessage.term, the fencing token of issue 65) comes
  // from: asked as each message is written, from gRPC's threads. Unset: 0,
  // no leadership (one coordinator). Set before the server starts.
  void set_term_source(std::function<int64_t()> term) { term_ = std::move(term); }

 private:
  WorkerHandler* const manager_;
  HelloGuard hellos_;
  std::function<int64_t()> term_;
};

void SweepToProto(const SweepStatus& sweep, v1::Sweep* out);
void JobToProto(const JobRecord& job, const std::vector<JobEvent>& events, v1::Job* out);

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_API_RPC_SERVICES_H_
