// JobProgress and its GoodputClock: rank 0's steps and checkpoints as the
// hang watchdog, the restart backoff and the record see them.
#include "server/jobs/job_progress.h"

#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include "common/clock.h"

namespace trainyard {
namespace {

// An asynchronous checkpoint is committed steps after it was taken: only the
// steps up to its own step are kept when the attempt ends.
TEST(GoodputClockTest, AnAsynchronousCheckpointKeepsTheStepsUpToItsStep) {
  GoodputClock clock;
  const SteadyTime start = std::chrono::steady_clock::now();
  clock.StartOnce(start);
  for (int64_t step = 1; step <= 10; ++step) clock.AddStep(step, 1.0);
  clock.Checkpointed(5);  // taken at step 5, committed after step 10
  EXPECT_DOUBLE_EQ(clock.Unkept(), 5.0);
  clock.AttemptEnded();
  EXPECT_DOUBLE_EQ(clock.Unkept(), 0.0);
  EXPECT_NEAR(clock.Ratio(start + std::chrono::seconds(10)), 0.5, 1e-9);
}

TEST(GoodputClockTest, NoRatioBeforeTheFirstStart) {
  GoodputClock clock;
  EXPECT_LT(clock.Ratio(std::chrono::steady_clock::now()), 0);
}

class JobProgressTest : public ::testing::Test {
 protected:
  StepMetrics Sample(int32_t rank, int64_t step, double samples_per_second) {
    StepMetrics m;
    m.rank = rank;
    m.step = step;
    m.step_seconds = 0.5;
    m.loss = 3.0 - 0.1 * static_cast<double>(step);
    m.samples_per_second = samples_per_second;
    m.unix_millis = clock_.UnixMillis();
    return m;
  }

  FakeClock clock_;
  ServerMetrics metrics_{std::make_shared<prometheus::Registry>()};
  JobProgress progress_{"job-1", &metrics_, &clock_};
};

// Rank 0's samples move the record and the watchdog's clock; every rank's
// throughput adds up.
TEST_F(JobProgressTest, RankZerosStepsMoveTheRecordAndTheWatchdogClock) {
  JobRecord record;
  progress_.Launched(clock_.SteadyNow(), 2);
  const SteadyTime launched = progress_.last_progress();
  clock_.Advance(std::chrono::seconds(2));
  auto updates = progress_.OnSamples({Sample(1, 1, 10)}, &record, clock_.SteadyNow());
  EXPECT_TRUE(updates.empty());                    // rank 1 alone tells watchers nothing
  EXPECT_EQ(progress_.last_progress(), launched);  // nor the watchdog
  updates = progress_.OnSamples({Sample(0, 1, 20)}, &record, clock_.SteadyNow());
  ASSERT_EQ(updates.size(), 1u);
  EXPECT_DOUBLE_EQ(updates[0].samples_per_second, 30);
  EXPECT_EQ(progress_.last_progress(), clock_.SteadyNow());
  EXPECT_EQ(record.step, 1);
  EXPECT_DOUBLE_EQ(record.first_loss, 2.9);
  EXPECT_DOUBLE_EQ(record.samples_per_second, 30);
  EXPECT_DOUBLE_EQ(progress_.step_seconds(), 0.5);
  EXPECT_EQ(progress_.RankSamples().size(), 2u);
}

// Failures in a row count until an attempt trains a step: the backoff's input.
TEST_F(JobProgressTest, FailuresInARowResetOnAStep) {
  JobRecord record;
  progress_.CountFailure();
  progress_.CountFailure();
  EXPECT_EQ(progress_.failures_in_a_row(), 2);
  progress_.OnSamples({Sample(0, 1, 1)}, &record, clock_.SteadyNow());
  EXPECT_EQ(progress_.failures_in_a_row(), 0);
}

// The record is written at most once a second.
TEST_F(JobProgressTest, ProgressIsPersistedAtMostOnceASecond) {
  EXPECT_TRUE(progress_.PersistDue(clock_.SteadyNow()));
  clock_.Advance(std::chrono::milliseconds(500));
  EXPECT_FALSE(progress_.PersistDue(clock_.SteadyNow()));
  clock_.Advance(std::chrono::milliseconds(501));
  EXPECT_TRUE(progress_.PersistDue(clock_.SteadyNow()));
}

// A checkpoint is progress too, and says what it was.
TEST_F(JobProgressTest, ACheckpointIsProgressAndAnEvent) {
  CheckpointEvent c;
  c.ok = true;
  c.trigger = "periodic";
  c.index = 3;
  c.step = 40;
  c.path = "/ckpt/checkpoint_3";
  clock_.Advance(std::chrono::seconds(5));
  const std::string event = progress_.OnCheckpoint(c, clock_.SteadyNow());
  EXPECT_EQ(progress_.last_progress(), clock_.SteadyNow());
  EXPECT_EQ(event.rfind("periodic checkpoint 3 at step 40", 0), 0u) << event;
  c.ok = false;
  c.error = "disk full";
  EXPECT_EQ(progress_.OnCheckpoint(c, clock_.SteadyNow()), "periodic checkpoint at step 40 failed: disk full");
}

// MFU is one number: the history's series (from the updates JobProgress
// hands on) divides by the same peak as /metrics, --peak-flops when the
// server has it, else the rank's own.
TEST_F(JobProgressTest, TheHistorysMfuIsMetricsMfu) {
  JobRecord record;
  progress_.Launched(clock_.SteadyNow(), 2);
  StepMetrics m = Sample(0, 1, 20);
  m.model_flops = 1e12;
  m.step_seconds = 0.5;
  m.peak_flops = 1e13;  // the rank's table: 20%
  auto updates = progress_.OnSamples({m}, &record, clock_.SteadyNow());
  ASSERT_EQ(updates.size(), 1u);
  EXPECT_DOUBLE_EQ(ModelFlopsUtilization(updates[0]), 0.2);
  metrics_.SetPeakFlops(4e12);  // --peak-flops wins: 50%
  m.step = 2;
  updates = progress_.OnSamples({m}, &record, clock_.SteadyNow());
  ASSERT_EQ(updates.size(), 1u);
  EXPECT_DOUBLE_EQ(ModelFlopsUtilization(updates[0]), 0.5);
  EXPECT_DOUBLE_EQ(ModelFlopsUtilization(m, 4e12), 0.5);  // what /metrics exports for it
}

}  // namespace
}  // namespace trainyard
