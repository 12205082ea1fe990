// The access rules alone: who may see and act on a job, what a list shows,
// which priority a submission gets, the queued-jobs quota.
#include "server/auth/access.h"

#include <gtest/gtest.h>

#include "common/job_spec.h"

namespace trainyard {
namespace {

Policy Team(bool group_visibility) {
  Policy p;
  p.priority_classes = {{"low", 0}, {"normal", 100}, {"high", 1000}};
  p.default_priority_class = "normal";
  p.user_quotas["alice"].queued_jobs = 2;
  p.group_quotas["interns"].max_priority_class = "low";
  p.group_visibility = group_visibility;
  return p;
}

JobRecord JobOf(std::string owner, std::string group) {
  JobRecord r;
  r.owner = std::move(owner);
  r.group = std::move(group);
  return r;
}

const Caller kAlice{"alice", {"vision"}, false, {}};
const Caller kCarol{"carol", {"vision", "interns"}, false, {}};
const Caller kBob{"bob", {"nlp"}, false, {}};
const Caller kOps{"ops", {}, true, {}};

// A script's env (its secrets) goes to its owner and admins only.
TEST(Access, ScriptEnvIsHiddenFromEveryoneButTheOwnerAndAdmins) {
  auto spec = ParseJobSpec("script: {path: train.py, env: {HF_TOKEN: s3cret, WANDB_API_KEY: k3y}}\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  JobRecord job = JobOf("alice", "vision");
  job.spec_json = JobSpecToJson(*spec);
  ASSERT_NE(job.spec_json.find("s3cret"), std::string::npos) << job.spec_json;
  for (const Caller& sees : {kAlice, kOps, Caller{}}) {
    JobRecord copy = job;
    HideSecrets(sees, &copy);
    EXPECT_EQ(copy.spec_json, job.spec_json) << sees.user;
  }
  JobRecord shown = job;
  HideSecrets(kCarol, &shown);  // a group member who may look
  EXPECT_EQ(shown.spec_json.find("s3cret"), std::string::npos) << shown.spec_json;
  EXPECT_EQ(shown.spec_json.find("k3y"), std::string::npos) << shown.spec_json;
  EXPECT_NE(shown.spec_json.find("HF_TOKEN"), std::string::npos) << "the names stay";
  EXPECT_NE(shown.spec_json.find("(hidden)"), std::string::npos);
  auto parsed = ParseJobSpec(shown.spec_json);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->script.env.at("HF_TOKEN"), "(hidden)");
  EXPECT_EQ(parsed->script.path, "train.py");
}

// A webhook's path and query (a receiver's token) go to its owner and
// admins only; others see scheme://host[:port].
TEST(Access, WebhookUrlsAreCutToTheirHostForEveryoneButTheOwnerAndAdmins) {
  auto spec = ParseJobSpec(
      "notify: {urls: [\"https://hooks.slack.com/services/T0/B0/s3cret\",\n"
      "                \"http://relay.example:8080/h?token=k3y\"]}\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  JobRecord job = JobOf("alice", "vision");
  job.spec_json = JobSpecToJson(*spec);
  for (const Caller& sees : {kAlice, kOps, Caller{}}) {
    JobRecord copy = job;
    HideSecrets(sees, &copy);
    EXPECT_EQ(copy.spec_json, job.spec_json) << sees.user;
  }
  JobRecord shown = job;
  HideSecrets(kCarol, &shown);
  EXPECT_EQ(shown.spec_json.find("s3cret"), std::string::npos) << shown.spec_json;
  EXPECT_EQ(shown.spec_json.find("k3y"), std::string::npos) << shown.spec_json;
  auto parsed = ParseJobSpec(shown.spec_json);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->notify.urls, (std::vector<std::string>{"https://hooks.slack.com", "http://relay.example:8080"}));
}

TEST(Access, OwnersAndAdminsActGroupMembersOnlyLookWhenAllowed) {
  const JobRecord job = JobOf("alice", "vision");
  for (bool visible : {false, true}) {
    const Policy p = Team(visible);
    EXPECT_TRUE(MayAccess(p, kAlice, job, false));
    EXPECT_TRUE(MayAccess(p, kOps, job, false));
    EXPECT_TRUE(MayAccess(p, Caller{}, job, false)) << "a server without users";
    EXPECT_FALSE(MayAccess(p, kBob, job, true));
    EXPECT_FALSE(MayAccess(p, kCarol, job, false));
    EXPECT_EQ(MayAccess(p, kCarol, job, true), visible);
  }
  EXPECT_FALSE(MayAccess(Team(true), kCarol, JobOf("dave", ""), true)) << "no group: nobody else's";
}

TEST(Access, ListsShowTheCallersOwnUnlessAllUsersMayBeShown) {
  EXPECT_EQ(ListScopeFor(Team(false), kBob, false)->owners, std::vector<std::string>{"bob"});
  EXPECT_EQ(ListScopeFor(Team(false), kBob, true).status().code(), absl::StatusCode::kPermissionDenied);
  auto carol = ListScopeFor(Team(true), kCarol, true);
  ASSERT_TRUE(carol.ok());
  EXPECT_EQ(carol->owners, std::vector<std::string>{"carol"});
  EXPECT_EQ(carol->groups, (std::vector<std::string>{"vision", "interns"}));
  EXPECT_EQ(ListScopeFor(Team(false), kOps, false)->owners, std::vector<std::string>{"ops"});
  auto all = ListScopeFor(Team(false), kOps, true);
  EXPECT_TRUE(all->owners.empty() && all->groups.empty());
  EXPECT_TRUE(ListScopeFor(Team(false), Caller{}, false)->owners.empty());
}

TEST(Access, PriorityIsTheClassValueWithinEveryMaximum) {
  const Policy p = Team(false);
  EXPECT_EQ(*PriorityFor(p, kAlice, ""), 100);
  EXPECT_EQ(*PriorityFor(p, kAlice, "high"), 1000);
  auto intern = PriorityFor(p, kCarol, "normal");
  EXPECT_EQ(intern.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(intern.status().message(), "spec field 'priority': group interns may submit up to 'low', not 'normal'");
  EXPECT_EQ(PriorityFor(p, kCarol, "").status().code(), absl::StatusCode::kPermissionDenied) << "the default too";
  EXPECT_EQ(*PriorityFor(p, kCarol, "low"), 0);
  EXPECT_EQ(*PriorityFor(p, Caller{"root", {"interns"}, true, {}}, "high"), 1000) << "admins have no maximum";
  EXPECT_EQ(*PriorityFor(Policy{}, kAlice, ""), 0);
  EXPECT_EQ(PriorityFor(Policy{}, kAlice, "high").status().message(),
            "spec field 'priority': this server has no priority classes (got 'high')");
  EXPECT_EQ(ClassName(p, 1000), "high");
  EXPECT_EQ(ClassName(p, 7), "");
}

TEST(Access, QueuedJobsQuota) {
  const Policy p = Team(false);
  EXPECT_TRUE(CheckQueuedJobs(p, kAlice, 1).ok());
  EXPECT_EQ(CheckQueuedJobs(p, kAlice, 2).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(CheckQueuedJobs(p, kBob, 1000).ok());
}

}  // namespace
}  // namespace trainyard
