// WebSessions' count of failed sign-ins on a fake clock: per address, from
// all addresses together, and nothing an attacker's many addresses can
// reset.
#include "server/api/web_sessions.h"

#include <gtest/gtest.h>

#include <string>

namespace trainyard {
namespace {

TEST(WebSessionsTest, AnAddressIsCountedUpToItsLimitThenWaits) {
  FakeClock clock;
  WebSessions sessions(std::chrono::hours(1), &clock);
  for (int i = 1; i <= WebSessions::kMaxFailedSignIns; ++i) {
    const WebSessions::SignInFailure f = sessions.FailedSignIn("127.0.0.1");
    EXPECT_EQ(f.wait.count(), 0) << i;
    EXPECT_EQ(f.from_address, i);
    clock.Advance(std::chrono::seconds(1));
  }
  WebSessions::SignInFailure f = sessions.FailedSignIn("127.0.0.1");
  EXPECT_FALSE(f.everyone);
  EXPECT_EQ(f.wait, std::chrono::seconds(50));  // the first failure is 10 s old
  // Another address is counted on its own.
  EXPECT_EQ(sessions.FailedSignIn("127.0.0.2").wait.count(), 0);
  // A minute after the first, one more may be counted.
  clock.Advance(std::chrono::seconds(50));
  f = sessions.FailedSignIn("127.0.0.1");
  EXPECT_EQ(f.wait.count(), 0);
  EXPECT_EQ(f.from_address, WebSessions::kMaxFailedSignIns);
}

TEST(WebSessionsTest, ManyAddressesShareOneLimitAndNoneIsForgotten) {
  FakeClock clock;
  WebSessions sessions(std::chrono::hours(1), &clock);
  for (int i = 0; i < WebSessions::kMaxFailedSignIns; ++i) EXPECT_EQ(sessions.FailedSignIn("a").wait.count(), 0);
  EXPECT_FALSE(sessions.FailedSignIn("a").everyone);
  // One failure each from other addresses, up to the limit of all together.
  const int others = WebSessions::kMaxFailedSignInsAll - WebSessions::kMaxFailedSignIns;
  for (int i = 0; i < others; ++i) EXPECT_EQ(sessions.FailedSignIn("b" + std::to_string(i)).wait.count(), 0) << i;
  // Past it, from any address, new or not: refused and not counted, so
  // 20,000 addresses make no room by pushing "a" out.
  for (int i = 0; i < 20000; ++i) {
    const WebSessions::SignInFailure f = sessions.FailedSignIn("c" + std::to_string(i));
    ASSERT_GT(f.wait.count(), 0) << i;
    ASSERT_TRUE(f.everyone) << i;
  }
  clock.Advance(std::chrono::seconds(30));
  EXPECT_GT(sessions.FailedSignIn("a").wait.count(), 0);
  EXPECT_GT(sessions.FailedSignIn("c1").wait.count(), 0);
  // A minute after, everyone may be counted again.
  clock.Advance(std::chrono::seconds(30));
  EXPECT_EQ(sessions.FailedSignIn("a").wait.count(), 0);
  EXPECT_EQ(sessions.FailedSignIn("c1").wait.count(), 0);
}

}  // namespace
}  // namespace trainyard
