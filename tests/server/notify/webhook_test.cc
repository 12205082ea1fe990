// Webhook URLs as a spec gives them and the signature of a delivery: what
// is refused (and that the refusal does not repeat a credential), hosts
// against the operator's allow-list and the local network (every spelling
// of an address), HMAC-SHA256 against RFC 4231's test vectors; and the
// Notifier against real local HTTP receivers: a name that resolves to the
// local network is refused at delivery, the address checked is the one
// connected to, what a user is told leaks nothing of a port, one owner's
// silent receivers delay no one else's deliveries, the policy's are
// rate-limited.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "common/webhook_url.h"
#include "nlohmann/json.hpp"
#include "server/notify/notifier.h"
#include "server/notify/notifying_job_store.h"
#include "server/notify/webhook_post.h"
#include "server/store/job_store.h"
#include "tests/test_util.h"

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
  EXPECT_TRUE(WebhookHostAllowed("127.0.0.1", {"127.0.0.1"})) << "the operator's exception";
  EXPECT_TRUE(WebhookHostAllowed("hooks.internal", {"*.internal"}));
  EXPECT_FALSE(WebhookHostAllowed("127.1", {"127.0.0.1"})) << "another spelling is another host";
  EXPECT_TRUE(WebhookHostAllowed("hooks.slack.com", {"Hooks.Slack.com"}));
  EXPECT_TRUE(WebhookHostAllowed("a.b.example.com", {"*.example.com"}));
  EXPECT_FALSE(WebhookHostAllowed("example.com.evil.org", {"*.example.com"}));
  EXPECT_FALSE(WebhookHostAllowed("evilexample.com", {"*.example.com"}));
  EXPECT_FALSE(WebhookHostAllowed("127.0.0.2", {"127.0.0.1"}));
}

// Every spelling of a local-network address, decided without DNS.
TEST(WebhookUrl, TheLocalNetworkInEverySpelling) {
  const std::map<std::string, std::string> local = {
      {"127.0.0.1", "loopback"},
      {"127.1", "loopback"},
      {"2130706433", "loopback"},
      {"0x7f000001", "loopback"},
      {"0177.0.0.1", "loopback"},
      {"0x7f.1", "loopback"},
      {"127.0.0.1.", "loopback"},
      {"127.255.255.254", "loopback"},
      {"localhost", "loopback"},
      {"LocalHost.", "loopback"},
      {"foo.localhost", "loopback"},
      {"0", "unspecified"},
      {"0.0.0.0", "unspecified"},
      {"169.254.169.254", "link-local"},
      {"10.0.0.1", "private"},
      {"012.1", "private"},
      {"172.16.0.1", "private"},
      {"172.31.255.255", "private"},
      {"192.168.1.1", "private"},
      {"3232235777", "private"},
      {"100.64.0.1", "shared (CGNAT)"},
      {"100.127.255.255", "shared (CGNAT)"},
      {"224.0.0.1", "multicast"},
      {"255.255.255.255", "reserved"},
      {"::1", "loopback"},
      {"0:0:0:0:0:0:0:1", "loopback"},
      {"::", "unspecified"},
      {"::ffff:127.0.0.1", "loopback"},
      {"::ffff:7f00:1", "loopback"},
      {"::ffff:169.254.169.254", "link-local"},
      {"::ffff:10.1.2.3", "private"},
      {"::127.0.0.1", "loopback"},
      {"::ffff:0:127.0.0.1", "loopback"},
      {"64:ff9b::7f00:1", "loopback"},
      {"2002:a9fe:a9fe::1", "link-local"},
      {"fc00::1", "unique-local"},
      {"fd12:3456::1", "unique-local"},
      {"fe80::1", "link-local"},
      {"fec0::1", "site-local"},
      {"ff02::1", "multicast"},
  };
  for (const auto& [host, kind] : local) {
    EXPECT_EQ(LocalHostKind(host), kind) << host;
    EXPECT_FALSE(WebhookHostAllowed(host, {})) << host;
    const absl::Status s = CheckWebhookHost(host, {});
    EXPECT_TRUE(absl::StrContains(s.message(), "local network")) << host << ": " << s;
    EXPECT_TRUE(WebhookHostAllowed(host, {host})) << host << ": listed, it is the operator's exception";
  }
  for (const char* host :
       {"8.8.8.8", "0x08080808", "134744072", "1.1.1.1", "100.128.0.1", "172.32.0.1", "11.0.0.1", "192.169.0.1",
        "::ffff:8.8.8.8", "2001:4860:4860::8888", "example.com", "localhost.example.com", "mylocalhost", "1e100.net"}) {
    EXPECT_EQ(LocalHostKind(host), "") << host;
    EXPECT_TRUE(WebhookHostAllowed(host, {})) << host;
  }
  // The URL's own spellings reach the same rule.
  for (const char* url : {"http://127.1:8080/x", "http://[::1]/", "http://[::ffff:127.0.0.1]:9/", "http://0x7f000001/",
                          "http://foo.localhost/"}) {
    auto u = ParseWebhookUrl(url);
    ASSERT_TRUE(u.ok()) << url;
    EXPECT_FALSE(WebhookHostAllowed(u->host, {})) << url;
  }
}

TEST(WebhookUrl, TheServersOwnAddressesAreLocal) {
  ifaddrs* list = nullptr;
  ASSERT_EQ(getifaddrs(&list), 0);
  int checked = 0;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6)) {
      continue;
    }
    EXPECT_NE(LocalAddressKind(i->ifa_addr), "") << AddressText(i->ifa_addr);
    EXPECT_NE(LocalHostKind(AddressText(i->ifa_addr)), "") << AddressText(i->ifa_addr);
    ++checked;
  }
  freeifaddrs(list);
  EXPECT_GT(checked, 0);
}

TEST(WebhookUrl, ShownAsSchemeHostAndPortOnly) {
  EXPECT_EQ(ShownWebhookUrl("https://hooks.slack.com/services/T000/B000/XXXXSECRET"), "https://hooks.slack.com");
  EXPECT_EQ(ShownWebhookUrl("http://Relay.Example:8080/hook?token=s3cret#x"), "http://relay.example:8080");
  EXPECT_EQ(ShownWebhookUrl("http://[2001:db8::1]:9000/t"), "http://[2001:db8::1]:9000");
  EXPECT_EQ(ShownWebhookUrl("ftp://h/s3cret"), "(a URL that does not parse)");
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

// A real HTTP receiver on 127.0.0.1: answers each POST with `status`
// (0: never answers, holding the connection).
class Receiver {
 public:
  explicit Receiver(int status) : status_(status) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    EXPECT_EQ(listen(fd_, 4096), 0);
    socklen_t len = sizeof(a);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    if (status_ != 0) thread_ = std::thread([this] { Serve(); });
  }
  ~Receiver() {
    shutdown(fd_, SHUT_RDWR);
    close(fd_);
    if (thread_.joinable()) thread_.join();
  }
  int port() const { return port_; }
  std::string Url(const std::string& path) const { return "http://127.0.0.1:" + std::to_string(port_) + path; }
  // The requests' first lines and Host headers, as they came.
  std::vector<std::string> Requests() {
    absl::MutexLock lock(&mu_);
    return requests_;
  }
  bool AwaitRequests(size_t n, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return requests_.size() >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
  }

 private:
  void Serve() {
    for (;;) {
      const int c = accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      std::string in;
      char buf[4096];
      size_t want = std::string::npos;
      while (want == std::string::npos || in.size() < want) {
        const ssize_t n = read(c, buf, sizeof(buf));
        if (n <= 0) break;
        in.append(buf, n);
        if (const size_t end = in.find("\r\n\r\n"); end != std::string::npos && want == std::string::npos) {
          const size_t cl = in.find("Content-Length: ");
          want = end + 4 + (cl == std::string::npos ? 0 : std::stoul(in.substr(cl + 16)));
        }
      }
      const size_t host = in.find("Host: ");
      {
        absl::MutexLock lock(&mu_);
        requests_.push_back(in.substr(0, in.find("\r\n")) + " " +
                            (host == std::string::npos ? "" : in.substr(host, in.find("\r\n", host) - host)));
      }
      const std::string answer = "HTTP/1.1 " + std::to_string(status_) + " X\r\nContent-Length: 0\r\n\r\n";
      (void)!write(c, answer.data(), answer.size());
      close(c);
    }
  }

  const int status_;
  int fd_ = -1;
  int port_ = 0;
  std::thread thread_;
  absl::Mutex mu_;
  std::vector<std::string> requests_ ABSL_GUARDED_BY(mu_);
};

// What a Notifier records, by job.
class Records {
 public:
  Notifier::Record Sink() {
    return [this](const std::string& id, const std::string& text) {
      absl::MutexLock lock(&mu_);
      texts_[id].push_back(text);
    };
  }
  std::vector<std::string> Of(const std::string& id) {
    absl::MutexLock lock(&mu_);
    return texts_[id];
  }
  size_t Count() {
    absl::MutexLock lock(&mu_);
    size_t n = 0;
    for (const auto& [id, t] : texts_) n += t.size();
    return n;
  }
  // The first text recorded for `id`, within `timeout` ("" if none).
  std::string Await(const std::string& id, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto some = [this, &id]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !texts_[id].empty(); };
    mu_.AwaitWithTimeout(absl::Condition(&some), timeout);
    return texts_[id].empty() ? "" : texts_[id].front();
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, std::vector<std::string>> texts_ ABSL_GUARDED_BY(mu_);
};

WebhookDelivery To(const std::string& job, const std::string& url) {
  return {job, url, "SUCCEEDED", job + "-1", R"({"event":"SUCCEEDED"})"};
}

std::string Hostname() {
  char name[256] = {0};
  gethostname(name, sizeof(name) - 1);
  return name;
}

// The address WebhookPost is given is the one it connects to, whatever the
// URL's host resolves to (here: nothing at all).
TEST(WebhookPost, ConnectsToTheAddressItIsGiven) {
  Receiver receiver(200);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(receiver.port());
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const std::string url = "http://hooks.example.invalid:" + std::to_string(receiver.port()) + "/pinned";
  const PostResult r = WebhookPost(url, "{}", {}, std::chrono::seconds(5), reinterpret_cast<const sockaddr*>(&a));
  EXPECT_EQ(r.http_status, 200) << r.error;
  ASSERT_EQ(receiver.Requests().size(), 1u);
  EXPECT_EQ(receiver.Requests()[0],
            "POST /pinned HTTP/1.1 Host: hooks.example.invalid:" + std::to_string(receiver.port()));
  // Without it, the name resolves to nothing.
  EXPECT_EQ(WebhookPost(url, "{}", {}, std::chrono::seconds(5)).http_status, 0);
}

// A name that resolves to the local network (this machine's own name) passes
// the check at submit, and is refused at delivery; the receiver is never
// called. Listed by the operator, it is called.
TEST(Notifier, ANameThatResolvesLocallyIsRefusedAtDelivery) {
  const std::string host = Hostname();
  addrinfo* list = nullptr;
  if (host.empty() || getaddrinfo(host.c_str(), nullptr, nullptr, &list) != 0) GTEST_SKIP() << "no host name";
  // Loopback, by this test's own reckoning (as /etc/hosts usually says).
  const sockaddr* a = list->ai_addr;
  const bool loopback =
      (a->sa_family == AF_INET && (ntohl(reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr) >> 24) == 127) ||
      (a->sa_family == AF_INET6 && IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr));
  freeaddrinfo(list);
  if (!loopback) GTEST_SKIP() << host << " does not resolve to loopback";
  ASSERT_TRUE(WebhookHostAllowed(host, {})) << "not decided without DNS";
  Receiver receiver(200);
  const std::string url = "http://" + host + ":" + std::to_string(receiver.port()) + "/rebound?token=s3cret";
  {
    Records records;
    Notifier n(NotifierOptions{}, records.Sink());
    n.Start();
    ASSERT_TRUE(n.Enqueue("mallory", To("job-1", url)));
    const std::string text = records.Await("job-1", absl::Seconds(10));
    EXPECT_EQ(text, "webhook http://" + absl::AsciiStrToLower(host) + ":" + std::to_string(receiver.port()) +
                        " (SUCCEEDED): refused, its host resolves to an address of the local network");
    EXPECT_TRUE(receiver.Requests().empty());
  }
  Records records;
  NotifierOptions o;
  o.allowed_hosts = {host};
  Notifier n(o, records.Sink());
  n.Start();
  ASSERT_TRUE(n.Enqueue("ops", To("job-2", url)));
  EXPECT_TRUE(absl::StrContains(records.Await("job-2", absl::Seconds(10)), "delivered, HTTP 2xx"));
  EXPECT_EQ(receiver.Requests().size(), 1u);
}

// What a user is told of a failed delivery: the status class or "no
// answer" — not whether a port is closed, filtered or silent.
TEST(Notifier, WhatUsersAreToldLeaksNoPortState) {
  Receiver failing(503), silent(0);
  int closed_port;
  {
    Receiver gone(0);
    closed_port = gone.port();
  }
  Records records;
  NotifierOptions o;
  o.allowed_hosts = {"127.0.0.1"};
  o.max_attempts = 1;
  o.timeout = std::chrono::milliseconds(500);
  Notifier n(o, records.Sink());
  n.Start();
  ASSERT_TRUE(n.Enqueue("u", To("job-503", failing.Url("/x?token=s3cret"))));
  ASSERT_TRUE(n.Enqueue("u", To("job-silent", silent.Url("/x"))));
  ASSERT_TRUE(n.Enqueue("u", To("job-closed", "http://127.0.0.1:" + std::to_string(closed_port) + "/x")));
  const std::string port = std::to_string(failing.port());
  EXPECT_EQ(records.Await("job-503", absl::Seconds(10)),
            "webhook http://127.0.0.1:" + port + " (SUCCEEDED): not delivered after 1 try, last answer: HTTP 5xx");
  const std::string silent_text = records.Await("job-silent", absl::Seconds(10));
  const std::string closed_text = records.Await("job-closed", absl::Seconds(10));
  EXPECT_TRUE(absl::EndsWith(silent_text, "(SUCCEEDED): not delivered after 1 try, last answer: no answer"))
      << silent_text;
  EXPECT_TRUE(absl::EndsWith(closed_text, "(SUCCEEDED): not delivered after 1 try, last answer: no answer"))
      << closed_text;
  for (const std::string& t : {silent_text, closed_text}) {
    for (const char* leak : {"onnect", "imeout", "timed out", "refused", "Couldn't", "Failed"}) {
      EXPECT_FALSE(absl::StrContains(t, leak)) << t;
    }
  }
}

// One owner's 1,000 deliveries to a receiver that never answers delay
// another owner's by no more than a moment: their own queue, round-robin,
// at most one of an owner's in flight.
TEST(Notifier, OneOwnersSilentReceiversDelayNoOneElse) {
  Receiver silent(0), answering(200);
  Records records;
  NotifierOptions o;
  o.allowed_hosts = {"127.0.0.1"};
  o.threads = 2;
  o.timeout = std::chrono::seconds(3);
  o.max_pending_per_owner = 1000;
  Notifier n(o, records.Sink());
  n.Start();
  for (int i = 0; i < 1000; ++i) {
    ASSERT_TRUE(n.Enqueue("mallory", To("job-m" + std::to_string(i), silent.Url("/"))));
  }
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(n.Enqueue("alice", To("job-a", answering.Url("/alice"))));
  ASSERT_TRUE(answering.AwaitRequests(1, absl::Seconds(10)));
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_LT(took, std::chrono::seconds(2)) << std::chrono::duration<double>(took).count() << " s";
  EXPECT_TRUE(absl::StrContains(records.Await("job-a", absl::Seconds(5)), "delivered, HTTP 2xx"));
  EXPECT_TRUE(records.Of("job-m999").empty()) << "mallory's are still waiting";
}

// A full queue drops that owner's deliveries only, recorded on its jobs.
TEST(Notifier, AFullQueueDropsOnlyItsOwners) {
  Records records;
  NotifierOptions o;
  o.max_pending_per_owner = 5;
  Notifier n(o, records.Sink());  // not started: everything waits
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(n.Enqueue("mallory", To("job-m", "https://hooks.example.com/m")));
  EXPECT_FALSE(n.Enqueue("mallory", To("job-m6", "https://hooks.example.com/m")));
  EXPECT_EQ(
      records.Of("job-m6"),
      std::vector<std::string>{
          "webhook https://hooks.example.com (SUCCEEDED): dropped, 5 deliveries of mallory's are waiting already"});
  EXPECT_TRUE(n.Enqueue("alice", To("job-a", "https://hooks.example.com/a")));
  EXPECT_TRUE(records.Of("job-a").empty());
}

// The policy's (the operator's) deliveries: at most policy_burst of a
// user's jobs at once, the rest dropped with a line in the server log, never
// in the job's events; a user's own deliveries are not held back by them.
TEST(Notifier, ThePolicysWebhooksAreRateLimitedAndNeverShownToUsers) {
  Receiver ops(200);
  Records records;
  NotifierOptions o;
  o.policy_burst = 3;
  o.policy_refill = std::chrono::hours(1);
  Notifier n(o, records.Sink());
  n.Start();
  int queued = 0;
  for (int i = 0; i < 1000; ++i) {
    WebhookDelivery d = To("job-" + std::to_string(i), ops.Url("/services/T0/B0/s3cret"));
    d.event = "CANCELLED";
    d.from_policy = true;
    queued += n.Enqueue("mallory", d);
  }
  EXPECT_EQ(queued, 3);
  WebhookDelivery other = To("job-bob", ops.Url("/services/T0/B0/s3cret"));
  other.from_policy = true;
  EXPECT_TRUE(n.Enqueue("bob", other)) << "another user's jobs have their own allowance";
  ASSERT_TRUE(ops.AwaitRequests(4, absl::Seconds(10)));
  EXPECT_EQ(records.Count(), 0u) << "the policy's outcomes are the server log's only";
}

// Most of a job's events change nothing a webhook announces (a checkpoint
// saved, a rank's note): the job's spec is read for its webhooks at a change
// of state only, and the store is asked for the state before a change once
// a job (its events under the job manager's lock stay cheap); the changes
// themselves are still announced.
TEST(NotifyingJobStore, ReadsAJobsWebhooksOnlyAtAChangeOfState) {
  TempDir dir;
  auto sqlite = JobStore::Open(dir.path() + "/jobs.db");
  ASSERT_TRUE(sqlite.ok()) << sqlite.status();
  Receiver receiver(200);
  Records records;
  NotifierOptions o;
  o.allowed_hosts = {"127.0.0.1"};
  Notifier n(o, records.Sink());
  n.Start();
  NotifyingJobStore store(sqlite->get(), &n);
  JobRecord job;
  job.id = "job-0000abcd";
  job.owner = "alice";
  job.spec_json =
      nlohmann::json{{"notify", {{"urls", {receiver.Url("/hook")}}, {"on", {"RUNNING", "SUCCEEDED"}}}}}.dump();
  ASSERT_TRUE(store.Insert(job, JobEvent{1, JobState::kQueued, "queued"}).ok());
  job.state = JobState::kRunning;
  const JobEvent running{2, JobState::kRunning, "running"};
  ASSERT_TRUE(store.Update(job, &running).ok());
  for (int i = 0; i < 500; ++i) {
    const JobEvent saved{3 + i, JobState::kRunning, "checkpoint saved"};
    ASSERT_TRUE(store.Update(job, &saved).ok());
  }
  EXPECT_EQ(store.spec_reads(), 1u) << "the spec was read at an event that changed nothing";
  job.state = JobState::kSucceeded;
  const JobEvent done{1000, JobState::kSucceeded, "finished"};
  ASSERT_TRUE(store.Update(job, &done).ok());
  EXPECT_EQ(store.spec_reads(), 2u);
  ASSERT_TRUE(receiver.AwaitRequests(2, absl::Seconds(10))) << "RUNNING and SUCCEEDED both announced";
}

}  // namespace
}  // namespace trainyard
