// JobTable: the jobs not ended and their durable record, the only door to
// the store.
#include "server/jobs/job_table.h"

#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include "tests/server/coordinator_parts.h"

namespace trainyard {
namespace {

class JobTableTest : public ::testing::Test {
 protected:
  ActiveJob& Submit(const std::vector<std::string>& notes = {}) {
    auto spec = ParseJobSpec("max_steps: 10\nnum_processes: 2\n");
    auto job = jobs_.Submit(jobs_.NewId(), *spec, notes, {"alice", "vision", 100});
    EXPECT_TRUE(job.ok()) << job.status();
    return **job;
  }
  std::vector<std::string> Reasons(const std::string& id) {
    std::vector<std::string> out;
    const absl::StatusOr<std::vector<JobEvent>> events = jobs_.Events(id);
    for (const JobEvent& e : *events) out.push_back(e.reason);
    return out;
  }

  TempDir dir_;
  FakeClock clock_;
  ServerMetrics metrics_{std::make_shared<prometheus::Registry>()};
  std::unique_ptr<JobStore> store_ = OpenTestStore(dir_.path());
  JobTable jobs_{store_.get(), &metrics_, &clock_};
};

TEST_F(JobTableTest, ASubmittedJobIsStoredQueuedWithItsNotes) {
  ActiveJob& job = Submit({"accelerate config: mixed_precision ignored"});
  const std::string id = job.record.id;
  EXPECT_EQ(id.rfind("job-", 0), 0u);
  EXPECT_NE(jobs_.NewId(), id);
  auto stored = jobs_.StoredRecord(id);
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->state, JobState::kQueued);
  EXPECT_EQ(stored->owner, "alice");
  EXPECT_EQ(stored->priority, 100);
  EXPECT_EQ(stored->created_unix_millis, clock_.UnixMillis());  // dated by the clock it was given
  EXPECT_EQ(Reasons(id), (std::vector<std::string>{"submitted", "accelerate config: mixed_precision ignored"}));
  EXPECT_EQ(jobs_.Find(id), &job);
  EXPECT_EQ(jobs_.FindAttempt(id, 0), nullptr);  // no attempt yet
}

TEST_F(JobTableTest, TransitionsArePersistedAndWatchersTold) {
  ActiveJob& job = Submit();
  const std::string id = job.record.id;
  auto watch = jobs_.Watch(id);
  ASSERT_TRUE(watch.ok());
  clock_.Advance(std::chrono::seconds(3));
  jobs_.Transition(job, JobState::kStarting, "launching");
  EXPECT_EQ(jobs_.StoredRecord(id)->started_unix_millis, clock_.UnixMillis());
  JobUpdate u;
  ASSERT_TRUE((*watch)->Pop(&u, std::chrono::milliseconds(0)));  // the record when watched
  ASSERT_TRUE((*watch)->Pop(&u, std::chrono::milliseconds(0)));
  EXPECT_EQ(u.job->state, JobState::kStarting);
  jobs_.Transition(job, JobState::kFailed, "it broke");
  jobs_.Remove(id, /*local=*/false);
  EXPECT_EQ(jobs_.Find(id), nullptr);
  ASSERT_TRUE((*watch)->Pop(&u, std::chrono::milliseconds(0)));
  EXPECT_EQ(u.job->state, JobState::kFailed);
  EXPECT_TRUE((*watch)->closed_and_drained());  // let go with the job
  // Ended: read from the store.
  EXPECT_EQ(jobs_.Record(id)->state, JobState::kFailed);
  EXPECT_EQ(jobs_.FindActive(id, "; it matters").status().message(), "job " + id + " has ended (FAILED); it matters");
  jobs_.AddEvent(id, "refused: someone else");
  EXPECT_EQ(Reasons(id).back(), "refused: someone else");
  auto ended_watch = jobs_.Watch(id);
  ASSERT_TRUE(ended_watch.ok());
  ASSERT_TRUE((*ended_watch)->Pop(&u, std::chrono::milliseconds(0)));
  EXPECT_EQ(u.job->state, JobState::kFailed);
  EXPECT_EQ(jobs_.Checkpoints("job-unknown").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(jobs_.Events("job-unknown")->size(), 0u);
}

TEST_F(JobTableTest, APageShowsTheLiveRecordOfJobsHeld) {
  ActiveJob& a = Submit();
  Submit();
  a.record.step = 7;  // live progress not yet persisted
  auto page = jobs_.Page({}, 0, 1, {}, {});
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->jobs.size(), 1u);
  EXPECT_EQ(page->jobs[0].step, 7);
  EXPECT_FALSE(page->next_page_token.empty());
  EXPECT_EQ(jobs_.Page({}, 0, 10, {"bob"}, {})->jobs.size(), 0u);  // alice's jobs only
  ASSERT_TRUE(jobs_.Stored().ok());
  EXPECT_EQ(jobs_.Stored()->size(), 2u);
}

TEST_F(JobTableTest, CheckpointsAreRecordedPerJob) {
  ActiveJob& job = Submit();
  CheckpointEvent c;
  c.ok = true;
  c.index = 2;
  c.step = 5;
  jobs_.AddCheckpoint(job, 1, c);
  auto list = jobs_.Checkpoints(job.record.id);
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].attempt, 1);
}

}  // namespace
}  // namespace trainyard

namespace trainyard {
namespace {

TEST_F(JobTableTest, HistoryIsSavedEveryIntervalAndWhenTheJobEndsAndReadAfterARestart) {
  ActiveJob& job = Submit();
  const std::string id = job.record.id;
  const JobSpec spec = job.spec;  // `job` is gone once removed below
  StepMetrics m;
  auto add = [&](int64_t step) {
    m.step = step;
    m.loss = 10.0 / static_cast<double>(step);
    m.unix_millis = 1000 * step;
    job.history.Add(m, 2);
  };
  add(1);
  jobs_.PersistProgress(job, clock_.SteadyNow());
  ASSERT_TRUE(store_->History(id).ok());
  EXPECT_FALSE(store_->History(id)->empty());  // the first samples are saved at once
  add(2);
  clock_.Advance(JobTable::kHistorySaveInterval - std::chrono::seconds(1));
  jobs_.PersistProgress(job, clock_.SteadyNow());
  EXPECT_EQ(JobHistory::Decode(*store_->History(id))->series().at("loss").added(), 1);  // not yet due
  clock_.Advance(std::chrono::seconds(1));
  jobs_.PersistProgress(job, clock_.SteadyNow());
  EXPECT_EQ(JobHistory::Decode(*store_->History(id))->series().at("loss").added(), 2);
  for (int64_t s = 3; s <= 3000; ++s) add(s);
  const std::vector<HistoryPoint> live = job.history.series().at("loss").points();
  EXPECT_EQ(jobs_.History(id)->series().at("loss").points(), live);  // a held job: its live series
  jobs_.Remove(id, /*local=*/true);

  // A new coordinator on the same file.
  store_.reset();
  store_ = OpenTestStore(dir_.path());
  JobTable again(store_.get(), &metrics_, &clock_);
  auto h = again.History(id);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->series().at("loss").points(), live);
  EXPECT_EQ(h->series().at("loss").added(), 3000);
  EXPECT_LE(live.size(), static_cast<size_t>(SeriesHistory::kMaxPoints));
  EXPECT_EQ(live.front().step, 1);
  EXPECT_EQ(live.back().step, 3000);
  // Held again (resumed), it goes on from there.
  auto record = again.StoredRecord(id);
  ASSERT_TRUE(record.ok());
  ActiveJob& resumed = again.Hold(*record, spec);
  EXPECT_EQ(resumed.history.series().at("loss").added(), 3000);
  EXPECT_EQ(again.History("job-none").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace trainyard
