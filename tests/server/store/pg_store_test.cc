// What only the PostgreSQL store has: the leader term every write checks
// (Fence), schema versions shared by several coordinators, and a database
// that goes away and comes back.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <thread>

#include "server/store/fence.h"
#include "server/store/pg_connection.h"
#include "server/store/pg_schema.h"
#include "server/store/stores.h"
#include "tests/server/store/pg_test_server.h"
#include "tests/test_util.h"

namespace trainyard {
namespace {

using std::chrono::steady_clock;

JobRecord MakeJob(const std::string& id) {
  JobRecord r;
  r.id = id;
  r.name = "n-" + id;
  r.spec_json = "{}";
  return r;
}

class PgStoreTest : public testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    server_ = test::PgTestServer::Shared(&error);
    ASSERT_NE(server_, nullptr) << error;
    auto url = server_->NewDatabase();
    ASSERT_TRUE(url.ok()) << url.status();
    url_ = *url;
  }
  // A connection of the test's own to the test's database.
  std::unique_ptr<pg::Connection> Sql() {
    auto c = pg::Connection::Open(url_);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }

  test::PgTestServer* server_ = nullptr;
  std::string url_;
};

// A write under a term the database has moved past writes nothing, is
// FailedPrecondition naming both terms and calls OnLost once; a write under
// the current term lands.
TEST_F(PgStoreTest, AWriteUnderAStaleTermWritesNothing) {
  auto fence = std::make_shared<Fence>(5);
  std::atomic<int> lost_calls{0};
  std::atomic<int64_t> lost_term{0};
  fence->OnLost([&](int64_t db_term) {
    ++lost_calls;
    lost_term = db_term;
  });
  auto stores = OpenStores(url_, "", fence);
  ASSERT_TRUE(stores.ok()) << stores.status();
  EXPECT_TRUE(stores->shared);
  auto sql = Sql();
  ASSERT_TRUE(sql->Exec("UPDATE trainyard_leader SET term = 5 WHERE id = 1").ok());
  ASSERT_TRUE(stores->jobs->Insert(MakeJob("a"), {1, JobState::kQueued, "submitted"}).ok()) << "term 5 leads";
  ASSERT_TRUE(sql->Exec("UPDATE trainyard_leader SET term = 6 WHERE id = 1").ok());  // another took over

  absl::Status s = stores->jobs->Insert(MakeJob("b"), {1, JobState::kQueued, "submitted"});
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("term 5"), std::string::npos) << s;
  EXPECT_NE(s.message().find("term 6"), std::string::npos) << s;
  EXPECT_EQ(lost_calls, 1);
  EXPECT_EQ(lost_term, 6);
  EXPECT_TRUE(fence->lost());
  JobRecord a = MakeJob("a");
  a.state = JobState::kCancelled;
  EXPECT_EQ(stores->jobs->Update(a, nullptr).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(stores->sweeps->Insert(SweepRecord{.id = "w"}).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(lost_calls, 1) << "once a term";
  EXPECT_EQ(stores->jobs->Get("b").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(stores->jobs->Get("a")->state, JobState::kQueued);
  EXPECT_TRUE(stores->sweeps->List()->empty());

  fence->set_term(6);  // this coordinator leads again, with the new term
  EXPECT_FALSE(fence->lost());
  ASSERT_TRUE(stores->jobs->Update(a, nullptr).ok());
  EXPECT_EQ(stores->jobs->Get("a")->state, JobState::kCancelled);
}

// Term 0 is unfenced: its writes do not look at the leader's row.
TEST_F(PgStoreTest, AnUnfencedStoreWritesWhateverTheTerm) {
  auto stores = OpenStores(url_, "", std::make_shared<Fence>(0));
  ASSERT_TRUE(stores.ok()) << stores.status();
  ASSERT_TRUE(Sql()->Exec("UPDATE trainyard_leader SET term = 42 WHERE id = 1").ok());
  EXPECT_TRUE(stores->jobs->Insert(MakeJob("a"), {1, JobState::kQueued, "submitted"}).ok());
}

// Two coordinators starting at once on an empty database: both open, and
// each migration is applied once.
TEST_F(PgStoreTest, TwoOpensAtOnceMigrateOnce) {
  absl::Status a, b;
  std::thread first([&] { a = OpenStores(url_, "").status(); });
  std::thread second([&] { b = OpenStores(url_, "").status(); });
  first.join();
  second.join();
  EXPECT_TRUE(a.ok()) << a;
  EXPECT_TRUE(b.ok()) << b;
  auto rows = Sql()->Exec("SELECT version FROM trainyard_schema ORDER BY version");
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(static_cast<int64_t>(rows->rows.size()), pg::SchemaVersion());
  EXPECT_EQ(rows->rows[0][0], "1");
  auto leader = Sql()->Exec("SELECT term, holder FROM trainyard_leader");
  ASSERT_TRUE(leader.ok());
  ASSERT_EQ(leader->rows.size(), 1u);
  EXPECT_EQ(leader->rows[0][0], "0");
}

// A database a newer binary migrated is refused, saying so, and left alone.
TEST_F(PgStoreTest, ANewerSchemaIsRefused) {
  ASSERT_TRUE(OpenStores(url_, "").ok());
  ASSERT_TRUE(
      Sql()->Exec("INSERT INTO trainyard_schema VALUES ($1, now())", {std::to_string(pg::SchemaVersion() + 1)}).ok());
  auto stores = OpenStores(url_, "");
  ASSERT_FALSE(stores.ok());
  EXPECT_EQ(stores.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(stores.status().message().find("newer than this trainyard-server knows"), std::string::npos)
      << stores.status();
}

// NaN and the infinities are kept as they are (SQLite cannot hold a NaN).
TEST_F(PgStoreTest, NanAndInfinitiesRoundTrip) {
  auto stores = OpenStores(url_, "");
  ASSERT_TRUE(stores.ok()) << stores.status();
  JobRecord r = MakeJob("nan");
  r.loss = std::nan("");
  r.first_loss = HUGE_VAL;
  r.samples_per_second = -HUGE_VAL;
  ASSERT_TRUE(stores->jobs->Insert(r, {1, JobState::kQueued, "submitted"}).ok());
  auto back = stores->jobs->Get("nan");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(std::isnan(back->loss));
  EXPECT_EQ(back->first_loss, HUGE_VAL);
  EXPECT_EQ(back->samples_per_second, -HUGE_VAL);
}

// Concurrent writers share the pool: every one lands, once.
TEST_F(PgStoreTest, ConcurrentWritersAllLand) {
  auto stores = OpenStores(url_, "");
  ASSERT_TRUE(stores.ok()) << stores.status();
  std::vector<std::thread> threads;
  std::atomic<int> failed{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 25; ++i) {
        const std::string id = "t" + std::to_string(t) + "-" + std::to_string(i);
        if (!stores->jobs->Insert(MakeJob(id), {i, JobState::kQueued, "submitted"}).ok()) ++failed;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failed, 0);
  EXPECT_EQ(stores->jobs->List(-1)->size(), 200u);
}

// A database that crashed: calls fail UNAVAILABLE at once (no hang); once it
// is back, the same store works again (its connections reconnect).
TEST(PgStoreRecoveryTest, AKilledDatabaseIsUnavailableAndTheStoreRecovers) {
  auto server = test::PgTestServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  auto url = (*server)->NewDatabase();
  ASSERT_TRUE(url.ok()) << url.status();
  auto stores = OpenStores(*url, "");
  ASSERT_TRUE(stores.ok()) << stores.status();
  ASSERT_TRUE(stores->jobs->Insert(MakeJob("before"), {1, JobState::kQueued, "submitted"}).ok());

  ASSERT_TRUE((*server)->Kill().ok());
  const auto start = steady_clock::now();
  absl::Status write = stores->jobs->Insert(MakeJob("during"), {1, JobState::kQueued, "submitted"});
  absl::Status read = stores->jobs->Get("before").status();
  const auto took = steady_clock::now() - start;
  EXPECT_EQ(write.code(), absl::StatusCode::kUnavailable) << write;
  EXPECT_EQ(read.code(), absl::StatusCode::kUnavailable) << read;
  EXPECT_LT(took, std::chrono::seconds(3));
  EXPECT_EQ(write.message().find("password"), std::string::npos);

  ASSERT_TRUE((*server)->Restart().ok());
  absl::Status again = stores->jobs->Insert(MakeJob("after"), {1, JobState::kQueued, "submitted"});
  EXPECT_TRUE(again.ok()) << again;
  auto all = stores->jobs->List(-1);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].id, "before");
  EXPECT_EQ((*all)[1].id, "after");
}

// A database that stops answering (its process stopped, as a cut-off link
// looks) fails a statement UNAVAILABLE about its statement_timeout later,
// and the connection is broken until Reset.
TEST_F(PgStoreTest, ADatabaseThatStopsAnsweringFailsInBoundedTime) {
  auto c = pg::Connection::Open(url_, std::chrono::seconds(2), std::chrono::milliseconds(500));
  ASSERT_TRUE(c.ok()) << c.status();
  const int pid = (*c)->backend_pid();
  ASSERT_GT(pid, 0);
  ASSERT_EQ(::kill(pid, SIGSTOP), 0);
  const auto start = steady_clock::now();
  auto r = (*c)->Exec("SELECT 1");
  const auto took = steady_clock::now() - start;
  ::kill(pid, SIGCONT);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
  EXPECT_LT(took, std::chrono::seconds(5));
  EXPECT_TRUE((*c)->broken());
  ASSERT_TRUE((*c)->Reset().ok());
  auto one = (*c)->Exec("SELECT $1::int + 1", {"41"});
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->rows.at(0).at(0), "42");
}

// Errors name the statement and PostgreSQL's message with its SQLSTATE.
TEST_F(PgStoreTest, ErrorsNameTheStatementAndTheSqlstate) {
  auto r = Sql()->Exec("SELECT nosuchcolumn FROM pg_class");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("SELECT nosuchcolumn"), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find("42703"), std::string::npos) << r.status();
}

TEST(PgUrlTest, PasswordsAreLeftOutAndFormsAreChecked) {
  EXPECT_EQ(pg::Redacted("postgresql://ty:s3cret@db.example:5432/trainyard?sslmode=require&password=x"),
            "postgresql://ty@db.example:5432/trainyard?sslmode=require");
  EXPECT_EQ(pg::Redacted("postgres://db/t"), "postgres://db/t");
  EXPECT_EQ(pg::Redacted("host=db password=s3cret dbname=t"), "host=db dbname=t");
  EXPECT_TRUE(pg::IsPostgresUrl("postgres://x"));
  EXPECT_FALSE(pg::IsPostgresUrl("mysql://x"));
  auto bad = OpenStores("mysql://u:pw@h/db", "/tmp/x.db");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("--store"), std::string::npos) << bad.status();
  EXPECT_EQ(bad.status().message().find("pw"), std::string::npos) << bad.status();
  auto unreachable = OpenStores("postgresql://u:pw@127.0.0.1:1/db", "");
  ASSERT_FALSE(unreachable.ok());
  EXPECT_EQ(unreachable.status().code(), absl::StatusCode::kUnavailable) << unreachable.status();
  EXPECT_NE(unreachable.status().message().find("postgresql://u@127.0.0.1:1/db"), std::string::npos)
      << unreachable.status();
}

}  // namespace
}  // namespace trainyard
