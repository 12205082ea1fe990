// The job store's contract, on SQLite and on PostgreSQL alike.
#include "server/store/job_store.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <limits>

#include "server/store/stores.h"
#include "tests/server/store/pg_test_server.h"
#include "tests/test_util.h"

namespace trainyard {
namespace {

// Each test on a fresh store of each backend (StoreBackend), opened as a
// coordinator opens it (OpenStores), again for a reopen.
class JobStoreTest : public testing::TestWithParam<test::StoreBackend> {
 protected:
  void SetUp() override {
    auto url = test::StoreUrl(GetParam(), dir_.path());
    ASSERT_TRUE(url.ok()) << url.status();
    url_ = *url;
  }
  absl::StatusOr<std::unique_ptr<JobStore>> Open() {
    auto stores = OpenStores(url_, "");
    if (!stores.ok()) return stores.status();
    return std::move(stores->jobs);
  }

  TempDir dir_;
  std::string url_;
};

INSTANTIATE_TEST_SUITE_P(Backends, JobStoreTest,
                         testing::Values(test::StoreBackend::kSqlite, test::StoreBackend::kPostgres),
                         [](const auto& info) { return test::BackendName(info.param); });

JobRecord MakeJob(const std::string& id) {
  JobRecord r;
  r.id = id;
  r.name = "n-" + id;
  r.state = JobState::kQueued;
  r.reason = "submitted";
  r.spec_json = R"({"name":"n"})";
  r.num_processes = 2;
  r.max_steps = 100;
  r.created_unix_millis = 1000;
  return r;
}

// Pages in insertion order after a cursor, filtered by state in SQL; the
// page says whether more follow.
TEST_P(JobStoreTest, PagesAfterACursorByState) {
  auto store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  for (int i = 0; i < 7; ++i) {
    JobRecord r = MakeJob("j" + std::to_string(i));
    r.state = i % 2 ? JobState::kFailed : JobState::kSucceeded;
    ASSERT_TRUE((*store)->Insert(r, {1000, r.state, "x"}).ok());
  }
  auto page = (*store)->ListPage({JobState::kSucceeded}, 0, 2);
  ASSERT_TRUE(page.ok()) << page.status();
  ASSERT_EQ(page->jobs.size(), 2u);
  EXPECT_EQ(page->jobs[0].id, "j0");
  EXPECT_EQ(page->jobs[1].id, "j2");
  EXPECT_TRUE(page->more);
  auto rest = (*store)->ListPage({JobState::kSucceeded}, page->last, 2);
  ASSERT_TRUE(rest.ok()) << rest.status();
  ASSERT_EQ(rest->jobs.size(), 2u);
  EXPECT_EQ(rest->jobs[0].id, "j4");
  EXPECT_EQ(rest->jobs[1].id, "j6");
  EXPECT_FALSE(rest->more);
  auto all = (*store)->ListPage({}, 0, 100);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->jobs.size(), 7u);
  EXPECT_FALSE(all->more);
}

// Newest first: the newest jobs of `states` first, a page before a cursor
// (`trainctl list --limit N` shows the N newest); a token of one order is
// refused in the other.
TEST_P(JobStoreTest, PagesNewestFirstBeforeACursor) {
  auto store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  for (int i = 0; i < 7; ++i) {
    JobRecord r = MakeJob("j" + std::to_string(i));
    r.state = i % 2 ? JobState::kFailed : JobState::kSucceeded;
    ASSERT_TRUE((*store)->Insert(r, {1000, r.state, "x"}).ok());
  }
  auto page = (*store)->ListPage({JobState::kSucceeded}, 0, 3, {}, {}, /*newest_first=*/true);
  ASSERT_TRUE(page.ok()) << page.status();
  ASSERT_EQ(page->jobs.size(), 3u);
  EXPECT_EQ(page->jobs[0].id, "j6");
  EXPECT_EQ(page->jobs[1].id, "j4");
  EXPECT_EQ(page->jobs[2].id, "j2");
  EXPECT_TRUE(page->more);
  auto rest = (*store)->ListPage({JobState::kSucceeded}, page->last, 3, {}, {}, /*newest_first=*/true);
  ASSERT_TRUE(rest.ok()) << rest.status();
  ASSERT_EQ(rest->jobs.size(), 1u);
  EXPECT_EQ(rest->jobs[0].id, "j0");
  EXPECT_FALSE(rest->more);
  const std::string token = JobPageToken(page->last, /*newest_first=*/true);
  EXPECT_EQ(*JobPageAfter(token, /*newest_first=*/true), page->last);
  EXPECT_EQ(JobPageAfter(token).status().code(), absl::StatusCode::kInvalidArgument);
}

// Delete takes the job's row, events, checkpoints and history, and no
// other job's; an unknown id is NotFound.
TEST_P(JobStoreTest, DeleteRemovesTheJobAndWhatNamesItOnly) {
  auto store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  for (const std::string id : {"a", "b"}) {
    ASSERT_TRUE((*store)->Insert(MakeJob(id), {1000, JobState::kQueued, "submitted"}).ok());
    const JobEvent done{1001, JobState::kSucceeded, "done"};
    ASSERT_TRUE((*store)->Update(MakeJob(id), &done).ok());
    CheckpointEvent c;
    c.step = 10;
    c.path = "/p/" + id;
    c.ok = true;
    ASSERT_TRUE((*store)->AddCheckpoint(id, {1, c}).ok());
    ASSERT_TRUE((*store)->SaveHistory(id, "whole-" + id).ok());
    ASSERT_TRUE((*store)->AppendHistory(id, "tail-" + id).ok());
  }
  ASSERT_TRUE((*store)->Delete("a").ok());
  EXPECT_EQ((*store)->Get("a").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE((*store)->Events("a")->empty());
  EXPECT_TRUE((*store)->Checkpoints("a")->empty());
  EXPECT_EQ(*(*store)->History("a"), "");
  EXPECT_TRUE((*store)->HistoryTails("a")->empty());
  auto all = (*store)->ListPage({}, 0, 100);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->jobs.size(), 1u);
  EXPECT_EQ(all->jobs[0].id, "b");
  EXPECT_EQ((*store)->Events("b")->size(), 2u);
  EXPECT_EQ((*store)->Checkpoints("b")->size(), 1u);
  EXPECT_EQ(*(*store)->History("b"), "whole-b");
  EXPECT_EQ((*store)->HistoryTails("b")->size(), 1u);
  EXPECT_EQ((*store)->Delete("a").code(), absl::StatusCode::kNotFound);
  // The id may be used again.
  EXPECT_TRUE((*store)->Insert(MakeJob("a"), {2000, JobState::kQueued, "submitted"}).ok());
}

TEST_P(JobStoreTest, RoundTripAcrossReopen) {
  {
    auto store = Open();
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->Insert(MakeJob("a"), {1000, JobState::kQueued, "submitted"}).ok());
    ASSERT_TRUE((*store)->Insert(MakeJob("b"), {1001, JobState::kQueued, "submitted"}).ok());
    JobRecord a = MakeJob("a");
    a.state = JobState::kRunning;
    a.reason = "all ranks connected";
    a.step = 42;
    a.loss = 0.5;
    a.first_loss = 2.25;
    a.samples_per_second = 1234.5;
    a.attempt = 1;
    a.worker_token = "secret";
    JobEvent e{2000, JobState::kRunning, "all ranks connected"};
    ASSERT_TRUE((*store)->Update(a, &e).ok());
  }
  auto store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  auto a = (*store)->Get("a");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->state, JobState::kRunning);
  EXPECT_EQ(a->step, 42);
  EXPECT_DOUBLE_EQ(a->loss, 0.5);
  EXPECT_DOUBLE_EQ(a->first_loss, 2.25);
  EXPECT_DOUBLE_EQ(a->samples_per_second, 1234.5);
  EXPECT_EQ(a->attempt, 1);
  EXPECT_EQ(a->worker_token, "secret");
  EXPECT_EQ(a->spec_json, R"({"name":"n"})");
  auto events = (*store)->Events("a");
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 2u);
  EXPECT_EQ((*events)[0].state, JobState::kQueued);
  EXPECT_EQ((*events)[1].state, JobState::kRunning);
  EXPECT_EQ((*events)[1].reason, "all ranks connected");
  auto all = (*store)->List(100);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].id, "a");  // creation order
  EXPECT_EQ((*all)[1].id, "b");
  auto newest = (*store)->List(1);
  ASSERT_TRUE(newest.ok());
  ASSERT_EQ(newest->size(), 1u);
  EXPECT_EQ((*newest)[0].id, "b");
}

// A sweep's trial names its sweep and number after a restart (issue 67);
// a job of its own names none.
TEST_P(JobStoreTest, ATrialsSweepAndNumberSurviveAReopen) {
  {
    auto store = Open();
    ASSERT_TRUE(store.ok()) << store.status();
    JobRecord t = MakeJob("t");
    t.sweep_id = "sweep-0000abcd";
    t.sweep_trial = 7;
    ASSERT_TRUE((*store)->Insert(t, {1000, JobState::kQueued, "submitted"}).ok());
    ASSERT_TRUE((*store)->Insert(MakeJob("plain"), {1001, JobState::kQueued, "submitted"}).ok());
    t.state = JobState::kRunning;
    ASSERT_TRUE((*store)->Update(t, nullptr).ok());
  }
  auto store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  auto t = (*store)->Get("t");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->sweep_id, "sweep-0000abcd");
  EXPECT_EQ(t->sweep_trial, 7);
  auto plain = (*store)->Get("plain");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->sweep_id, "");
  EXPECT_EQ(plain->sweep_trial, -1);
}

TEST_P(JobStoreTest, MissingJobIsNotFound) {
  auto store = Open();
  ASSERT_TRUE(store.ok());
  EXPECT_EQ((*store)->Get("nope").status().code(), absl::StatusCode::kNotFound);
  JobRecord ghost = MakeJob("ghost");
  EXPECT_EQ((*store)->Update(ghost, nullptr).code(), absl::StatusCode::kNotFound);
}

TEST_P(JobStoreTest, DuplicateIdIsRejectedAndLeavesNoEvent) {
  auto store = Open();
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->Insert(MakeJob("a"), {1, JobState::kQueued, "first"}).ok());
  EXPECT_FALSE((*store)->Insert(MakeJob("a"), {2, JobState::kQueued, "second"}).ok());
  auto events = (*store)->Events("a");
  ASSERT_TRUE(events.ok());
  EXPECT_EQ(events->size(), 1u);  // the failed insert rolled back
}

TEST(SqliteJobStoreTest, UnwritablePathIsAClearError) {
  auto store = JobStore::Open("/nonexistent-dir/x/jobs.db");
  ASSERT_FALSE(store.ok());
  EXPECT_NE(std::string(store.status().message()).find("/nonexistent-dir/x/jobs.db"), std::string::npos);
}

TEST_P(JobStoreTest, CheckpointsRoundTripInOrder) {
  {
    auto store = Open();
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->Insert(MakeJob("a"), {1000, JobState::kQueued, "submitted"}).ok());
    CheckpointEvent c;
    c.index = 3;
    c.step = 300;
    c.type = CheckpointType::kSharded;
    c.trigger = "periodic";
    c.path = "/p/checkpoints/checkpoint_3";
    c.bytes = 12345;
    c.seconds = 0.25;
    c.unix_millis = 5000;
    c.ok = true;
    ASSERT_TRUE((*store)->AddCheckpoint("a", {2, c}).ok());
    CheckpointEvent failed;
    failed.step = 400;
    failed.type = CheckpointType::kFull;
    failed.trigger = "request";
    failed.request_id = 9;
    failed.error = "disk full";
    ASSERT_TRUE((*store)->AddCheckpoint("a", {2, failed}).ok());
  }
  auto store = Open();
  ASSERT_TRUE(store.ok());
  auto list = (*store)->Checkpoints("a");
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->size(), 2u);
  const CheckpointRecord& a = (*list)[0];
  EXPECT_EQ(a.attempt, 2);
  EXPECT_EQ(a.checkpoint.index, 3);
  EXPECT_EQ(a.checkpoint.step, 300);
  EXPECT_EQ(a.checkpoint.type, CheckpointType::kSharded);
  EXPECT_EQ(a.checkpoint.trigger, "periodic");
  EXPECT_EQ(a.checkpoint.path, "/p/checkpoints/checkpoint_3");
  EXPECT_EQ(a.checkpoint.bytes, 12345);
  EXPECT_DOUBLE_EQ(a.checkpoint.seconds, 0.25);
  EXPECT_TRUE(a.checkpoint.ok);
  const CheckpointRecord& b = (*list)[1];
  EXPECT_FALSE(b.checkpoint.ok);
  EXPECT_EQ(b.checkpoint.error, "disk full");
  EXPECT_EQ(b.checkpoint.request_id, 9);
  EXPECT_TRUE((*store)->Checkpoints("b")->empty());
  // A checkpoint of an unknown job violates the foreign key.
  EXPECT_FALSE((*store)->AddCheckpoint("nope", {1, a.checkpoint}).ok());
}

// A store written before jobs had owners opens with its jobs intact (owned
// by nobody); owners, groups and priorities are stored from then on, and a
// list filters by them in SQL.
TEST(SqliteJobStoreTest, AStoreWithoutOwnersGetsThemAndKeepsItsJobs) {
  TempDir dir;
  const std::string path = dir.path() + "/jobs.db";
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  const char* old_schema =
      "CREATE TABLE jobs (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, name TEXT NOT NULL, "
      "state TEXT NOT NULL, reason TEXT NOT NULL, spec_json TEXT NOT NULL, num_processes INTEGER NOT NULL, "
      "max_steps INTEGER NOT NULL, step INTEGER NOT NULL, loss REAL NOT NULL, first_loss REAL NOT NULL, "
      "samples_per_second REAL NOT NULL, created_ms INTEGER NOT NULL, started_ms INTEGER NOT NULL, "
      "ended_ms INTEGER NOT NULL, attempt INTEGER NOT NULL, failed_rank INTEGER NOT NULL, "
      "worker_token TEXT NOT NULL);"
      "INSERT INTO jobs (id, name, state, reason, spec_json, num_processes, max_steps, step, loss, first_loss, "
      "samples_per_second, created_ms, started_ms, ended_ms, attempt, failed_rank, worker_token) VALUES "
      "('old', 'n', 'SUCCEEDED', 'done', '{}', 2, 10, 10, 0.5, 1.0, 3.0, 1, 2, 3, 1, -1, '');";
  ASSERT_EQ(sqlite3_exec(db, old_schema, nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);

  auto store = JobStore::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  auto old = (*store)->Get("old");
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(old->state, JobState::kSucceeded);
  EXPECT_EQ(old->step, 10);
  EXPECT_EQ(old->owner, "");
  JobRecord mine = MakeJob("mine");
  mine.owner = "alice";
  mine.group = "vision";
  mine.priority = 1000;
  ASSERT_TRUE((*store)->Insert(mine, {1, JobState::kQueued, "submitted"}).ok());
  auto back = (*store)->Get("mine");
  EXPECT_EQ(back->owner, "alice");
  EXPECT_EQ(back->group, "vision");
  EXPECT_EQ(back->priority, 1000);
  auto alices = (*store)->ListPage({}, 0, 10, {"alice"});
  ASSERT_EQ(alices->jobs.size(), 1u);
  EXPECT_EQ(alices->jobs[0].id, "mine");
  EXPECT_EQ((*store)->ListPage({}, 0, 10, {"bob"}, {"vision"})->jobs.size(), 1u) << "by group";
  EXPECT_EQ((*store)->ListPage({}, 0, 10)->jobs.size(), 2u);
  store->reset();
  auto again = JobStore::Open(path);  // opening twice adds nothing twice
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)->Get("mine")->owner, "alice");
}

TEST_P(JobStoreTest, HistoryTailsComeInOrderUntilTheNextWholeSave) {
  {
    auto store = Open();
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->Insert(MakeJob("a"), {1000, JobState::kQueued, "submitted"}).ok());
    ASSERT_TRUE((*store)->Insert(MakeJob("b"), {1000, JobState::kQueued, "submitted"}).ok());
    ASSERT_TRUE((*store)->AppendHistory("a", "t1").ok());
    ASSERT_TRUE((*store)->AppendHistory("b", "other").ok());
    ASSERT_TRUE((*store)->AppendHistory("a", "t2").ok());
  }
  auto store = Open();  // the tails outlive the process
  ASSERT_TRUE(store.ok());
  EXPECT_EQ((*store)->History("a").value(), "");
  EXPECT_EQ((*store)->HistoryTails("a").value(), (std::vector<std::string>{"t1", "t2"}));
  ASSERT_TRUE((*store)->SaveHistory("a", "whole").ok());
  EXPECT_EQ((*store)->History("a").value(), "whole");
  EXPECT_TRUE((*store)->HistoryTails("a").value().empty()) << "the whole save has them";
  EXPECT_EQ((*store)->HistoryTails("b").value(), std::vector<std::string>{"other"}) << "another job's stay";
  ASSERT_TRUE((*store)->AppendHistory("a", "t3").ok());
  EXPECT_EQ((*store)->HistoryTails("a").value(), std::vector<std::string>{"t3"});
  EXPECT_FALSE((*store)->AppendHistory("nosuch", "t").ok()) << "a tail of no job";
}

// Owners and groups filter a listing in SQL: owners alone, groups alone,
// either; List with no real limit gives every job.
TEST_P(JobStoreTest, ListsFilterByOwnerOrGroup) {
  auto store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  const std::pair<std::string, std::string> who[] = {{"alice", "vision"}, {"bob", "nlp"}, {"carol", "vision"}};
  for (const auto& [owner, group] : who) {
    JobRecord r = MakeJob(owner);
    r.owner = owner;
    r.group = group;
    r.priority = -7;
    ASSERT_TRUE((*store)->Insert(r, {1, JobState::kQueued, "submitted"}).ok());
  }
  auto ids = [](const JobStore::Page& p) {
    std::vector<std::string> out;
    for (const JobRecord& j : p.jobs) out.push_back(j.id);
    return out;
  };
  EXPECT_EQ(ids(*(*store)->ListPage({}, 0, 10, {"bob"})), std::vector<std::string>{"bob"});
  EXPECT_EQ(ids(*(*store)->ListPage({}, 0, 10, {}, {"vision"})), (std::vector<std::string>{"alice", "carol"}));
  EXPECT_EQ(ids(*(*store)->ListPage({}, 0, 10, {"bob"}, {"vision"})),
            (std::vector<std::string>{"alice", "bob", "carol"}));
  EXPECT_TRUE((*store)->ListPage({}, 0, 10, {"nobody"})->jobs.empty());
  EXPECT_EQ((*store)->Get("alice")->priority, -7);
  auto all = (*store)->List(std::numeric_limits<int>::max());
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->size(), 3u);
  EXPECT_EQ((*store)->List(-1)->size(), 3u) << "a negative limit is none";
  auto page = (*store)->ListPage({}, 0, 10);
  ASSERT_EQ(page->numbers.size(), 3u);
  EXPECT_LT(page->numbers[0], page->numbers[1]);
  EXPECT_EQ(page->numbers[2], page->last);
}

// Every field round-trips exactly: extreme integers, doubles that need 17
// digits, text with quotes and non-ASCII, a history of every byte value.
TEST_P(JobStoreTest, ValuesRoundTripExactly) {
  auto store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  JobRecord r = MakeJob("exact");
  r.name = "it's \"quoted\" \\ and ünïcødé ✓; DROP TABLE jobs; --";
  r.max_steps = std::numeric_limits<int64_t>::max();
  r.step = std::numeric_limits<int64_t>::min();
  r.loss = 0.1 + 0.2;
  r.first_loss = 1e-300;
  r.samples_per_second = -123456789.123456789;
  r.failed_rank = -1;
  r.priority = std::numeric_limits<int64_t>::min();
  ASSERT_TRUE((*store)->Insert(r, {std::numeric_limits<int64_t>::max(), JobState::kQueued, "ø"}).ok());
  auto back = (*store)->Get("exact");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->name, r.name);
  EXPECT_EQ(back->max_steps, r.max_steps);
  EXPECT_EQ(back->step, r.step);
  EXPECT_EQ(back->loss, r.loss);
  EXPECT_EQ(back->first_loss, r.first_loss);
  EXPECT_EQ(back->samples_per_second, r.samples_per_second);
  EXPECT_EQ(back->failed_rank, -1);
  EXPECT_EQ(back->priority, r.priority);
  EXPECT_EQ((*store)->Events("exact")->at(0).unix_millis, std::numeric_limits<int64_t>::max());
  std::string bytes;
  for (int i = 0; i < 256; ++i) bytes.push_back(static_cast<char>(i));
  ASSERT_TRUE((*store)->SaveHistory("exact", bytes).ok());
  ASSERT_TRUE((*store)->AppendHistory("exact", bytes + bytes).ok());
  EXPECT_EQ(*(*store)->History("exact"), bytes);
  EXPECT_EQ(*(*store)->HistoryTails("exact"), std::vector<std::string>{bytes + bytes});
}

// A copy keeps insertion numbers (pages and their tokens read the same);
// jobs inserted after it are numbered after the copied ones.
TEST_P(JobStoreTest, ACopyKeepsInsertionNumbers) {
  auto store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  const std::vector<JobEvent> events = {{1, JobState::kQueued, "submitted"}, {2, JobState::kRunning, "running"}};
  ASSERT_TRUE((*store)->InsertCopy(5, MakeJob("five"), events).ok());
  ASSERT_TRUE((*store)->InsertCopy(9, MakeJob("nine"), {}).ok());
  EXPECT_FALSE((*store)->InsertCopy(9, MakeJob("again"), {}).ok()) << "a number taken";
  ASSERT_TRUE((*store)->Insert(MakeJob("new"), {3, JobState::kQueued, "submitted"}).ok());
  auto page = (*store)->ListPage({}, 0, 10);
  ASSERT_TRUE(page.ok()) << page.status();
  ASSERT_EQ(page->numbers.size(), 3u);
  EXPECT_EQ(page->numbers[0], 5);
  EXPECT_EQ(page->numbers[1], 9);
  EXPECT_GT(page->numbers[2], 9);
  EXPECT_EQ(page->jobs[2].id, "new");
  EXPECT_EQ((*store)->ListPage({}, 5, 10)->jobs.at(0).id, "nine");
  auto back = (*store)->Events("five");
  ASSERT_EQ(back->size(), 2u);
  EXPECT_EQ((*back)[1].reason, "running");
  EXPECT_TRUE((*store)->Events("nine")->empty());
}

// A file of a newer schema than this binary knows is refused, untouched.
TEST(SqliteJobStoreTest, ANewerSchemaIsRefused) {
  TempDir dir;
  const std::string path = dir.path() + "/jobs.db";
  ASSERT_TRUE(JobStore::Open(path).ok());
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "PRAGMA user_version = 2;", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  auto store = JobStore::Open(path);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(store.status().message().find("version 2"), std::string::npos) << store.status();
  EXPECT_FALSE(SweepStore::Open(path).ok());
}

}  // namespace
}  // namespace trainyard
