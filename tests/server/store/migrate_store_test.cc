// migrate-store: a SQLite store's every job and sweep copied to PostgreSQL
// read back through the interfaces as they were; a target in use refused.
#include "server/store/migrate_store.h"

#include <gtest/gtest.h>

#include "server/store/stores.h"
#include "tests/server/store/pg_test_server.h"
#include "tests/test_util.h"

namespace trainyard {
namespace {

void ExpectSameJob(const JobRecord& a, const JobRecord& b) {
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.state, b.state);
  EXPECT_EQ(a.reason, b.reason);
  EXPECT_EQ(a.spec_json, b.spec_json);
  EXPECT_EQ(a.num_processes, b.num_processes);
  EXPECT_EQ(a.max_steps, b.max_steps);
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_EQ(a.first_loss, b.first_loss);
  EXPECT_EQ(a.samples_per_second, b.samples_per_second);
  EXPECT_EQ(a.created_unix_millis, b.created_unix_millis);
  EXPECT_EQ(a.started_unix_millis, b.started_unix_millis);
  EXPECT_EQ(a.ended_unix_millis, b.ended_unix_millis);
  EXPECT_EQ(a.attempt, b.attempt);
  EXPECT_EQ(a.failed_rank, b.failed_rank);
  EXPECT_EQ(a.worker_token, b.worker_token);
  EXPECT_EQ(a.owner, b.owner);
  EXPECT_EQ(a.group, b.group);
  EXPECT_EQ(a.priority, b.priority);
  EXPECT_EQ(a.run_as, b.run_as);
}

void ExpectSameEvents(const std::vector<JobEvent>& a, const std::vector<JobEvent>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].unix_millis, b[i].unix_millis);
    EXPECT_EQ(a[i].state, b[i].state);
    EXPECT_EQ(a[i].reason, b[i].reason);
  }
}

// Fills a SQLite store: 7 jobs (2 deleted, leaving gaps in the insertion
// numbers) with events, checkpoints, histories and tails; 2 sweeps with
// trials, rung results and events.
void Fill(Stores& s) {
  for (int i = 0; i < 7; ++i) {
    JobRecord j;
    j.id = "job-" + std::to_string(i);
    j.name = "name " + std::to_string(i);
    j.state = i % 3 == 0 ? JobState::kSucceeded : JobState::kQueued;
    j.reason = "why " + std::to_string(i);
    j.spec_json = R"({"name":"x"})";
    j.num_processes = i + 1;
    j.max_steps = 1000 + i;
    j.step = 10 * i;
    j.loss = 1.0 / (i + 3);
    j.first_loss = 2.5;
    j.samples_per_second = 123.25 * i;
    j.created_unix_millis = 1700000000000 + i;
    j.attempt = i % 2;
    j.failed_rank = i == 4 ? 1 : -1;
    j.worker_token = "token-" + std::to_string(i);
    j.owner = i % 2 ? "alice" : "bob";
    j.group = "g";
    j.priority = i * 10;
    j.run_as = i == 5 ? "alice" : "";
    ASSERT_TRUE(s.jobs->Insert(j, {100 + i, JobState::kQueued, "submitted"}).ok());
    const JobEvent e{200 + i, JobState::kRunning, "running " + std::to_string(i)};
    ASSERT_TRUE(s.jobs->Update(j, &e).ok());
    ASSERT_TRUE(s.jobs->AddEvent(j.id, {300 + i, JobState::kRunning, "webhook delivered"}).ok());
    for (int c = 0; c < i % 3; ++c) {
      CheckpointEvent ce;
      ce.index = c;
      ce.step = 100 * c;
      ce.type = c ? CheckpointType::kSharded : CheckpointType::kFull;
      ce.trigger = "periodic";
      ce.path = "/ckpt/" + j.id + "/" + std::to_string(c);
      ce.bytes = 1 << 20;
      ce.seconds = 0.125;
      ce.unix_millis = 400 + c;
      ce.ok = c != 1;
      ce.error = c == 1 ? "disk full" : "";
      ASSERT_TRUE(s.jobs->AddCheckpoint(j.id, {j.attempt, ce}).ok());
    }
    if (i % 2 == 0) ASSERT_TRUE(s.jobs->SaveHistory(j.id, std::string("whole\0\xff", 7) + j.id).ok());
    if (i != 6) ASSERT_TRUE(s.jobs->AppendHistory(j.id, "tail-a-" + j.id).ok());
    if (i == 2) ASSERT_TRUE(s.jobs->AppendHistory(j.id, "tail-b-" + j.id).ok());
  }
  ASSERT_TRUE(s.jobs->Delete("job-1").ok());
  ASSERT_TRUE(s.jobs->Delete("job-3").ok());
  for (int w = 0; w < 2; ++w) {
    SweepRecord r;
    r.id = "sweep-" + std::to_string(w);
    r.name = "lr";
    r.owner = "alice";
    r.state = w ? JobState::kRunning : JobState::kSucceeded;
    r.spec_text = "sweep: {}\n";
    r.caller = "caller";
    r.created_unix_millis = 5000 + w;
    ASSERT_TRUE(s.sweeps->Insert(r).ok());
    for (int t = 0; t < 3; ++t) {
      SweepTrialRecord tr{
          t, "job-" + std::to_string(t), {"0.1", "[1, 2]"}, JobState::kRunning, t == 2, t, 0.5, 7, 1.5, "r", t - 1, 3};
      if (t == 1) tr.best_metric.reset();
      ASSERT_TRUE(s.sweeps->SaveTrial(r.id, tr).ok());
      ASSERT_TRUE(s.sweeps->AddRungResult(r.id, {t, 100, 0.25 * t}).ok());
    }
    for (int e = 0; e < 4; ++e) {
      ASSERT_TRUE(s.sweeps->AddEvent(r.id, {6000 + e, JobState::kRunning, "event " + std::to_string(e)}).ok());
    }
  }
}

TEST(MigrateStoreTest, ASqliteStoreCopiedToPostgresReadsBackTheSame) {
  TempDir dir;
  const std::string from_url = "sqlite:" + dir.path() + "/trainyard.db";
  auto from = OpenStores(from_url, "");
  ASSERT_TRUE(from.ok()) << from.status();
  Fill(*from);
  if (HasFatalFailure()) return;
  auto to_url = test::StoreUrl(test::StoreBackend::kPostgres, dir.path());
  ASSERT_TRUE(to_url.ok()) << to_url.status();

  auto report = MigrateStore(from_url, *to_url);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->jobs, 5);
  EXPECT_EQ(report->events, 15);
  EXPECT_EQ(report->checkpoints, 0 + 2 + 1 + 2);  // jobs 0, 2, 4, 5, 6: 0, 2, 1, 2, 0
  EXPECT_EQ(report->histories, 5);
  EXPECT_EQ(report->sweeps, 2);
  EXPECT_EQ(report->trials, 6);
  EXPECT_EQ(report->rung_results, 6);
  EXPECT_EQ(report->sweep_events, 8);
  EXPECT_EQ(report->from, from->description);
  const std::string line = Describe(*report);
  EXPECT_EQ(line,
            "copied 5 jobs (15 events, 5 checkpoints, 5 histories) and 2 sweeps (6 trials, 6 rung results, 8 events) "
            "from " +
                from->description + " to " + report->to);

  auto to = OpenStores(*to_url, "");
  ASSERT_TRUE(to.ok()) << to.status();
  auto a = from->jobs->ListPage({}, 0, 100);
  auto b = to->jobs->ListPage({}, 0, 100);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->jobs.size(), b->jobs.size());
  EXPECT_EQ(a->numbers, b->numbers) << "insertion numbers, and so page tokens, stay";
  for (size_t i = 0; i < a->jobs.size(); ++i) {
    const std::string& id = a->jobs[i].id;
    SCOPED_TRACE(id);
    ExpectSameJob(a->jobs[i], b->jobs[i]);
    ExpectSameEvents(*from->jobs->Events(id), *to->jobs->Events(id));
    auto ca = from->jobs->Checkpoints(id), cb = to->jobs->Checkpoints(id);
    ASSERT_EQ(ca->size(), cb->size());
    for (size_t k = 0; k < ca->size(); ++k) {
      const CheckpointEvent &x = (*ca)[k].checkpoint, &y = (*cb)[k].checkpoint;
      EXPECT_EQ((*ca)[k].attempt, (*cb)[k].attempt);
      EXPECT_EQ(x.index, y.index);
      EXPECT_EQ(x.step, y.step);
      EXPECT_EQ(x.type, y.type);
      EXPECT_EQ(x.trigger, y.trigger);
      EXPECT_EQ(x.path, y.path);
      EXPECT_EQ(x.bytes, y.bytes);
      EXPECT_EQ(x.seconds, y.seconds);
      EXPECT_EQ(x.unix_millis, y.unix_millis);
      EXPECT_EQ(x.ok, y.ok);
      EXPECT_EQ(x.error, y.error);
    }
    EXPECT_EQ(*from->jobs->History(id), *to->jobs->History(id));
    EXPECT_EQ(*from->jobs->HistoryTails(id), *to->jobs->HistoryTails(id));
  }
  // Newest first, by page, as trainctl list reads them.
  auto na = from->jobs->ListPage({JobState::kQueued}, 0, 2, {}, {}, true);
  auto nb = to->jobs->ListPage({JobState::kQueued}, 0, 2, {}, {}, true);
  EXPECT_EQ(na->last, nb->last);
  EXPECT_EQ(na->more, nb->more);
  // A job submitted after the copy comes after the copied ones.
  JobRecord later;
  later.id = "job-later";
  ASSERT_TRUE(to->jobs->Insert(later, {1, JobState::kQueued, "submitted"}).ok());
  EXPECT_EQ(to->jobs->List(1)->at(0).id, "job-later");

  auto sa = from->sweeps->List(), sb = to->sweeps->List();
  ASSERT_TRUE(sa.ok() && sb.ok());
  ASSERT_EQ(sa->size(), sb->size());
  for (size_t i = 0; i < sa->size(); ++i) {
    const SweepRecord &x = (*sa)[i], &y = (*sb)[i];
    EXPECT_EQ(x.id, y.id);
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.owner, y.owner);
    EXPECT_EQ(x.state, y.state);
    EXPECT_EQ(x.reason, y.reason);
    EXPECT_EQ(x.spec_text, y.spec_text);
    EXPECT_EQ(x.caller, y.caller);
    EXPECT_EQ(x.created_unix_millis, y.created_unix_millis);
    EXPECT_EQ(x.ended_unix_millis, y.ended_unix_millis);
    EXPECT_EQ(x.trials, y.trials);
    EXPECT_EQ(*from->sweeps->RungResults(x.id), *to->sweeps->RungResults(y.id));
    ExpectSameEvents(*from->sweeps->Events(x.id), *to->sweeps->Events(y.id));
  }

  // Into a store in use: refused, saying what it holds.
  auto again = MigrateStore(from_url, *to_url);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(again.status().message().find("not empty"), std::string::npos) << again.status();
  EXPECT_NE(again.status().message().find("2 sweeps"), std::string::npos) << again.status();
}

TEST(MigrateStoreTest, AMissingSourceIsNotFoundAndMakesNoFile) {
  TempDir dir;
  auto to_url = test::StoreUrl(test::StoreBackend::kPostgres, dir.path());
  ASSERT_TRUE(to_url.ok()) << to_url.status();
  auto r = MigrateStore("sqlite:" + dir.path() + "/none.db", *to_url);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound) << r.status();
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/none.db"));
}

// SQLite to SQLite works as well (a copy to another file).
TEST(MigrateStoreTest, SqliteToSqlite) {
  TempDir dir;
  const std::string from_url = "sqlite:" + dir.path() + "/a.db", to_url = "sqlite:" + dir.path() + "/b.db";
  auto from = OpenStores(from_url, "");
  ASSERT_TRUE(from.ok()) << from.status();
  Fill(*from);
  if (HasFatalFailure()) return;
  auto report = MigrateStore(from_url, to_url);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->jobs, 5);
  auto to = OpenStores(to_url, "");
  EXPECT_EQ(to->jobs->ListPage({}, 0, 100)->numbers, from->jobs->ListPage({}, 0, 100)->numbers);
}

}  // namespace
}  // namespace trainyard
