// ServerMetrics: what a Prometheus scrape of the registry shows (the text
// exposition format, as the exposer serves it) after steps, checkpoints,
// restarts and a job's end.
#include "server/metrics/server_metrics.h"

#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>

#include <algorithm>
#include <cmath>
#include <regex>
#include <string>

namespace trainyard {
namespace {

class ServerMetricsTest : public ::testing::Test {
 protected:
  std::string Scrape() { return prometheus::TextSerializer().Serialize(metrics_.Collect()); }
  // The value of the one line that starts with `series` (a name and labels).
  double Value(const std::string& series) {
    const std::string text = Scrape();
    const size_t at = text.find("\n" + series + " ");
    EXPECT_NE(at, std::string::npos) << series << " not in:\n" << text;
    if (at == std::string::npos) return -1;
    return std::stod(text.substr(at + series.size() + 2));
  }
  bool Has(const std::string& needle) { return Scrape().find(needle) != std::string::npos; }

  std::shared_ptr<prometheus::Registry> registry_ = std::make_shared<prometheus::Registry>();
  ServerMetrics metrics_{registry_};
};

StepMetrics Step(int32_t rank, int64_t step) {
  StepMetrics m;
  m.rank = rank;
  m.step = step;
  m.loss = 1.5;
  m.samples = 64;
  m.samples_per_second = 640;
  m.step_seconds = 0.1;
  m.data_seconds = 0.01;
  m.compute_seconds = 0.08;
  m.optimizer_seconds = 0.01;
  m.comm_wire_bytes = 500;
  m.comm_fp32_bytes = 1000;
  return m;
}

TEST_F(ServerMetricsTest, StepsBecomePerRankSeriesLabelledByJobId) {
  metrics_.RecordStep("job-a", Step(0, 1));
  metrics_.RecordStep("job-a", Step(0, 2));
  metrics_.RecordStep("job-a", Step(1, 2));
  EXPECT_EQ(Value("trainyard_job_step{job_id=\"job-a\",rank=\"0\"}"), 2);
  EXPECT_EQ(Value("trainyard_job_step{job_id=\"job-a\",rank=\"1\"}"), 2);
  EXPECT_EQ(Value("trainyard_job_loss{job_id=\"job-a\",rank=\"0\"}"), 1.5);
  EXPECT_EQ(Value("trainyard_job_samples_total{job_id=\"job-a\",rank=\"0\"}"), 128);
  EXPECT_EQ(Value("trainyard_job_step_duration_seconds_count{job_id=\"job-a\",phase=\"step\",rank=\"0\"}"), 2);
  EXPECT_NEAR(Value("trainyard_job_step_duration_seconds_sum{job_id=\"job-a\",phase=\"compute\",rank=\"0\"}"), 0.16,
              1e-9);
  // The wait for input has its own phase: input-bound jobs show there.
  EXPECT_NEAR(Value("trainyard_job_step_duration_seconds_sum{job_id=\"job-a\",phase=\"data_wait\",rank=\"0\"}"), 0.02,
              1e-9);
  // Counters accumulate the per-step bytes.
  EXPECT_EQ(Value("trainyard_job_comm_wire_bytes_total{job_id=\"job-a\",rank=\"0\"}"), 1000);
  // Series that do not apply (FSDP, CUDA memory) are not exported as zeros.
  EXPECT_FALSE(Has("trainyard_job_allgather"));
  EXPECT_FALSE(Has("device_allocated"));
  EXPECT_FALSE(Has("trainyard_job_grad_norm{")) << "no norm without clipping";
}

// The gradient norm appears with the first step that measured it, and a
// step without one (NaN) leaves the last value.
TEST_F(ServerMetricsTest, GradientNormPerRankWhenMeasured) {
  StepMetrics m = Step(1, 1);
  m.grad_norm = 3.25;
  metrics_.RecordStep("job-a", m);
  EXPECT_EQ(Value("trainyard_job_grad_norm{job_id=\"job-a\",rank=\"1\"}"), 3.25);
  m.step = 2;
  m.grad_norm = std::nan("");
  metrics_.RecordStep("job-a", m);
  EXPECT_EQ(Value("trainyard_job_grad_norm{job_id=\"job-a\",rank=\"1\"}"), 3.25);
  metrics_.RemoveJob("job-a");
  EXPECT_FALSE(Has("trainyard_job_grad_norm{"));
}

// MFU: over the peak the rank's worker reports from its table of devices,
// unless the server was given --peak-flops; absent when neither knows it.
TEST_F(ServerMetricsTest, MfuUsesTheServersPeakElseTheDevicesOwn) {
  StepMetrics m = Step(0, 1);
  m.model_flops = 5e10;  // in 0.1 s: 5e11 FLOP/s
  metrics_.RecordStep("job-a", m);
  EXPECT_FALSE(Has("trainyard_job_mfu{"));  // a CPU rank: no peak known
  EXPECT_DOUBLE_EQ(Value("trainyard_job_model_flops_per_second{job_id=\"job-a\",rank=\"0\"}"), 5e11);
  m.peak_flops = 1e12;  // e.g. a GPU from the worker's table
  metrics_.RecordStep("job-a", m);
  EXPECT_DOUBLE_EQ(Value("trainyard_job_mfu{job_id=\"job-a\",rank=\"0\"}"), 0.5);
  metrics_.SetPeakFlops(2e12);  // --peak-flops wins
  metrics_.RecordStep("job-a", m);
  EXPECT_DOUBLE_EQ(Value("trainyard_job_mfu{job_id=\"job-a\",rank=\"0\"}"), 0.25);
}

TEST_F(ServerMetricsTest, AJobsSeriesGoAwayWhenItEnds) {
  metrics_.RecordStep("job-a", Step(0, 1));
  metrics_.RecordStep("job-b", Step(0, 1));
  metrics_.CountRestart("job-a");
  metrics_.SetGoodput("job-a", 0.75);
  EXPECT_EQ(Value("trainyard_job_goodput{job_id=\"job-a\"}"), 0.75);
  // Recovery and badput series start at 0 with the first step.
  EXPECT_EQ(Value("trainyard_job_lost_steps_total{job_id=\"job-a\"}"), 0);
  EXPECT_EQ(Value("trainyard_job_recovery_seconds_count{job_id=\"job-a\"}"), 0);
  EXPECT_EQ(Value("trainyard_job_badput_seconds_total{cause=\"startup\",job_id=\"job-a\"}"), 0);
  metrics_.RecordRecovery("job-a", 2.5, 7);
  metrics_.AddBadput("job-a", "restart", 2.0);
  EXPECT_EQ(Value("trainyard_job_lost_steps_total{job_id=\"job-a\"}"), 7);
  EXPECT_EQ(Value("trainyard_job_badput_seconds_total{cause=\"restart\",job_id=\"job-a\"}"), 2.0);
  metrics_.RemoveJob("job-a");
  EXPECT_FALSE(Has("job_id=\"job-a\""));
  EXPECT_TRUE(Has("trainyard_job_step{job_id=\"job-b\",rank=\"0\"}"));
  // The server-wide restart count, recoveries and lost steps stay.
  EXPECT_EQ(Value("trainyard_restarts_total"), 1);
  EXPECT_EQ(Value("trainyard_recovery_seconds_count"), 1);
  EXPECT_EQ(Value("trainyard_lost_steps_total"), 7);
}

// Above the per-rank limit a job's gauges are their minimum, median and
// maximum over the ranks' last samples, its counters and histograms one
// series for all ranks, and its slowest ranks are named.
TEST_F(ServerMetricsTest, AJobAboveThePerRankLimitExportsAggregates) {
  metrics_.SetPerRankLimit(3, 2);
  metrics_.SetJobRanks("job-big", 4);
  metrics_.SetJobRanks("job-small", 3);
  const double losses[] = {4.0, 1.0, 3.0, 2.0};
  const double forward[] = {0.2, 0.5, 0.1, 0.5};
  for (int32_t rank = 0; rank < 4; ++rank) {
    for (int64_t step = 1; step <= 2; ++step) {
      StepMetrics m = Step(rank, step);
      m.loss = losses[rank] + (step == 1 ? 100 : 0);  // the last sample counts
      m.forward_seconds = forward[rank];
      m.model_flops = 1e9 * (rank + 1);
      m.values["accuracy"] = 0.1 * rank;
      metrics_.RecordStep("job-big", m);
    }
    metrics_.SetRankNode("job-big", rank, "node-" + std::to_string(rank));
  }
  metrics_.RecordStep("job-small", Step(0, 1));
  EXPECT_EQ(Value("trainyard_job_loss{aggregate=\"min\",job_id=\"job-big\"}"), 1.0);
  EXPECT_EQ(Value("trainyard_job_loss{aggregate=\"median\",job_id=\"job-big\"}"), 2.5);  // (2 + 3) / 2
  EXPECT_EQ(Value("trainyard_job_loss{aggregate=\"max\",job_id=\"job-big\"}"), 4.0);
  EXPECT_EQ(Value("trainyard_job_step{aggregate=\"median\",job_id=\"job-big\"}"), 2);
  EXPECT_EQ(Value("trainyard_job_memory_bytes{aggregate=\"max\",job_id=\"job-big\",kind=\"parameters\"}"), 0);
  // Derived gauges and a script's values too: model FLOP/s = flops / 0.1 s.
  EXPECT_EQ(Value("trainyard_job_model_flops_per_second{aggregate=\"max\",job_id=\"job-big\"}"), 4e10);
  EXPECT_EQ(Value("trainyard_job_model_flops_per_second{aggregate=\"min\",job_id=\"job-big\"}"), 1e10);
  EXPECT_NEAR(Value("trainyard_job_value{aggregate=\"max\",job_id=\"job-big\",name=\"accuracy\"}"), 0.3, 1e-12);
  EXPECT_EQ(Value("trainyard_job_comm_compression_ratio{aggregate=\"median\",job_id=\"job-big\"}"), 0.5);
  // Counters summed and histograms observed over every rank's steps.
  EXPECT_EQ(Value("trainyard_job_samples_total{job_id=\"job-big\"}"), 4 * 2 * 64);
  EXPECT_EQ(Value("trainyard_job_step_duration_seconds_count{job_id=\"job-big\",phase=\"step\"}"), 8);
  EXPECT_EQ(Value("trainyard_job_reporting_ranks{job_id=\"job-big\"}"), 4);
  // The slowest by forward pass; of equals the lower rank first.
  EXPECT_EQ(Value("trainyard_job_slowest_rank{job_id=\"job-big\",place=\"1\"}"), 1);
  EXPECT_EQ(Value("trainyard_job_slowest_rank{job_id=\"job-big\",place=\"2\"}"), 3);
  EXPECT_EQ(Value("trainyard_job_slowest_rank_forward_seconds{job_id=\"job-big\",place=\"2\"}"), 0.5);
  EXPECT_FALSE(Has("place=\"3\""));
  // No series names a rank of the big job; the small job keeps its own.
  EXPECT_FALSE(std::regex_search(Scrape(), std::regex("job_id=\"job-big\"[^}]*rank=")));
  EXPECT_FALSE(Has("node=\"node-0\""));
  EXPECT_EQ(Value("trainyard_job_loss{job_id=\"job-small\",rank=\"0\"}"), 1.5);
  EXPECT_FALSE(Has("trainyard_job_reporting_ranks{job_id=\"job-small\"}"));
  // The server-wide families list each name once (the text format's rule).
  const std::string text = Scrape();
  EXPECT_EQ(std::count(text.begin(), text.end(), '#') % 2, 0);
  size_t types = 0;
  for (size_t at = text.find("# TYPE trainyard_job_loss "); at != std::string::npos;
       at = text.find("# TYPE trainyard_job_loss ", at + 1)) {
    ++types;
  }
  EXPECT_EQ(types, 1u);
  metrics_.RemoveJob("job-big");
  EXPECT_FALSE(Has("job_id=\"job-big\""));
}

// A job that grows past the limit (or shrinks within it) drops the series
// of the other kind; a smaller attempt's aggregates leave out the ranks it
// no longer has.
TEST_F(ServerMetricsTest, AJobCrossingThePerRankLimitChangesItsSeries) {
  metrics_.SetPerRankLimit(2, 5);
  metrics_.SetJobRanks("job-a", 2);
  metrics_.RecordStep("job-a", Step(0, 1));
  metrics_.RecordStep("job-a", Step(1, 1));
  EXPECT_TRUE(Has("trainyard_job_step{job_id=\"job-a\",rank=\"1\"}"));
  metrics_.SetJobRanks("job-a", 4);
  EXPECT_FALSE(Has("job_id=\"job-a\""));
  for (int32_t rank = 0; rank < 4; ++rank) metrics_.RecordStep("job-a", Step(rank, 2));
  EXPECT_EQ(Value("trainyard_job_reporting_ranks{job_id=\"job-a\"}"), 4);
  EXPECT_FALSE(Has("rank=\"1\""));
  metrics_.SetJobRanks("job-a", 3);  // still aggregated, rank 3 gone
  EXPECT_EQ(Value("trainyard_job_reporting_ranks{job_id=\"job-a\"}"), 3);
  metrics_.SetJobRanks("job-a", 1);
  EXPECT_FALSE(Has("job_id=\"job-a\""));
  metrics_.RecordStep("job-a", Step(0, 3));
  EXPECT_EQ(Value("trainyard_job_step{job_id=\"job-a\",rank=\"0\"}"), 3);
}

// The point of the aggregates: a 10,000-rank job's scrape stays under 1 MB
// (per rank it would be about 90 MB).
TEST_F(ServerMetricsTest, A10000RankJobsScrapeStaysUnderOneMegabyte) {
  metrics_.SetJobRanks("job-huge", 10000);  // the default limit: 64
  for (int32_t rank = 0; rank < 10000; ++rank) {
    StepMetrics m = Step(rank, 7);
    m.forward_seconds = 0.01 * (rank % 97);
    m.model_flops = 1e12;
    metrics_.RecordStep("job-huge", m);
    metrics_.SetRankNode("job-huge", rank, "node-" + std::to_string(rank / 8));
  }
  const std::string text = Scrape();
  EXPECT_LT(text.size(), 1000000u);
  EXPECT_EQ(Value("trainyard_job_reporting_ranks{job_id=\"job-huge\"}"), 10000);
  EXPECT_EQ(Value("trainyard_job_samples_total{job_id=\"job-huge\"}"), 640000);
  EXPECT_EQ(Value("trainyard_job_slowest_rank_forward_seconds{job_id=\"job-huge\",place=\"5\"}"), 0.96);
}

TEST_F(ServerMetricsTest, CheckpointsByTypeAndResult) {
  CheckpointEvent ok;
  ok.ok = true;
  ok.type = CheckpointType::kSharded;
  ok.step = 40;
  ok.bytes = 4096;
  ok.seconds = 0.3;
  ok.unix_millis = 1700000000000;
  CheckpointEvent failed;
  failed.type = CheckpointType::kFull;
  metrics_.RecordCheckpoint("job-a", ok);
  metrics_.RecordCheckpoint("job-a", failed);
  EXPECT_EQ(Value("trainyard_checkpoints_total{result=\"ok\",type=\"sharded\"}"), 1);
  EXPECT_EQ(Value("trainyard_checkpoints_total{result=\"failed\",type=\"full\"}"), 1);
  EXPECT_EQ(Value("trainyard_checkpoints_total{result=\"ok\",type=\"full\"}"), 0);
  EXPECT_EQ(Value("trainyard_job_last_checkpoint_step{job_id=\"job-a\"}"), 40);
}

TEST_F(ServerMetricsTest, JobCountsByState) {
  metrics_.SetJobCounts({{JobState::kRunning, 2}, {JobState::kSucceeded, 5}});
  EXPECT_EQ(Value("trainyard_jobs{state=\"RUNNING\"}"), 2);
  EXPECT_EQ(Value("trainyard_jobs{state=\"SUCCEEDED\"}"), 5);
  EXPECT_EQ(Value("trainyard_jobs{state=\"QUEUED\"}"), 0);
}

}  // namespace
}  // namespace trainyard
