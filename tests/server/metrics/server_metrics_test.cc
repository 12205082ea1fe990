// ServerMetrics: what a Prometheus scrape of the registry shows (the text
// exposition format, as the exposer serves it) after steps, checkpoints,
// restarts and a job's end.
#include "server/metrics/server_metrics.h"

#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>

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
