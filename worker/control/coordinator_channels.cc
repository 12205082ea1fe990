#include "worker/control/coordinator_channels.h"

#include <algorithm>

#include "common/keepalive.h"

namespace trainyard {
namespace {

// A restarted coordinator is found within about a second (gRPC's reconnect
// backoff, with its jitter, capped), and the stream is opened as soon as
// the channel connects.
constexpr int kReconnectBackoffCapMs = 1000;

}  // namespace

CoordinatorChannels::CoordinatorChannels(std::shared_ptr<grpc::ChannelCredentials> credentials)
    : credentials_(std::move(credentials)) {
  args_.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, kWorkerKeepaliveMs);  // the server's accepts them (common/keepalive.h)
  args_.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kWorkerKeepaliveTimeoutMs);
  args_.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  args_.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, kReconnectBackoffCapMs);
  // How long one connection attempt may take (gRPC's default, 20 s): a
  // connection taken by a listening socket that is closing (a standby's
  // port as it becomes the leader's) is given up after this, not after 20 s.
  args_.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 2000);
  // Each channel its own connection: one made anew (Forget) must not share
  // the old one's.
  args_.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
}

CoordinatorChannels::Endpoint& CoordinatorChannels::At(const std::string& address) {
  Endpoint& e = endpoints_[address];
  if (!e.channel) {
    e.channel = grpc::CreateCustomChannel(address, credentials_, args_);
    e.stub = v1::WorkerService::NewStub(e.channel);
    e.channel->GetState(/*try_to_connect=*/true);
  }
  return e;
}

v1::WorkerService::Stub* CoordinatorChannels::Stub(const std::string& address) { return At(address).stub.get(); }

bool CoordinatorChannels::Connected(const std::string& address, std::chrono::milliseconds wait) {
  Endpoint& e = At(address);
  if (e.channel->GetState(/*try_to_connect=*/true) == GRPC_CHANNEL_READY) return true;
  if (wait.count() <= 0) return false;
  return e.channel->WaitForConnected(std::chrono::system_clock::now() + wait);
}

void CoordinatorChannels::Forget(const std::string& address) { endpoints_.erase(address); }

void CoordinatorChannels::AwaitAny(std::chrono::steady_clock::time_point by) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(by - std::chrono::steady_clock::now()).count();
  if (left <= 0 || endpoints_.empty()) return;
  if (endpoints_.size() == 1) {
    // gRPC's own wait, which returns as it connects.
    endpoints_.begin()->second.channel->WaitForConnected(std::chrono::system_clock::now() +
                                                         std::chrono::milliseconds(std::min<int64_t>(left, 250)));
    return;
  }
  // gRPC's synchronous API moves a channel's connection along (reads the
  // server's GOAWAY, connects anew) only while a thread waits on it, or at
  // its backup poll every 5 s: wait on each channel in turn.
  const int64_t each = std::max<int64_t>(10, std::min<int64_t>(left, 100) / static_cast<int64_t>(endpoints_.size()));
  for (auto& [address, e] : endpoints_) {
    const grpc_connectivity_state state = e.channel->GetState(/*try_to_connect=*/true);
    if (state == GRPC_CHANNEL_READY) return;
    e.channel->WaitForStateChange(state, std::chrono::system_clock::now() + std::chrono::milliseconds(each));
  }
}

}  // namespace trainyard
