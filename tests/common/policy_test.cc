// The policy file: users by token hash, groups and roles, priority classes,
// quotas; every refusal names the field.
#include "common/policy.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "tests/test_paths.h"

namespace trainyard {
namespace {

// SHA-256 test vectors (FIPS 180-2): the empty string and "abc".
TEST(Sha256, KnownVectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

std::string Policy3() {
  return "users:\n"
         "  - {name: alice, token_sha256: \"" +
         Sha256Hex("alice-token") +
         "\", groups: [vision], role: user}\n"
         "  - {name: bob, token_sha256: \"" +
         Sha256Hex("bob-token") +
         "\", groups: [vision, nlp]}\n"
         "  - {name: ops, token_sha256: \"" +
         Sha256Hex("ops-token") +
         "\", role: admin}\n"
         "priority_classes: {low: 0, normal: 100, high: 1000}\n"
         "quotas:\n"
         "  users: {alice: {slots: 8, gpus: 0, queued_jobs: 100}}\n"
         "  groups: {vision: {slots: 16}}\n";
}

TEST(Policy, ParsesUsersClassesAndQuotas) {
  auto p = ParsePolicy(Policy3(), "policy.yaml");
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->users.size(), 3u);
  const PolicyUser* alice = p->UserOfToken("alice-token");
  ASSERT_NE(alice, nullptr);
  EXPECT_EQ(alice->name, "alice");
  EXPECT_EQ(alice->role, Role::kUser);
  EXPECT_EQ(alice->groups, std::vector<std::string>{"vision"});
  EXPECT_EQ(p->UserOfToken("ops-token")->role, Role::kAdmin);
  EXPECT_EQ(p->User("bob")->groups, (std::vector<std::string>{"vision", "nlp"}));
  EXPECT_EQ(p->UserOfToken("nobody's token"), nullptr);
  EXPECT_EQ(p->UserOfToken(Sha256Hex("alice-token")), nullptr) << "the hash itself is no token";
  EXPECT_EQ(p->Priority("high"), 1000);
  EXPECT_EQ(p->Priority(""), 100);  // the default class, normal
  EXPECT_EQ(p->Priority("urgent"), std::nullopt);
  EXPECT_EQ(p->user_quotas.at("alice").slots, 8);
  EXPECT_EQ(p->user_quotas.at("alice").gpus, 0);
  EXPECT_EQ(p->user_quotas.at("alice").queued_jobs, 100);
  EXPECT_EQ(p->group_quotas.at("vision").slots, 16);
  EXPECT_EQ(p->group_quotas.at("vision").gpus, std::nullopt);
}

TEST(Policy, RootsMaximumClassesAndGroupVisibility) {
  const std::string text = "users:\n  - {name: alice, token_sha256: \"" + Sha256Hex("a") +
                           "\", groups: [vision], roots: [/data/alice, /scratch/alice]}\n"
                           "priority_classes: {low: 0, normal: 100, high: 1000}\n"
                           "quotas:\n  users: {alice: {max_priority_class: normal}}\n"
                           "  groups: {vision: {gpus: 4, max_priority_class: low}}\n"
                           "group_visibility: true\n";
  auto p = ParsePolicy(text, "policy.yaml");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->User("alice")->roots, (std::vector<std::string>{"/data/alice", "/scratch/alice"}));
  EXPECT_EQ(p->user_quotas.at("alice").max_priority_class, "normal");
  EXPECT_EQ(p->group_quotas.at("vision").max_priority_class, "low");
  EXPECT_EQ(p->group_quotas.at("vision").gpus, 4);
  EXPECT_TRUE(p->group_visibility);
  EXPECT_FALSE(ParsePolicy("users: []\n", "p")->group_visibility);
}

// The example deploy/ ships parses as its comments say. (ReadPolicy would
// also resolve its accounts, alice and bob, which this machine need not have.)
TEST(Policy, TheDeployExampleParses) {
  std::ifstream f(std::string(TRAINYARD_SOURCE_DIR) + "/deploy/policy.example.yaml");
  std::stringstream text;
  text << f.rdbuf();
  auto p = ParsePolicy(text.str(), "policy.example.yaml");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->User("alice")->unix_user, "alice");
  EXPECT_EQ(p->User("ops")->unix_user, "");
  EXPECT_EQ(p->users.size(), 3u);
  EXPECT_EQ(p->User("ops")->role, Role::kAdmin);
  EXPECT_EQ(p->Priority(""), 100);
  EXPECT_EQ(p->user_quotas.at("alice").gpus, 4);
  EXPECT_TRUE(p->group_visibility);
}

// An empty file, one of comments only, or one cut short (no final newline)
// is refused: it would read as a policy with fewer users, or none. A file
// that says so is a policy without users.
TEST(Policy, AnEmptyOrCutShortFileIsRefused) {
  for (const std::string& text : {std::string(""), std::string("\n  \n"), std::string("# users: later\n")}) {
    auto p = ParsePolicy(text, "policy.yaml");
    ASSERT_FALSE(p.ok()) << text;
    EXPECT_NE(p.status().message().find("policy.yaml: "), std::string::npos) << p.status();
    EXPECT_NE(p.status().message().find("without --policy-file"), std::string::npos) << p.status();
  }
  const std::string whole = "users:\n  - {name: a, token_sha256: \"" + Sha256Hex("t") + "\"}\n";
  ASSERT_TRUE(ParsePolicy(whole, "policy.yaml").ok());
  auto cut = ParsePolicy(whole.substr(0, whole.size() - 5), "policy.yaml");
  ASSERT_FALSE(cut.ok());
  EXPECT_NE(cut.status().message().find("does not end with a newline"), std::string::npos) << cut.status();
  auto none = ParsePolicy("users: []\n", "policy.yaml");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->users.empty());
  EXPECT_EQ(none->Priority(""), std::nullopt);
}

struct Bad {
  std::string text;
  std::vector<std::string> expected;
};

TEST(Policy, WebhooksForEveryJobAndForAUsersJobs) {
  auto p = ParsePolicy("users:\n  - {name: alice, token_sha256: \"" + Sha256Hex("a") +
                           "\", notify: {urls: [\"https://hooks.example/alice\"]}}\n"
                           "notify: {urls: [\"http://127.0.0.1:8080/ops\"], on: [failed, PREEMPTED]}\n",
                       "policy.yaml");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->notify.urls, std::vector<std::string>{"http://127.0.0.1:8080/ops"});
  EXPECT_EQ(p->notify.on, (std::vector<std::string>{"FAILED", "PREEMPTED"}));
  EXPECT_EQ(p->User("alice")->notify.urls, std::vector<std::string>{"https://hooks.example/alice"});
  EXPECT_EQ(p->User("alice")->notify.on, (std::vector<std::string>{"SUCCEEDED", "FAILED", "CANCELLED"}));
}

TEST(Policy, RefusalsNameTheField) {
  const std::string h = Sha256Hex("t");
  const std::vector<Bad> cases = {
      {"userz: []\n", {"policy.yaml", "field 'userz'", "unknown key"}},
      {"users: [{name: a, token_sha256: abc}]\n", {"field 'users[0].token_sha256'", "64"}},
      {"users: [{name: a, token_sha256: \"" + std::string(64, 'A') + "\"}]\n", {"'users[0].token_sha256'"}},
      {"users: [{name: a, token_sha256: \"" + h + "\"}, {name: a, token_sha256: \"" + Sha256Hex("u") + "\"}]\n",
       {"'users[1].name'", "twice"}},
      {"users: [{name: a, token_sha256: \"" + h + "\"}, {name: b, token_sha256: \"" + h + "\"}]\n",
       {"'users[1].token_sha256'", "same token"}},
      {"users: [{name: a, token_sha256: \"" + h + "\", role: root}]\n", {"'users[0].role'", "user, admin"}},
      {"users: [{name: a, token_sha256: \"" + h + "\", colour: red}]\n", {"'users[0].colour'", "unknown key"}},
      {"priority_classes: {low: 0, high: 9}\n", {"'default_priority_class'", "normal"}},
      {"priority_classes: {normal: 1}\ndefault_priority_class: mid\n", {"'default_priority_class'", "mid"}},
      {"priority_classes: {normal: x}\n", {"'priority_classes.normal'", "integer"}},
      {"users: [{name: a, token_sha256: \"" + h + "\"}]\nquotas: {users: {b: {slots: 1}}}\n",
       {"'quotas.users.b'", "no user"}},
      {"users: [{name: a, token_sha256: \"" + h + "\"}]\nquotas: {groups: {g: {slots: 1}}}\n",
       {"'quotas.groups.g'", "no user is in group"}},
      {"users: [{name: a, token_sha256: \"" + h + "\"}]\nquotas: {users: {a: {slots: -1}}}\n",
       {"'quotas.users.a.slots'"}},
      {"users: [{name: a, token_sha256: \"" + h + "\"}]\nquotas: {users: {a: {cpus: 1}}}\n",
       {"'quotas.users.a.cpus'", "unknown key"}},
      {"users: {a: 1}\n", {"'users'", "list"}},
      {"users: [{name: a, token_sha256: \"" + h + "\", roots: [data]}]\n", {"'users[0].roots[0]'", "absolute"}},
      {"notify: {urls: [\"ftp://x.example/\"]}\n", {"'notify.urls[0]'", "http"}},
      {"notify: {urls: [\"https://x.example/\"], on: [DONE]}\n", {"'notify.on'", "SUCCEEDED"}},
      {"users: [{name: a, token_sha256: \"" + h + "\", notify: {urls: [\"https://u:p@x.example/\"]}}]\n",
       {"'users[0].notify.urls[0]'"}},
      {"users: [{name: a, token_sha256: \"" + h + "\", notify: {url: x}}]\n", {"'users[0].notify.url'", "unknown"}},
      {"users: [{name: a, token_sha256: \"" + h +
           "\"}]\npriority_classes: {normal: 1}\n"
           "quotas: {users: {a: {max_priority_class: top}}}\n",
       {"'quotas.users.a.max_priority_class'", "'top'"}},
      {"group_visibility: maybe\n", {"'group_visibility'"}},
      {"[1, 2\n", {"policy.yaml", "not YAML"}},
      {"users: [{name: a, token_sha256: \"" + Sha256Hex("") + "\"}]\n",
       {"'users[0].token_sha256'", "SHA-256 of an empty token"}},
  };
  for (const Bad& b : cases) {
    auto p = ParsePolicy(b.text, "policy.yaml");
    ASSERT_FALSE(p.ok()) << b.text;
    for (const std::string& part : b.expected) {
      EXPECT_NE(p.status().message().find(part), std::string::npos) << b.text << " → " << p.status();
    }
  }
}

TEST(Policy, ASecondQuotasBlockIsRefusedNotIgnored) {
  auto p = ParsePolicy(Policy3() + "quotas:\n  users: {bob: {slots: 1}}\n", "policy.yaml");
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("policy.yaml: key 'quotas' appears twice (lines 6 and 9)"), std::string::npos)
      << p.status();
}

}  // namespace
}  // namespace trainyard
