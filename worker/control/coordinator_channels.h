// CoordinatorChannels: one gRPC channel per coordinator a worker knows (the
// list of --server, and leaders a standby named), made with the arguments a
// control stream needs: keepalive pings the coordinator accepts
// (common/keepalive.h), reconnection within about a second, and a
// connection of its own per channel. Used by one thread at a time.
#ifndef TRAINYARD_WORKER_CONTROL_COORDINATOR_CHANNELS_H_
#define TRAINYARD_WORKER_CONTROL_COORDINATOR_CHANNELS_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>

#include "trainyard/v1/trainyard.grpc.pb.h"

namespace trainyard {

class CoordinatorChannels {
 public:
  explicit CoordinatorChannels(std::shared_ptr<grpc::ChannelCredentials> credentials);

  // The stub of `address`'s channel, made (and set connecting) on first use.
  v1::WorkerService::Stub* Stub(const std::string& address);
  // Whether `address`'s channel is connected; starts its connection if not.
  // `wait`: up to this long for it to connect.
  bool Connected(const std::string& address, std::chrono::milliseconds wait = std::chrono::milliseconds(0));
  // Drops `address`'s channel: its next use connects anew. A standby's
  // connection ends when it becomes the leader (its server stops, the
  // leader's starts on the port), which the old channel would notice only
  // by its keepalive.
  void Forget(const std::string& address);
  // Until `by` at most: waits for a channel to connect.
  void AwaitAny(std::chrono::steady_clock::time_point by);

 private:
  struct Endpoint {
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<v1::WorkerService::Stub> stub;
  };
  Endpoint& At(const std::string& address);

  const std::shared_ptr<grpc::ChannelCredentials> credentials_;
  grpc::ChannelArguments args_;
  std::map<std::string, Endpoint> endpoints_;
};

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_CONTROL_COORDINATOR_CHANNELS_H_
