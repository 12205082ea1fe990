#include "server/job_store.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace trainyard
