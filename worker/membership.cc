#include "worker/membership.h"

#include <algorithm>

#include "absl/time/time.h"

namespace trainyard {

int32_t Membership::IndexOf(int32_t rank) const {
  auto it = std::find(ranks.begin(), ranks.end(), rank);
  return it == ranks.end() ? -1 : static_cast<int32_t>(it - ranks.begin());
}

std::string Membership::StorePrefix() const { return "m" + std::to_string(epoch) + "/"; }

std::string Membership::Describe() const {
  std::string out = "epoch " + std::to_string(epoch) + ": ranks [";
  for (size_t i = 0; i < ranks.size(); ++i) out += (i > 0 ? ", " : "") + std::to_string(ranks[i]);
  out += "]";
  if (!reason.empty()) out += " (" + reason + ")";
  return out;
}

void MembershipMailbox::Offer(Membership m) {
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

std::optional<Membership> MembershipMailbox::Latest() const {
  absl::MutexLock lock(&mu_);
  if (offers_.empty()) return std::nullopt;
  return offers_.rbegin()->second;
}

std::optional<Membership> MembershipMailbox::Newest() const {
  absl::MutexLock lock(&mu_);
  return newest_;
}

std::optional<Membership> MembershipMailbox::WaitFor(int64_t epoch, std::chrono::steady_clock::time_point deadline) {
  absl::MutexLock lock(&mu_);
  auto there = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return offers_.count(epoch) > 0; };
  mu_.AwaitWithDeadline(absl::Condition(&there), absl::FromChrono(std::chrono::system_clock::now() +
                                                                  (deadline - std::chrono::steady_clock::now())));
  auto it = offers_.find(epoch);
  if (it == offers_.end()) return std::nullopt;
  return it->second;
}

std::optional<Membership> MembershipMailbox::WaitNewer(int64_t epoch, std::chrono::steady_clock::time_point deadline) {
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
