#include "server/api/standby_server.h"

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "common/keepalive.h"
#include "common/leader_hint_grpc.h"

namespace trainyard {
namespace {

// Answers one call, whatever its method, and goes.
class Refusal final : public grpc::ServerGenericBidiReactor {
 public:
  Refusal(grpc::GenericCallbackServerContext* ctx, const std::pair<std::string, int64_t>& leader) {
    Finish(AnswerAsStandby(ctx, leader.first, leader.second));
  }
  void OnDone() override { delete this; }
};

class RefuseEverything final : public grpc::CallbackGenericService {
 public:
  explicit RefuseEverything(const StandbyServer::LeaderView* leader) : leader_(leader) {}
  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* ctx) override {
    return new Refusal(ctx, (*leader_)());
  }

 private:
  const StandbyServer::LeaderView* const leader_;
};

}  // namespace

StandbyServer::StandbyServer(std::string listen, std::shared_ptr<grpc::ServerCredentials> credentials,
                             LeaderView leader)
    : listen_(std::move(listen)), credentials_(std::move(credentials)), leader_(std::move(leader)) {}

StandbyServer::~StandbyServer() { Stop(); }

absl::Status StandbyServer::Start() {
  if (server_) return absl::OkStatus();
  service_ = std::make_unique<RefuseEverything>(&leader_);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(listen_, credentials_, &port_);
  builder.RegisterCallbackGenericService(service_.get());
  // Workers' keepalive pings, as the leader takes them.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, kServerMinPingIntervalMs);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  server_ = builder.BuildAndStart();
  if (!server_ || port_ == 0) {
    server_.reset();
    return absl::UnavailableError(absl::StrCat("--listen ", listen_, ": cannot listen there"));
  }
  return absl::OkStatus();
}

void StandbyServer::Stop() {
  if (!server_) return;
  server_->Shutdown(std::chrono::system_clock::now());
  server_->Wait();
  server_.reset();
  service_.reset();
}

}  // namespace trainyard
