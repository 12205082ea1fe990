// Identities: who a call comes from — an admin token, a user of the policy
// file by token or client certificate subject, or anyone on an open server;
// under mutual TLS, no call without a client certificate, and never the
// server's own.
#include "server/auth/identities.h"

#include <gtest/gtest.h>

#include <fstream>

#include "common/policy.h"
#include "tests/test_util.h"

namespace trainyard {
namespace {

Identities::PeerCertificate Cert(const std::string& subject) {
  Identities::PeerCertificate c;
  c.verified = true;
  c.subject = subject;
  return c;
}

class IdentitiesTest : public ::testing::Test {
 protected:
  std::string WritePolicy(const std::string& alice_token) {
    const std::string path = dir_.path() + "/policy.yaml";
    std::ofstream(path) << "users:\n  - {name: alice, token_sha256: \"" << Sha256Hex(alice_token)
                        << "\", groups: [vision], tls_subject: \"CN=alice,O=Example\"}\n"
                        << "  - {name: bob, token_sha256: \"" << Sha256Hex(alice_token + "-bob") << "\"}\n";
    return path;
  }
  TempDir dir_;
};

TEST_F(IdentitiesTest, AnOpenServerTakesAnyone) {
  Identities ids("", "", {});
  EXPECT_TRUE(ids.open());
  auto c = ids.Authenticate("", {});
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->user.empty());
}

TEST_F(IdentitiesTest, UsersByTokenOrCertificateAndTheAdminToken) {
  Identities ids("admin-secret", WritePolicy("alice-token"), {"/data/{user}"});
  ASSERT_TRUE(ids.Reload().ok());
  EXPECT_FALSE(ids.open());
  auto alice = ids.Authenticate("Bearer alice-token", {});
  ASSERT_TRUE(alice.ok()) << alice.status();
  EXPECT_EQ(alice->user, "alice");
  EXPECT_EQ(alice->groups, std::vector<std::string>{"vision"});
  EXPECT_FALSE(alice->admin);
  EXPECT_EQ(alice->roots, std::vector<std::string>{"/data/alice"});  // {user} stands for the name
  auto by_cert = ids.Authenticate("", Cert("CN=alice,O=Example"));
  ASSERT_TRUE(by_cert.ok()) << by_cert.status();
  EXPECT_EQ(by_cert->user, "alice");
  // The common name alone names nobody (it was once the rule: a host
  // certificate named "bob" would have been bob).
  EXPECT_EQ(ids.Authenticate("", Cert("CN=bob")).status().code(), absl::StatusCode::kUnauthenticated);
  // A subject TLS did not verify names nobody.
  Identities::PeerCertificate unverified = Cert("CN=alice,O=Example");
  unverified.verified = false;
  EXPECT_EQ(ids.Authenticate("", unverified).status().code(), absl::StatusCode::kUnauthenticated);
  auto admin = ids.Authenticate("Bearer admin-secret", {});
  ASSERT_TRUE(admin.ok());
  EXPECT_TRUE(admin->admin);
  EXPECT_EQ(ids.Authenticate("Bearer forged", {}).status().code(), absl::StatusCode::kUnauthenticated);
  auto empty = ids.Authenticate("Bearer ", {});
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(empty.status().message(), "the bearer token is empty");
  EXPECT_EQ(ids.Authenticate("Basic alice-token", {}).status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(ids.Authenticate("", Cert("CN=mallory")).status().code(), absl::StatusCode::kUnauthenticated);
}

TEST_F(IdentitiesTest, MutualTlsNeedsACertificateAndNeverTheServersOwn) {
  Identities ids("", "", {});
  const std::string own = "-----BEGIN CERTIFICATE-----\nAAAA\nBBBB\n-----END CERTIFICATE-----\n";
  ids.RequireClientCertificates(own + "-----BEGIN CERTIFICATE-----\nCCCC\n-----END CERTIFICATE-----\n");
  auto none = ids.Authenticate("", {});
  EXPECT_EQ(none.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_NE(none.status().message().find("requires a client certificate"), std::string::npos) << none.status();
  Identities::PeerCertificate server = Cert("CN=server");
  server.pem = "-----BEGIN CERTIFICATE-----\r\nAAAABBBB\r\n-----END CERTIFICATE-----";
  auto as_server = ids.Authenticate("", server);
  EXPECT_EQ(as_server.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_NE(as_server.status().message().find("the server's own"), std::string::npos) << as_server.status();
  Identities::PeerCertificate client = Cert("CN=client");
  client.pem = "-----BEGIN CERTIFICATE-----\nDDDD\n-----END CERTIFICATE-----\n";
  EXPECT_TRUE(ids.Authenticate("", client).ok());  // an open server: any certificate the CA signed
}

TEST_F(IdentitiesTest, TwoUsersCannotShareACertificateSubject) {
  auto p = ParsePolicy("users:\n  - {name: a, token_sha256: \"" + Sha256Hex("a") +
                           "\", tls_subject: \"CN=x\"}\n  - {name: b, "
                           "token_sha256: \"" +
                           Sha256Hex("b") + "\", tls_subject: \"CN=x\"}\n",
                       "p.yaml");
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("users[1].tls_subject"), std::string::npos) << p.status();
}

// A reload that fails keeps the previous policy; one that succeeds swaps it.
TEST_F(IdentitiesTest, ReloadSwapsThePolicyOrKeepsIt) {
  const std::string path = WritePolicy("old-token");
  Identities ids("", path, {});
  ASSERT_TRUE(ids.Reload().ok());
  std::ofstream(path) << "users: [";  // broken
  EXPECT_FALSE(ids.Reload().ok());
  EXPECT_TRUE(ids.Authenticate("Bearer old-token", {}).ok());
  WritePolicy("new-token");
  ASSERT_TRUE(ids.Reload().ok());
  EXPECT_FALSE(ids.Authenticate("Bearer old-token", {}).ok());
  EXPECT_TRUE(ids.Authenticate("Bearer new-token", {}).ok());
}

// A caller resolved earlier (a sweep's owner) is looked up again: the
// policy of now decides its rights, and a user removed is refused.
TEST_F(IdentitiesTest, AStoredCallerHasTheRightsOfNow) {
  const std::string path = dir_.path() + "/policy.yaml";
  std::ofstream(path) << "users:\n  - {name: carol, token_sha256: \"" << Sha256Hex("t") << "\", role: admin}\n";
  Identities ids("admin-secret", path, {"/data/{user}"});
  ASSERT_TRUE(ids.Reload().ok());
  auto stored = ids.Authenticate("Bearer t", {});
  ASSERT_TRUE(stored.ok());
  ASSERT_TRUE(stored->admin);
  std::ofstream(path) << "users:\n  - {name: carol, token_sha256: \"" << Sha256Hex("t")
                      << "\", groups: [nlp], roots: [/data/narrow]}\n";
  ASSERT_TRUE(ids.Reload().ok());
  auto now = ids.Current(*stored);
  ASSERT_TRUE(now.ok()) << now.status();
  EXPECT_FALSE(now->admin);
  EXPECT_EQ(now->roots, std::vector<std::string>{"/data/narrow"});
  EXPECT_EQ(now->groups, std::vector<std::string>{"nlp"});
  std::ofstream(path) << "users: []\n";
  ASSERT_TRUE(ids.Reload().ok());
  auto gone = ids.Current(*stored);
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.status().message(), "user carol is no longer in the server's policy");
  // The admin token's caller stays an admin while the token is the server's.
  auto admin = ids.Current(Caller{"", {}, true});
  ASSERT_TRUE(admin.ok());
  EXPECT_TRUE(admin->admin);
  EXPECT_FALSE(Identities("", path, {}).Current(Caller{"", {}, true}).ok());
}

}  // namespace
}  // namespace trainyard
