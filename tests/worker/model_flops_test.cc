// Model FLOPs (for MFU) as the trainer reports them, against PyTorch's own
// FlopCounterMode on reimplementations of the same models in the venv's
// torch (tests/fixtures/model_flops.py).
#include "worker/model_flops.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "tests/worker/trainer_test_util.h"
#include "worker/device.h"
#include "worker/trainer.h"

namespace trainyard {
namespace {

std::string Python() {
  const char* p = std::getenv("TRAINYARD_TEST_PYTHON");
  return p != nullptr ? p : TRAINYARD_TEST_PYTHON;
}

nlohmann::json Reference() {
  const std::string cmd = Python() + " " + TRAINYARD_SOURCE_DIR + "/tests/fixtures/model_flops.py";
  FILE* f = ::popen(cmd.c_str(), "r");
  if (f == nullptr) throw std::runtime_error("cannot run " + cmd);
  std::string out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof(buf), f)) out.append(buf, n);
  if (::pclose(f) != 0) throw std::runtime_error(cmd + " failed: " + out);
  return nlohmann::json::parse(out);
}

struct FirstStep : MetricsSink {
  double model_flops = -1;
  int64_t samples = 0;
  void OnStep(const StepMetrics& m) override {
    if (model_flops < 0) {
      model_flops = m.model_flops;
      samples = m.samples;
    }
  }
};

// Forward FLOPs per sample from the first step's report (3x the forward).
double ReportedForwardPerSample(const JobSpec& spec) {
  FirstStep sink;
  RunTrainers(
      spec, 1,
      [](int, Trainer& t) {
        t.Step();
        t.Step();
      },
      &sink);
  EXPECT_GT(sink.samples, 0);
  return sink.model_flops / 3.0 / static_cast<double>(sink.samples);
}

TEST(ModelFlops, TheTrainersCountIsPyTorchsFlopCounter) {
  const nlohmann::json want = Reference();
  JobSpec mlp;
  mlp.model.hidden = {512, 256};
  mlp.data.batch_size = 8;
  EXPECT_DOUBLE_EQ(ReportedForwardPerSample(mlp), want["mlp"].get<double>());

  JobSpec cnn;
  cnn.model.kind = ModelKind::kCnn;
  cnn.data.batch_size = 8;
  EXPECT_DOUBLE_EQ(ReportedForwardPerSample(cnn), want["cnn"].get<double>());

  JobSpec gpt;
  gpt.model.kind = ModelKind::kGpt;
  gpt.model.layers = 2;
  gpt.model.width = 32;
  gpt.model.heads = 4;
  gpt.model.context = 16;
  gpt.model.vocab = 64;
  gpt.data.batch_size = 4;
  // PyTorch's profiler also counts the residual and embedding additions
  // (2560 per sample here), which FlopCounterMode leaves out.
  const double got = ReportedForwardPerSample(gpt), ref = want["gpt"].get<double>();
  EXPECT_NEAR(got, ref, 0.005 * ref) << "ours " << got << ", FlopCounterMode " << ref;
}

TEST(ModelFlops, CountsOnlyWhatRunsInside) {
  torch::NoGradGuard no_grad;
  const at::Tensor a = torch::randn({8, 16}), b = torch::randn({16, 4});
  EXPECT_DOUBLE_EQ(CountForwardFlops([&] { (void)torch::mm(a, b); }), 2.0 * 8 * 16 * 4);
  (void)torch::mm(a, b);  // outside: not counted by the next call
  EXPECT_DOUBLE_EQ(CountForwardFlops([] {}), 0.0);
}

// The table of device peaks matches whole words of the name CUDA reports.
TEST(PeakFlops, KnownDevicesByWholeWordsOfTheirNames) {
  EXPECT_EQ(PeakFlops("NVIDIA H100 80GB HBM3", MixedPrecision::kBf16), 989.4e12);
  EXPECT_EQ(PeakFlops("NVIDIA H100 80GB HBM3", MixedPrecision::kNo), 66.9e12);
  EXPECT_EQ(PeakFlops("NVIDIA H100 PCIe", MixedPrecision::kNo), 51.2e12);
  EXPECT_EQ(PeakFlops("NVIDIA H200", MixedPrecision::kFp16), 989.4e12);
  EXPECT_EQ(PeakFlops("NVIDIA A100-SXM4-80GB", MixedPrecision::kBf16), 312e12);
  EXPECT_EQ(PeakFlops("NVIDIA L40S", MixedPrecision::kBf16), 362.05e12);
  EXPECT_EQ(PeakFlops("NVIDIA L4", MixedPrecision::kFp16), 121e12);
  EXPECT_EQ(PeakFlops("Tesla V100-SXM2-16GB", MixedPrecision::kFp16), 125e12);
  EXPECT_EQ(PeakFlops("Tesla V100-SXM2-16GB", MixedPrecision::kBf16), 0);  // no bf16 tensor cores
  EXPECT_EQ(PeakFlops("NVIDIA A10G", MixedPrecision::kBf16), 0);           // not "A10"
  EXPECT_EQ(PeakFlops("NVIDIA L40", MixedPrecision::kBf16), 0);            // neither "L4" nor "L40S"
  EXPECT_EQ(PeakFlops(DeviceName(c10::Device(c10::kCPU)), MixedPrecision::kNo), 0);
  EXPECT_EQ(DeviceName(c10::Device(c10::kCPU)), "cpu");
}

}  // namespace
}  // namespace trainyard
