#include "common/join_retry.h"

#include <algorithm>

#include "common/splitmix.h"

namespace trainyard {

bool RetriesJoin(absl::StatusCode code) {
  return code == absl::StatusCode::kUnavailable || code == absl::StatusCode::kResourceExhausted;
}

JoinRetry::JoinRetry(const JoinRetryOptions& options, TimeSource::Steady start, uint64_t seed)
    : options_(options),
      deadline_(start + options.join_timeout),
      state_(seed),
      backoff_(std::max(options.initial_backoff, std::chrono::milliseconds(1))) {}

std::optional<std::chrono::milliseconds> JoinRetry::NextWait(absl::StatusCode code, TimeSource::Steady now) {
  if (!RetriesJoin(code) || now >= deadline_) return std::nullopt;
  // SplitMix64's generator; uniform in [0, 1) from the top 53 bits.
  const uint64_t draw = SplitMix64(state_);
  state_ += 0x9e3779b97f4a7c15ULL;
  const double u = static_cast<double>(draw >> 11) * 0x1.0p-53;
  const double jitter = std::clamp(options_.jitter, 0.0, 1.0);
  auto wait =
      std::chrono::milliseconds(static_cast<int64_t>(static_cast<double>(backoff_.count()) * (1.0 - jitter * u)));
  wait = std::max(wait, std::chrono::milliseconds(1));
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline_ - now);
  wait = std::min(wait, left);
  backoff_ = std::min(backoff_ * 2, std::max(options_.max_backoff, options_.initial_backoff));
  ++retries_;
  return wait;
}

}  // namespace trainyard
