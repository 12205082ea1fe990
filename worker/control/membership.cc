#include "worker/control/membership.h"

#include <algorithm>

#include "absl/time/time.h"

namespace trainyard {

void MembershipMailbox::Offer(MembershipView m) {
  absl::MutexLock lock(&mu_);
  if (m.epoch <= forgotten_) return;
  if (!newest_ || m.epoch >= newest_->epoch) newest_ = m;
  latest_ = std::max(latest_, m.epoch);
  offers_[m.epoch] = std::move(m);
}

int64_t MembershipMailbox::latest_epoch() const {
  absl::MutexLock lock(&mu_);
  return latest_;
}

std::optional<MembershipView> MembershipMailbox::Latest() const {
  absl::MutexLock lock(&mu_);
  if (offers_.empty()) return std::nullopt;
  return offers_.rbegin()->second;
}

std::optional<MembershipView> MembershipMailbox::Newest() const {
  absl::MutexLock lock(&mu_);
  return newest_;
}

std::optional<MembershipView> MembershipMailbox::WaitFor(int64_t epoch,
                                                         std::chrono::steady_clock::time_point deadline) {
  absl::MutexLock lock(&mu_);
  auto there = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return offers_.count(epoch) > 0; };
  mu_.AwaitWithDeadline(absl::Condition(&there), absl::FromChrono(std::chrono::system_clock::now() +
                                                                  (deadline - std::chrono::steady_clock::now())));
  auto it = offers_.find(epoch);
  if (it == offers_.end()) return std::nullopt;
  return it->second;
}

std::optional<MembershipView> MembershipMailbox::WaitNewer(int64_t epoch,
                                                           std::chrono::steady_clock::time_point deadline) {
  absl::MutexLock lock(&mu_);
  auto newer = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !offers_.empty() && offers_.rbegin()->first > epoch; };
  mu_.AwaitWithDeadline(absl::Condition(&newer), absl::FromChrono(std::chrono::system_clock::now() +
                                                                  (deadline - std::chrono::steady_clock::now())));
  if (!newer()) return std::nullopt;
  return offers_.rbegin()->second;
}

void MembershipMailbox::Forget(int64_t epoch) {
  absl::MutexLock lock(&mu_);
  forgotten_ = std::max(forgotten_, epoch);
  offers_.erase(offers_.begin(), offers_.upper_bound(epoch));
}

}  // namespace trainyard
