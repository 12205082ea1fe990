#include "server/store/job_store.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include "tests/test_util.h"

namespace trainyard {
namespace {

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
TEST(JobStoreTest, PagesAfterACursorByState) {
  TempDir dir;
  auto store = JobStore::Open(dir.path() + "/jobs.db");
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
TEST(JobStoreTest, PagesNewestFirstBeforeACursor) {
  TempDir dir;
  auto store = JobStore::Open(dir.path() + "/jobs.db");
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
TEST(JobStoreTest, DeleteRemovesTheJobAndWhatNamesItOnly) {
  TempDir dir;
  const std::string path = dir.path() + "/jobs.db";
  auto store = JobStore::Open(path);
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

TEST(JobStoreTest, RoundTripAcrossReopen) {
  TempDir dir;
  const std::string path = dir.path() + "/jobs.db";
  {
    auto store = JobStore::Open(path);
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
  auto store = JobStore::Open(path);
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

TEST(JobStoreTest, MissingJobIsNotFound) {
  TempDir dir;
  auto store = JobStore::Open(dir.path() + "/jobs.db");
  ASSERT_TRUE(store.ok());
  EXPECT_EQ((*store)->Get("nope").status().code(), absl::StatusCode::kNotFound);
  JobRecord ghost = MakeJob("ghost");
  EXPECT_EQ((*store)->Update(ghost, nullptr).code(), absl::StatusCode::kNotFound);
}

TEST(JobStoreTest, DuplicateIdIsRejectedAndLeavesNoEvent) {
  TempDir dir;
  auto store = JobStore::Open(dir.path() + "/jobs.db");
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->Insert(MakeJob("a"), {1, JobState::kQueued, "first"}).ok());
  EXPECT_FALSE((*store)->Insert(MakeJob("a"), {2, JobState::kQueued, "second"}).ok());
  auto events = (*store)->Events("a");
  ASSERT_TRUE(events.ok());
  EXPECT_EQ(events->size(), 1u);  // the failed insert rolled back
}

TEST(JobStoreTest, UnwritablePathIsAClearError) {
  auto store = JobStore::Open("/nonexistent-dir/x/jobs.db");
  ASSERT_FALSE(store.ok());
  EXPECT_NE(std::string(store.status().message()).find("/nonexistent-dir/x/jobs.db"), std::string::npos);
}

TEST(JobStoreTest, CheckpointsRoundTripInOrder) {
  TempDir dir;
  const std::string path = dir.path() + "/jobs.db";
  {
    auto store = JobStore::Open(path);
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
  auto store = JobStore::Open(path);
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
TEST(JobStoreTest, AStoreWithoutOwnersGetsThemAndKeepsItsJobs) {
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

TEST(JobStoreTest, HistoryTailsComeInOrderUntilTheNextWholeSave) {
  TempDir dir;
  const std::string path = dir.path() + "/jobs.db";
  {
    auto store = JobStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->Insert(MakeJob("a"), {1000, JobState::kQueued, "submitted"}).ok());
    ASSERT_TRUE((*store)->Insert(MakeJob("b"), {1000, JobState::kQueued, "submitted"}).ok());
    ASSERT_TRUE((*store)->AppendHistory("a", "t1").ok());
    ASSERT_TRUE((*store)->AppendHistory("b", "other").ok());
    ASSERT_TRUE((*store)->AppendHistory("a", "t2").ok());
  }
  auto store = JobStore::Open(path);  // the tails outlive the process
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

}  // namespace
}  // namespace trainyard
