// Leadership over a real PostgreSQL (tests/server/store/pg_test_server.h):
// one of several coordinators leads; a standby takes over, with the next
// term, when the lease expires by the database's clock or is given up; a
// leader cut off from the database steps down within the lease by its own
// clock; a replaced leader's writes are fenced off.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "server/leadership/leadership.h"
#include "server/leadership/lease_table.h"
#include "server/store/pg_connection.h"
#include "server/store/stores.h"
#include "tests/server/store/pg_test_server.h"

namespace trainyard {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

constexpr milliseconds kLease{600};

// Waits up to `limit` for `done`, looking every 10 ms.
template <typename F>
bool Within(milliseconds limit, F done) {
  const auto end = steady_clock::now() + limit;
  while (!done()) {
    if (steady_clock::now() > end) return false;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return true;
}

class LeadershipTest : public testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    server_ = test::PgTestServer::Shared(&error);
    ASSERT_NE(server_, nullptr) << error;
    auto url = server_->NewDatabase();
    ASSERT_TRUE(url.ok()) << url.status();
    url_ = *url;
    // The schema (with the lease row) as a coordinator's start makes it.
    auto stores = OpenStores(url_, "", nullptr);
    ASSERT_TRUE(stores.ok()) << stores.status();
  }

  std::unique_ptr<LeaseTable> Table(const std::string& name, const std::string& url = "") {
    auto c = pg::Connection::Open(url.empty() ? url_ : url, milliseconds(300), milliseconds(300));
    EXPECT_TRUE(c.ok()) << c.status();
    if (!c.ok()) return nullptr;
    return std::make_unique<LeaseTable>(std::move(*c), LeaseClaim{name, name + ":50051", name + ":9464"}, kLease);
  }

  std::unique_ptr<Leadership> Coordinator(const std::string& name, const std::string& url = "") {
    LeadershipOptions o;
    o.lease = kLease;
    o.renew_every = milliseconds(100);
    o.poll_every = milliseconds(50);
    auto l = std::make_unique<Leadership>(Table(name, url), o);
    l->Start();
    return l;
  }

  test::PgTestServer* server_ = nullptr;
  std::string url_;
};

TEST_F(LeadershipTest, OneLeadsAndTheOthersNameIt) {
  auto a = Coordinator("a");
  ASSERT_EQ(a->AwaitLeading(), 1);
  auto b = Coordinator("b");
  auto c = Coordinator("c");
  ASSERT_TRUE(Within(milliseconds(2000), [&] { return b->view().leader_address == "a:50051"; }));
  ASSERT_TRUE(Within(milliseconds(2000), [&] { return c->view().leader_address == "a:50051"; }));
  // Renewed well past several leases, the lease stays a's.
  std::this_thread::sleep_for(3 * kLease);
  EXPECT_EQ(a->view().role, Leadership::Role::kLeader);
  EXPECT_EQ(a->view().term, 1);
  EXPECT_EQ(b->view().role, Leadership::Role::kStandby);
  EXPECT_EQ(c->view().role, Leadership::Role::kStandby);
  EXPECT_EQ(b->view().term, 1);
}

TEST_F(LeadershipTest, AStoppedLeaderGivesUpItsLeaseAndAStandbyTakesTheNextTerm) {
  auto a = Coordinator("a");
  ASSERT_EQ(a->AwaitLeading(), 1);
  auto b = Coordinator("b");
  ASSERT_TRUE(Within(milliseconds(2000), [&] { return b->view().leader_address == "a:50051"; }));
  const auto stopped = steady_clock::now();
  a->Stop();
  ASSERT_EQ(b->AwaitLeading(), 2);
  // Given up, not expired: well within one lease.
  EXPECT_LT(steady_clock::now() - stopped, kLease);
  EXPECT_EQ(b->view().leader_address, "b:50051");
}

// The lease row alone, as a leader that stopped renewing (a paused
// process) sees it: it expires by the database's clock, a standby takes the
// next term, the old term's renewal is refused, and a store fenced at the
// old term writes nothing.
TEST_F(LeadershipTest, APausedLeaderIsReplacedAndFencedOff) {
  auto a = Table("a");
  auto b = Table("b");
  auto taken = a->TryTake();
  ASSERT_TRUE(taken.ok()) << taken.status();
  ASSERT_EQ(*taken, 1);
  auto fence = std::make_shared<Fence>(1);
  auto stores = OpenStores(url_, "", fence);
  ASSERT_TRUE(stores.ok()) << stores.status();
  JobRecord job;
  job.id = "job-00000001";
  job.name = "before";
  job.spec_json = "{}";
  ASSERT_TRUE(stores->jobs->Insert(job, JobEvent{1, JobState::kQueued, "queued"}).ok());
  // Not before the lease is over by the database's clock.
  auto early = b->TryTake();
  ASSERT_TRUE(early.ok());
  EXPECT_FALSE(early->has_value());
  std::optional<int64_t> next;
  ASSERT_TRUE(Within(milliseconds(3000), [&] {
    auto t = b->TryTake();
    if (t.ok() && t->has_value()) next = *t;
    return next.has_value();
  }));
  EXPECT_EQ(*next, 2);
  auto renewed = a->Renew(1);
  ASSERT_TRUE(renewed.ok()) << renewed.status();
  EXPECT_FALSE(*renewed);
  job.id = "job-00000002";
  job.name = "after";
  absl::Status late = stores->jobs->Insert(job, JobEvent{2, JobState::kQueued, "queued"});
  EXPECT_EQ(late.code(), absl::StatusCode::kFailedPrecondition) << late;
  EXPECT_TRUE(fence->lost());
  auto listed = stores->jobs->List(10);
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].name, "before");
}

// Cut off from the database, a leader steps down within the lease by its
// own clock (AwaitLost returns), before a standby could take over; when the
// database is back one of them leads again, with a later term.
TEST_F(LeadershipTest, ALeaderCutOffFromTheDatabaseStepsDownWithinTheLease) {
  auto own = test::PgTestServer::Start();
  ASSERT_TRUE(own.ok()) << own.status();
  auto url = (*own)->NewDatabase();
  ASSERT_TRUE(url.ok()) << url.status();
  ASSERT_TRUE(OpenStores(*url, "", nullptr).ok());
  auto a = Coordinator("a", *url);
  const auto term = a->AwaitLeading();
  ASSERT_EQ(term, 1);
  ASSERT_TRUE((*own)->Kill().ok());
  const auto cut = steady_clock::now();
  const std::string why = a->AwaitLost(*term);
  const auto took = steady_clock::now() - cut;
  EXPECT_NE(why.find("no renewal"), std::string::npos) << why;
  EXPECT_LE(took, kLease + milliseconds(150));
  EXPECT_EQ(a->view().role, Leadership::Role::kStandby);
  ASSERT_TRUE((*own)->Restart().ok());
  const auto again = a->AwaitLeading();
  ASSERT_TRUE(again.has_value());
  EXPECT_GT(*again, 1);
}

// A write that found its term stale steps the leader down at once.
TEST_F(LeadershipTest, StepDownEndsLeadershipOfThatTermOnly) {
  auto a = Coordinator("a");
  ASSERT_EQ(a->AwaitLeading(), 1);
  a->StepDown(7, "another term");
  EXPECT_EQ(a->view().role, Leadership::Role::kLeader);
  a->StepDown(1, "a write found term 2 in the database");
  EXPECT_EQ(a->AwaitLost(1), "a write found term 2 in the database");
  EXPECT_EQ(a->view().role, Leadership::Role::kStandby);
}

}  // namespace
}  // namespace trainyard
