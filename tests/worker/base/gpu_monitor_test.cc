// GpuMonitor against a stand-in libnvidia-ml.so.1 (tests/worker/fake_nvml.cc,
// on LD_LIBRARY_PATH through ctest), and without any (the NoNvml case runs
// in a ctest entry of its own with no library to find). The real driver is
// exercised by gpu_test on a GPU machine.
#include "worker/base/gpu_monitor.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace trainyard {
namespace {

TEST(GpuMonitor, ReadsEveryNumberNvmlGives) {
  auto m = GpuMonitor::Open("00000000:3B:00.0");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->name(), "Fake GPU 80GB");
  const GpuReading r = (*m)->Read();
  EXPECT_DOUBLE_EQ(r.utilization, 0.87);
  EXPECT_EQ(r.memory_used_bytes, 21474836480LL);
  EXPECT_EQ(r.memory_total_bytes, 85899345920LL);
  EXPECT_DOUBLE_EQ(r.power_watts, 412.5);
  EXPECT_DOUBLE_EQ(r.temperature_celsius, 61);
  EXPECT_EQ(r.ecc_corrected, 3);
  EXPECT_EQ(r.ecc_uncorrected, 0);
  EXPECT_EQ(r.xid_errors, 2);
  EXPECT_EQ(r.last_xid, 48);
  EXPECT_EQ((*m)->Read().xid_errors, 0);  // each event once
}

TEST(GpuMonitor, AnUnknownBusIdIsNotFoundByName) {
  auto m = GpuMonitor::Open("00000000:99:00.0");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(m.status().message().find("00000000:99:00.0"), std::string::npos) << m.status();
}

class Recording final : public MetricsSink {
 public:
  void OnStep(const StepMetrics& m) override { steps.push_back(m); }
  std::vector<StepMetrics> steps;
};

// The sampler's reading rides on the next step; its Xid events on one step
// only (the counter they feed is increased by each sample's value): over
// many steps they add up to the two the driver reported.
TEST(GpuMonitor, TheSinkAddsTheLatestReadingToSteps) {
  auto m = GpuMonitor::Open("00000000:3B:00.0");
  ASSERT_TRUE(m.ok()) << m.status();
  Recording next;
  GpuSink sink(&next, m->get());
  StepMetrics step;
  step.step = 1;
  sink.OnStep(step);  // before the first sample: passed on as it is
  ASSERT_EQ(next.steps.size(), 1u);
  EXPECT_EQ(next.steps[0].gpu_memory_total_bytes, -1);
  EXPECT_EQ(next.steps[0].gpu_xid_errors, 0);
  (*m)->StartSampling(std::chrono::milliseconds(5));
  // Steps until one carries the sampler's first reading, then 20 more.
  int after_first = -1;
  int64_t xids = 0;
  while (after_first < 20) {
    step.step += 1;
    sink.OnStep(step);
    const StepMetrics& s = next.steps.back();
    xids += s.gpu_xid_errors;
    if (after_first >= 0 || s.gpu_memory_total_bytes > 0) ++after_first;
    std::this_thread::yield();
  }
  const StepMetrics& s = next.steps.back();
  EXPECT_EQ(s.step, step.step);
  EXPECT_DOUBLE_EQ(s.gpu_utilization, 0.87);
  EXPECT_EQ(s.gpu_memory_used_bytes, 21474836480LL);
  EXPECT_EQ(s.gpu_memory_total_bytes, 85899345920LL);
  EXPECT_DOUBLE_EQ(s.gpu_power_watts, 412.5);
  EXPECT_DOUBLE_EQ(s.gpu_temperature_celsius, 61);
  EXPECT_EQ(s.gpu_ecc_corrected, 3);
  EXPECT_EQ(s.gpu_last_xid, 48);  // kept after the events were handed out
  EXPECT_EQ(xids, 2);
}

TEST(GpuMonitorNoNvml, SaysNvmlIsUnavailable) {
  auto m = GpuMonitor::Open("00000000:3B:00.0");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(m.status().message().find("libnvidia-ml.so.1"), std::string::npos) << m.status();
}

}  // namespace
}  // namespace trainyard
