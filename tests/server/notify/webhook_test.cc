// Webhook URLs as a spec gives them and the signature of a delivery: what
// is refused (and that the refusal does not repeat a credential), hosts
// against the operator's allow-list, and HMAC-SHA256 against RFC 4231's
// test vectors.
#include <gtest/gtest.h>

#include "common/webhook_url.h"
#include "nlohmann/json.hpp"
#include "server/notify/notifying_job_store.h"
#include "server/notify/webhook_post.h"

namespace trainyard {
namespace {

TEST(WebhookUrl, TakesHttpAndHttpsWithHostPortAndPath) {
  auto u = ParseWebhookUrl("https://Hooks.Example.com:8443/t/x?token=1#frag");
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->scheme, "https");
  EXPECT_EQ(u->host, "hooks.example.com");
  EXPECT_EQ(u->port, 8443);
  EXPECT_EQ(u->path, "/t/x?token=1");
  u = ParseWebhookUrl("http://[::1]:9000");
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->host, "::1");
  EXPECT_EQ(u->port, 9000);
  EXPECT_EQ(u->path, "/");
}

TEST(WebhookUrl, RefusesOtherSchemesCredentialsAndJunk) {
  for (const char* bad : {"file:///etc/passwd", "ftp://x/", "gopher://h/", "hooks.example.com/x", "http:///x",
                          "http://h:0/", "http://h:70000/", "http://h x/", "http://h/\n", "http://[::1/"}) {
    EXPECT_EQ(ParseWebhookUrl(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  auto creds = ParseWebhookUrl("https://alice:hunter2@hooks.example.com/x");
  ASSERT_FALSE(creds.ok());
  EXPECT_EQ(std::string(creds.status().message()).find("hunter2"), std::string::npos);
  EXPECT_FALSE(ParseWebhookUrl("http://" + std::string(2100, 'a')).ok());
}

TEST(WebhookUrl, HostsAgainstTheAllowList) {
  EXPECT_TRUE(WebhookHostAllowed("anything.org", {}));
  EXPECT_TRUE(WebhookHostAllowed("hooks.slack.com", {"Hooks.Slack.com"}));
  EXPECT_TRUE(WebhookHostAllowed("a.b.example.com", {"*.example.com"}));
  EXPECT_FALSE(WebhookHostAllowed("example.com.evil.org", {"*.example.com"}));
  EXPECT_FALSE(WebhookHostAllowed("evilexample.com", {"*.example.com"}));
  EXPECT_FALSE(WebhookHostAllowed("127.0.0.2", {"127.0.0.1"}));
}

TEST(WebhookSignature, MatchesRfc4231) {
  // Test case 1 and 2 of RFC 4231 (HMAC-SHA-256).
  EXPECT_EQ(HmacSha256Hex(std::string(20, '\x0b'), "Hi There"),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(HmacSha256Hex("Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST(WebhookBody, NamesTheJobAndTheEvent) {
  JobRecord job;
  job.id = "job-1";
  job.name = "n";
  job.state = JobState::kSucceeded;
  job.step = 42;
  const auto j = nlohmann::json::parse(WebhookBody(job, "SUCCEEDED", 1234));
  EXPECT_EQ(j["event"], "SUCCEEDED");
  EXPECT_EQ(j["unix_millis"], 1234);
  EXPECT_EQ(j["job"]["id"], "job-1");
  EXPECT_EQ(j["job"]["state"], "SUCCEEDED");
  EXPECT_EQ(j["job"]["step"], 42);
}

}  // namespace
}  // namespace trainyard
