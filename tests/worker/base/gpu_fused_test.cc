// The fused path on a GPU (part of gpu_test, which skips without one): ATen's
// CUDA kernels for AdamW, RMSNorm and attention, and the chunked loss,
// against their unfused forms in float64 on the CPU; a llama job with the
// fused path on CUDA against the same job on the CPU; the attention kernel
// a bf16 llama takes on CUDA is a fused one, and a forced one is honoured.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <string>
#include <vector>

#include "tests/test_util.h"
#include "tests/worker/trainer_test_util.h"
#include "worker/models/attention_backend.h"
#include "worker/models/autocast.h"
#include "worker/models/chunked_loss.h"
#include "worker/models/fused_adamw.h"
#include "worker/models/models.h"
#include "worker/parallel/parallel_model.h"

namespace trainyard {
namespace {

const c10::Device kFusedGpu(c10::kCUDA, 0);

TEST(CudaFused, AdamWOnTheGpuEqualsAdamWInFloat64OnTheCpu) {
  torch::manual_seed(3);
  std::vector<at::Tensor> cpu = {torch::randn({64, 32}, at::kDouble), torch::randn({17}, at::kDouble)};
  std::vector<at::Tensor> gpu;
  for (at::Tensor& p : cpu) {
    p.set_requires_grad(true);
    gpu.push_back(p.detach().to(kFusedGpu).to(at::kFloat).set_requires_grad(true));
  }
  const auto options = torch::optim::AdamWOptions(1e-2).betas({0.9, 0.95}).weight_decay(0.1);
  torch::optim::AdamW reference(cpu, options);
  FusedAdamW fused(gpu, options);
  for (int step = 0; step < 5; ++step) {
    for (size_t i = 0; i < cpu.size(); ++i) {
      const at::Tensor g = torch::randn_like(cpu[i]);
      cpu[i].mutable_grad() = g;
      gpu[i].mutable_grad() = g.to(kFusedGpu).to(at::kFloat);
    }
    reference.step();
    fused.step();
  }
  for (size_t i = 0; i < cpu.size(); ++i) {
    EXPECT_LT((gpu[i].cpu().to(at::kDouble) - cpu[i]).abs().max().item<double>(), 1e-5) << "parameter " << i;
  }
}

TEST(CudaFused, ChunkedLossOnTheGpuEqualsTheWholeLossInFloat64) {
  torch::manual_seed(5);
  const at::Tensor h = torch::randn({300, 64}, at::kDouble), w = torch::randn({1000, 64}, at::kDouble) * 0.1;
  const at::Tensor targets = torch::randint(0, 1000, {300}, at::kLong);
  const at::Tensor h1 = h.clone().set_requires_grad(true), w1 = w.clone().set_requires_grad(true);
  const at::Tensor want = torch::nn::functional::cross_entropy(torch::matmul(h1, w1.t()), targets);
  want.backward();
  const at::Tensor h2 = h.to(kFusedGpu).set_requires_grad(true), w2 = w.to(kFusedGpu).set_requires_grad(true);
  const at::Tensor got = ChunkedCrossEntropy(h2, w2, targets.to(kFusedGpu), 64);
  got.backward();
  EXPECT_NEAR(got.item<double>(), want.item<double>(), 1e-10);
  EXPECT_LT((h2.grad().cpu() - h1.grad()).abs().max().item<double>(), 1e-10);
  EXPECT_LT((w2.grad().cpu() - w1.grad()).abs().max().item<double>(), 1e-10);
}

TEST(CudaFused, RmsNormKernelInBf16WithinItsRounding) {
  torch::manual_seed(2);
  const at::Tensor x = torch::randn({8, 128, 256}, at::kDouble), w = torch::randn({256}, at::kDouble);
  const at::Tensor want = w * (x * torch::rsqrt(x.pow(2).mean(-1, true) + 1e-5));
  const at::Tensor got =
      at::rms_norm(x.to(kFusedGpu).to(at::kBFloat16), {256}, w.to(kFusedGpu).to(at::kBFloat16), 1e-5);
  const double scale = want.abs().max().item<double>();
  EXPECT_LT((got.cpu().to(at::kDouble) - want).abs().max().item<double>(), 2e-2 * scale);
}

std::string GpuFusedLlamaDir(const TempDir& dir) {
  std::ofstream(dir.path() + "/config.json")
      << R"({"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 256, "hidden_size": 128,
             "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
             "max_position_embeddings": 128, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
             "tie_word_embeddings": false})";
  return dir.path();
}

TEST(CudaFused, LlamaJobOnTheGpuMatchesTheCpuRun) {
  TempDir dir;
  JobSpec spec;
  spec.model.kind = ModelKind::kLlama;
  spec.model.config = GpuFusedLlamaDir(dir);
  spec.model.context = 64;
  spec.data.batch_size = 4;
  spec.optimizer.kind = OptimizerKind::kAdamW;
  spec.optimizer.lr = 1e-3;
  spec.checkpoint.save_final = false;
  std::vector<double> losses[2];
  for (const bool cuda : {false, true}) {
    JobSpec s = spec;
    s.device = cuda ? Device::kCuda : Device::kCpu;
    RunTrainers(
        s, 1,
        [&](int, Trainer& t) {
          for (int i = 0; i < 5; ++i) losses[cuda].push_back(t.Step());
          EXPECT_TRUE(t.model().projection_left_to_loss());
        },
        nullptr, nullptr, cuda ? std::vector<c10::Device>{kFusedGpu} : std::vector<c10::Device>{});
  }
  for (int i = 0; i < 5; ++i) EXPECT_NEAR(losses[1][i], losses[0][i], 1e-3 * losses[0][i]) << "step " << i;
}

TEST(CudaFused, Bf16LlamaTakesAFusedAttentionKernelAndAForcedOne) {
  TempDir dir;
  JobSpec spec;
  spec.model.kind = ModelKind::kLlama;
  spec.model.config = GpuFusedLlamaDir(dir);
  spec.model.context = 64;
  spec.device = Device::kCuda;
  spec.mixed_precision = MixedPrecision::kBf16;
  const at::Tensor tokens = torch::randint(0, 256, {2, 64}, at::kLong).to(kFusedGpu);
  for (const AttentionBackend backend : {AttentionBackend::kAuto, AttentionBackend::kMath}) {
    spec.fused.attention = backend;
    auto model = BuildModel(spec.model, 1);
    UseFusedKernels(spec, model.get());
    model->to(kFusedGpu);
    {
      AutocastGuard autocast(c10::kCUDA, at::kBFloat16, /*enabled=*/true);
      model->forward(tokens);
    }
    const int got = model->attention_backend();
    if (backend == AttentionBackend::kMath) {
      EXPECT_EQ(got, 0);
    } else {
      EXPECT_GT(got, 0) << "a bf16 llama on CUDA takes a fused kernel, got " << SdpaBackendName(got);
    }
  }
  UseAttentionBackend(AttentionBackend::kAuto);
}

}  // namespace
}  // namespace trainyard
