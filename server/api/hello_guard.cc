#include "server/api/hello_guard.h"

namespace trainyard {

HelloGuard::HelloGuard(int per_host, std::chrono::milliseconds timeout) : per_host_(per_host), timeout_(timeout) {
  reaper_ = std::thread([this] { Reap(); });
}

HelloGuard::~HelloGuard() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  reaper_.join();
}

std::string HelloGuard::HostOf(const std::string& peer) {
  const size_t colon = peer.rfind(':');
  const size_t scheme = peer.find(':');
  if (colon == std::string::npos || colon == scheme) return peer;
  return peer.substr(0, colon);
}

bool HelloGuard::Start(grpc::ServerContextBase* ctx) {
  const std::string host = HostOf(ctx->peer());
  std::lock_guard<std::mutex> lock(mu_);
  int& n = per_host_count_[host];
  if (n >= per_host_) return false;
  ++n;
  waiting_[ctx] = {host, std::chrono::steady_clock::now() + timeout_};
  return true;
}

void HelloGuard::Done(grpc::ServerContextBase* ctx) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = waiting_.find(ctx);
  if (it == waiting_.end()) return;
  if (--per_host_count_[it->second.host] == 0) per_host_count_.erase(it->second.host);
  waiting_.erase(it);
}

void HelloGuard::Reap() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    const auto now = std::chrono::steady_clock::now();
    for (auto& [ctx, entry] : waiting_) {
      // The stream stays registered (its Read returns false, and its Wait
      // ends the count); a later pass may cancel it again, harmlessly.
      if (entry.deadline <= now) ctx->TryCancel();
    }
    cv_.wait_for(lock, std::chrono::milliseconds(250));
  }
}

}  // namespace trainyard
