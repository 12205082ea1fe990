#include "server/api/hello_guard.h"

#include "absl/strings/str_cat.h"

namespace trainyard {

HelloGuard::HelloGuard(const HelloLimits& limits) : limits_(limits) {
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

absl::Status HelloGuard::Start(grpc::ServerContextBase* ctx, const std::optional<std::string>& proven_job) {
  const bool unproven = !proven_job.has_value();
  const std::string key = unproven ? absl::StrCat("host ", HostOf(ctx->peer())) : absl::StrCat("job ", *proven_job);
  std::lock_guard<std::mutex> lock(mu_);
  int& n = per_key_count_[key];
  if (!unproven && n >= limits_.per_job) {
    return absl::ResourceExhaustedError(
        absl::StrCat("too many streams of job ", *proven_job, " have not said hello yet (", limits_.per_job, ")"));
  }
  if (unproven && n >= limits_.per_host) {
    return absl::ResourceExhaustedError(
        absl::StrCat("too many streams from this host have not said hello yet (", limits_.per_host, ")"));
  }
  if (unproven && unproven_count_ >= limits_.all_hosts) {
    if (n == 0) per_key_count_.erase(key);
    return absl::ResourceExhaustedError(
        absl::StrCat("too many streams from all hosts together have not said hello yet (", limits_.all_hosts, ")"));
  }
  ++n;
  if (unproven) ++unproven_count_;
  waiting_[ctx] = {key, unproven, std::chrono::steady_clock::now() + limits_.timeout};
  return absl::OkStatus();
}

int HelloGuard::waiting() {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(waiting_.size());
}

void HelloGuard::Done(grpc::ServerContextBase* ctx) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = waiting_.find(ctx);
  if (it == waiting_.end()) return;
  if (--per_key_count_[it->second.key] == 0) per_key_count_.erase(it->second.key);
  if (it->second.unproven) --unproven_count_;
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
