// The join rule the worker and bench/scale's simulated ranks share: which
// refusals are asked again, the waits (doubling, jittered, capped) and the
// join timeout they never run past.
#include "common/join_retry.h"

#include <gtest/gtest.h>

#include <set>

namespace trainyard {
namespace {

using std::chrono::milliseconds;

TEST(JoinRetryTest, RefusalsForNowAreAskedAgainOthersAreFinal) {
  EXPECT_TRUE(RetriesJoin(absl::StatusCode::kUnavailable));
  EXPECT_TRUE(RetriesJoin(absl::StatusCode::kResourceExhausted));
  for (absl::StatusCode final_code :
       {absl::StatusCode::kPermissionDenied, absl::StatusCode::kFailedPrecondition, absl::StatusCode::kNotFound,
        absl::StatusCode::kInvalidArgument, absl::StatusCode::kInternal, absl::StatusCode::kUnauthenticated}) {
    EXPECT_FALSE(RetriesJoin(final_code)) << final_code;
    JoinRetry retry(JoinRetryOptions{}, TimeSource::Steady{}, 1);
    EXPECT_FALSE(retry.NextWait(final_code, TimeSource::Steady{}).has_value()) << final_code;
  }
}

TEST(JoinRetryTest, WaitsDoubleWithJitterUpToTheCap) {
  JoinRetryOptions o;  // 200 ms doubling to 2 s, jitter 0.5, 10 minutes
  const TimeSource::Steady start{};
  JoinRetry retry(o, start, 42);
  const int64_t backoffs[] = {200, 400, 800, 1600, 2000, 2000, 2000, 2000};
  for (int64_t backoff : backoffs) {
    const auto wait = retry.NextWait(absl::StatusCode::kResourceExhausted, start + std::chrono::seconds(1));
    ASSERT_TRUE(wait.has_value());
    EXPECT_GE(wait->count(), backoff / 2) << backoff;
    EXPECT_LE(wait->count(), backoff) << backoff;
  }
  EXPECT_EQ(retry.retries(), 8);
}

TEST(JoinRetryTest, RanksRefusedTogetherDoNotComeBackTogether) {
  std::set<int64_t> first_waits;
  for (uint64_t rank = 0; rank < 32; ++rank) {
    JoinRetry retry(JoinRetryOptions{}, TimeSource::Steady{}, rank);
    first_waits.insert(retry.NextWait(absl::StatusCode::kUnavailable, TimeSource::Steady{})->count());
  }
  EXPECT_GE(first_waits.size(), 16u);  // 101 possible values in [100, 200] ms
}

TEST(JoinRetryTest, NoWaitRunsPastTheJoinTimeout) {
  JoinRetryOptions o;
  o.join_timeout = std::chrono::seconds(3);
  const TimeSource::Steady start{};
  JoinRetry retry(o, start, 7);
  EXPECT_EQ(retry.deadline(), start + std::chrono::seconds(3));
  // 150 ms before the deadline: the wait ends at it, not after.
  auto wait = retry.NextWait(absl::StatusCode::kUnavailable, start + milliseconds(2850));
  ASSERT_TRUE(wait.has_value());
  EXPECT_LE(wait->count(), 150);
  // At the deadline: the rank gives up.
  EXPECT_FALSE(retry.NextWait(absl::StatusCode::kUnavailable, start + std::chrono::seconds(3)).has_value());
  EXPECT_FALSE(retry.NextWait(absl::StatusCode::kResourceExhausted, start + std::chrono::seconds(4)).has_value());
}

// Driven as the worker drives it: refused for 20 s (a flood of silent
// streams, each cancelled after the hello timeout, renewed three times),
// the rank keeps asking and is in within one capped wait of the flood's end.
TEST(JoinRetryTest, AFloodThatEndsDoesNotEndTheJoin) {
  const TimeSource::Steady start{};
  JoinRetry retry(JoinRetryOptions{}, start, 3);
  TimeSource::Steady now = start;
  const auto flood_ends = start + std::chrono::seconds(20);
  while (now < flood_ends) {
    const auto wait = retry.NextWait(absl::StatusCode::kResourceExhausted, now);
    ASSERT_TRUE(wait.has_value());
    now += *wait;
  }
  EXPECT_LE(now - flood_ends, std::chrono::seconds(2));
  EXPECT_GE(retry.retries(), 10);
}

}  // namespace
}  // namespace trainyard
