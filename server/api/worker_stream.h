// WorkerStream: one worker's WorkerService.Connect stream, on gRPC's
// callback API — no thread of its own, whatever the number of ranks. It
// reads the hello (within HelloGuard's time, counted per host), attaches the
// rank (WorkerHandler::AttachWorker), writes the welcome, then hands each
// message up to the handler as it is read, and writes each command the
// rank's WorkerChannel receives as it is pushed (the channel's listener).
// The stream ends with the rank's result, its end, or a refusal; the rank
// is detached once.
//
// Created by WorkerServiceImpl::Connect; deletes itself when gRPC is done.
#ifndef TRAINYARD_SERVER_API_WORKER_STREAM_H_
#define TRAINYARD_SERVER_API_WORKER_STREAM_H_

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "server/api/hello_guard.h"
#include "server/jobs/job_handlers.h"
#include "trainyard/v1/trainyard.grpc.pb.h"

namespace trainyard {

class WorkerStream final : public grpc::ServerBidiReactor<v1::WorkerMessage, v1::CoordinatorMessage> {
 public:
  // `term` (may be empty: 0) is stamped on every message written down.
  WorkerStream(grpc::CallbackServerContext* ctx, WorkerHandler* manager, HelloGuard* hellos,
               std::function<int64_t()> term = {});

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnDone() override;
  void OnCancel() override {}

 private:
  // The first message: the hello, and the rank attached.
  void Hello();
  // One message after the hello; false after the rank's result.
  bool Handle();
  // Writes the next command when no write is under way.
  void Pump();
  // Ends the stream (once); the rank, when attached, is detached first.
  void End(const grpc::Status& status);

  grpc::CallbackServerContext* const ctx_;
  WorkerHandler* const manager_;
  const std::function<int64_t()> term_;
  std::optional<HelloGuard::Wait> waiting_;  // until the hello
  v1::WorkerMessage in_;
  v1::WorkerHello hello_;
  int32_t attempt_ = 0;  // the attached attempt (a joining worker said 0)
  std::shared_ptr<WorkerChannel> channel_;
  bool got_result_ = false;

  std::mutex mu_;  // the writes; never held while the handler is called
  v1::CoordinatorMessage out_;
  int64_t membership_sent_ = 0;  // the epoch of the last membership written (0: none)
  bool writing_ = false, ended_ = false;
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_API_WORKER_STREAM_H_
