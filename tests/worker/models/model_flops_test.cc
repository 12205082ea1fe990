// Model FLOPs (for MFU) as the trainer reports them, against PyTorch's own
// FlopCounterMode on reimplementations of the same models in the venv's
// torch (tests/fixtures/model_flops.py).
#include "worker/models/model_flops.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "tests/test_paths.h"
#include "tests/test_util.h"
#include "tests/worker/test_python.h"
#include "tests/worker/trainer_test_util.h"
#include "worker/base/device.h"
#include "worker/train/trainer.h"

namespace trainyard {
namespace {

// `llama_dir`: where the fixture writes the config.json of its llama model.
nlohmann::json Reference(const std::string& llama_dir) {
  const std::string cmd = TestPython() + " " + TRAINYARD_SOURCE_DIR + "/tests/fixtures/model_flops.py " + llama_dir;
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
  TempDir llama_dir;
  const nlohmann::json want = Reference(llama_dir.path());
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

  // transformers' Llama, attention (SDPA) included.
  JobSpec llama;
  llama.model.kind = ModelKind::kLlama;
  llama.model.config = llama_dir.path();
  llama.model.context = 32;
  llama.data.batch_size = 4;
  const double got_llama = ReportedForwardPerSample(llama), ref_llama = want["llama"].get<double>();
  // The profiler also counts the elementwise products and sums of the
  // norms, rotary embeddings, SwiGLU and residuals, which FlopCounterMode
  // leaves out.
  EXPECT_NEAR(got_llama, ref_llama, 0.03 * ref_llama) << "ours " << got_llama << ", FlopCounterMode " << ref_llama;
}

TEST(ModelFlops, CountsOnlyWhatRunsInside) {
  torch::NoGradGuard no_grad;
  const at::Tensor a = torch::randn({8, 16}), b = torch::randn({16, 4});
  EXPECT_DOUBLE_EQ(CountForwardFlops([&] { (void)torch::mm(a, b); }), 2.0 * 8 * 16 * 4);
  (void)torch::mm(a, b);  // outside: not counted by the next call
  EXPECT_DOUBLE_EQ(CountForwardFlops([] {}), 0.0);
}

// The table of device peaks matches whole words of the name CUDA reports.
// The peaks as NVIDIA's data sheets print them, in TFLOPS, independent of
// the worker's table. Sheets give tensor-core numbers "with sparsity": the
// dense peak is half of that.
//   H100 SXM5 / H100 PCIe / H100 NVL: "NVIDIA H100 Tensor Core GPU" datasheet
//     (2023): FP32 67 / 51 / 60; BF16 and FP16 1,979 / 1,513 / 1,671 sparse.
//   H200 SXM: "NVIDIA H200 Tensor Core GPU" datasheet (2024): FP32 67;
//     BF16 and FP16 1,979 sparse.
//   A100 SXM/PCIe: "NVIDIA A100 Tensor Core GPU" datasheet (2021): FP32 19.5;
//     BF16 and FP16 312 dense (624 sparse).
//   L40S: "NVIDIA L40S" datasheet (2023): FP32 91.6; BF16 and FP16 362.05
//     dense (733 sparse).
//   L4: "NVIDIA L4 Tensor Core GPU" datasheet (2023): FP32 30.3; BF16 and
//     FP16 242 sparse.
//   A10: "NVIDIA A10 Tensor Core GPU" datasheet (2021): FP32 31.2; BF16 and
//     FP16 250 sparse.
//   V100 SXM2: "NVIDIA Tesla V100" datasheet (2020): FP32 15.7; tensor
//     (FP16) 125; no BF16 tensor cores.
constexpr double kTera = 1e12;
struct SheetRow {
  const char* device;  // as CUDA names it
  double fp32, bf16, fp16;
};
const SheetRow kDataSheets[] = {
    {"NVIDIA H100 80GB HBM3", 67, 1979 / 2.0, 1979 / 2.0},
    {"NVIDIA H100 PCIe", 51, 1513 / 2.0, 1513 / 2.0},
    {"NVIDIA H100 NVL", 60, 1671 / 2.0, 1671 / 2.0},
    {"NVIDIA H200", 67, 1979 / 2.0, 1979 / 2.0},
    {"NVIDIA A100-SXM4-80GB", 19.5, 312, 312},
    {"NVIDIA A100-PCIE-40GB", 19.5, 312, 312},
    {"NVIDIA L40S", 91.6, 362.05, 362.05},
    {"NVIDIA L4", 30.3, 242 / 2.0, 242 / 2.0},
    {"NVIDIA A10", 31.2, 250 / 2.0, 250 / 2.0},
    {"Tesla V100-SXM2-16GB", 15.7, 0, 125},
};

TEST(PeakFlops, KnownDevicesGiveTheirDataSheetPeaks) {
  for (const SheetRow& row : kDataSheets) {
    // Sheets round to three or four digits: within 1% of them.
    auto near = [&](MixedPrecision p, double want_tera, const char* what) {
      const double got = PeakFlops(row.device, p);
      if (want_tera == 0) {
        EXPECT_EQ(got, 0) << row.device << " " << what;
      } else {
        EXPECT_NEAR(got / kTera, want_tera, 0.01 * want_tera) << row.device << " " << what;
      }
    };
    near(MixedPrecision::kNo, row.fp32, "fp32");
    near(MixedPrecision::kBf16, row.bf16, "bf16");
    near(MixedPrecision::kFp16, row.fp16, "fp16");
  }
}

TEST(PeakFlops, NamesMatchByWholeWords) {
  EXPECT_EQ(PeakFlops("NVIDIA A10G", MixedPrecision::kBf16), 0);  // not "A10"
  EXPECT_EQ(PeakFlops("NVIDIA L40", MixedPrecision::kBf16), 0);   // neither "L4" nor "L40S"
  EXPECT_EQ(PeakFlops(DeviceName(c10::Device(c10::kCPU)), MixedPrecision::kNo), 0);
  EXPECT_EQ(DeviceName(c10::Device(c10::kCPU)), "cpu");
}

}  // namespace
}  // namespace trainyard
