// Identities: who a call comes from — an admin token, a user of the policy
// file by token or client certificate, or anyone on an open server.
#include "server/identities.h"

#include <gtest/gtest.h>

#include <fstream>

#include "common/policy.h"
#include "tests/test_util.h"

namespace trainyard {
namespace {

class IdentitiesTest : public ::testing::Test {
 protected:
  std::string WritePolicy(const std::string& alice_token) {
    const std::string path = dir_.path() + "/policy.yaml";
    std::ofstream(path) << "users:\n  - {name: alice, token_sha256: \"" << Sha256Hex(alice_token)
                        << "\", groups: [vision]}\n";
    return path;
  }
  TempDir dir_;
};

TEST_F(IdentitiesTest, AnOpenServerTakesAnyone) {
  Identities ids("", "", {});
  EXPECT_TRUE(ids.open());
  auto c = ids.Authenticate("", "");
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->user.empty());
}

TEST_F(IdentitiesTest, UsersByTokenOrCertificateAndTheAdminToken) {
  Identities ids("admin-secret", WritePolicy("alice-token"), {"/data/{user}"});
  ASSERT_TRUE(ids.Reload().ok());
  EXPECT_FALSE(ids.open());
  auto alice = ids.Authenticate("Bearer alice-token", "");
  ASSERT_TRUE(alice.ok()) << alice.status();
  EXPECT_EQ(alice->user, "alice");
  EXPECT_EQ(alice->groups, std::vector<std::string>{"vision"});
  EXPECT_FALSE(alice->admin);
  EXPECT_EQ(alice->roots, std::vector<std::string>{"/data/alice"});  // {user} stands for the name
  auto by_cert = ids.Authenticate("", "alice");
  ASSERT_TRUE(by_cert.ok());
  EXPECT_EQ(by_cert->user, "alice");
  auto admin = ids.Authenticate("Bearer admin-secret", "");
  ASSERT_TRUE(admin.ok());
  EXPECT_TRUE(admin->admin);
  EXPECT_EQ(ids.Authenticate("Bearer forged", "").status().code(), absl::StatusCode::kUnauthenticated);
  auto empty = ids.Authenticate("Bearer ", "");
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(empty.status().message(), "the bearer token is empty");
  EXPECT_EQ(ids.Authenticate("Basic alice-token", "").status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(ids.Authenticate("", "mallory").status().code(), absl::StatusCode::kUnauthenticated);
}

// A reload that fails keeps the previous policy; one that succeeds swaps it.
TEST_F(IdentitiesTest, ReloadSwapsThePolicyOrKeepsIt) {
  const std::string path = WritePolicy("old-token");
  Identities ids("", path, {});
  ASSERT_TRUE(ids.Reload().ok());
  std::ofstream(path) << "users: [";  // broken
  EXPECT_FALSE(ids.Reload().ok());
  EXPECT_TRUE(ids.Authenticate("Bearer old-token", "").ok());
  WritePolicy("new-token");
  ASSERT_TRUE(ids.Reload().ok());
  EXPECT_FALSE(ids.Authenticate("Bearer old-token", "").ok());
  EXPECT_TRUE(ids.Authenticate("Bearer new-token", "").ok());
}

}  // namespace
}  // namespace trainyard
