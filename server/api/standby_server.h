// StandbyServer: what a standby coordinator serves on --listen while another
// leads: every call (jobs, workers, health) is answered UNAVAILABLE naming
// the leader, in the message and in the trailing metadata trainyard-leader
// (common/leader_hint_grpc.h), so that clients and workers go there.
#ifndef TRAINYARD_SERVER_API_STANDBY_SERVER_H_
#define TRAINYARD_SERVER_API_STANDBY_SERVER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"

namespace grpc {
class Server;
class ServerCredentials;
class CallbackGenericService;
}  // namespace grpc

namespace trainyard {

class StandbyServer {
 public:
  // The leader's gRPC address ("" when none is known) and its term.
  using LeaderView = std::function<std::pair<std::string, int64_t>()>;

  StandbyServer(std::string listen, std::shared_ptr<grpc::ServerCredentials> credentials, LeaderView leader);
  ~StandbyServer();  // Stop()

  // UNAVAILABLE naming --listen when it cannot listen there.
  absl::Status Start();
  // Ends every call at once; the port is free again when it returns.
  void Stop();
  int port() const { return port_; }

 private:
  const std::string listen_;
  const std::shared_ptr<grpc::ServerCredentials> credentials_;
  const LeaderView leader_;
  std::unique_ptr<grpc::CallbackGenericService> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_API_STANDBY_SERVER_H_
