// The fused path on a GPU (part of gpu_test, which skips without one): ATen's
// CUDA kernels for AdamW, RMSNorm and attention, and the chunked loss,
// against their unfused forms in float64 on the CPU; a llama job with the
// fused path on CUDA against the same job on the CPU; the attention kernel
// a bf16 llama takes on CUDA is a fused one, and a forced one is honoured;
// the captured step (fused.cuda_graph) trains as the eager one, alone and
// under DDP over NCCL.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <string>
#include <vector>

#include "tests/test_util.h"
#include "tests/worker/trainer_test_util.h"
#include "worker/collectives/dist_setup.h"
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

// Notes and losses of rank 0.
struct NotesAndLosses : MetricsSink {
  std::vector<std::string> notes;
  std::vector<double> loss, grad_norm, lr;
  void OnStep(const StepMetrics& m) override {
    loss.push_back(m.loss);
    grad_norm.push_back(m.grad_norm);
    lr.push_back(m.learning_rate);
  }
  void OnNote(const std::string& text) override { notes.push_back(text); }
  bool Said(const std::string& part) const {
    for (const std::string& n : notes) {
      if (n.find(part) != std::string::npos) return true;
    }
    return false;
  }
};

// A llama job with clipping, a warmup schedule (the learning rate changes
// every step: the graph reads it from its tensor) and two micro-batches.
JobSpec CapturedLlama(const std::string& config) {
  JobSpec spec;
  spec.model.kind = ModelKind::kLlama;
  spec.model.config = config;
  spec.model.context = 64;
  spec.data.batch_size = 4;
  spec.device = Device::kCuda;
  spec.max_steps = 16;
  spec.max_grad_norm = 0.5;
  spec.gradient_accumulation_steps = 2;
  spec.scheduler.kind = SchedulerKind::kCosine;
  spec.scheduler.warmup_steps = 6;
  spec.optimizer.lr = 3e-3;
  spec.checkpoint.save_final = false;
  return spec;
}

// `spec` run to its end on the GPU eager (runs[0]) and captured (runs[1]).
void RunEagerAndCaptured(JobSpec spec, NotesAndLosses runs[2]) {
  for (const bool captured : {false, true}) {
    spec.fused.cuda_graph = captured ? StepCapture::kOn : StepCapture::kOff;
    RunTrainers(spec, 1, [&](int, Trainer& t) { t.Run(); }, &runs[captured], nullptr, {kFusedGpu});
  }
}

// The same 16 steps eager and captured (steps 4 to 16 replayed): the same
// losses, norms and learning rates, and the capture said in the events.
TEST(CudaGraphStep, ACapturedStepTrainsAsTheEagerOne) {
  TempDir dir;
  const std::string config = GpuFusedLlamaDir(dir);
  NotesAndLosses runs[2];
  RunEagerAndCaptured(CapturedLlama(config), runs);
  ASSERT_EQ(runs[0].loss.size(), 16u);
  ASSERT_EQ(runs[1].loss.size(), 16u);
  EXPECT_TRUE(runs[1].Said("captured as a CUDA graph at step 4")) << ::testing::PrintToString(runs[1].notes);
  EXPECT_FALSE(runs[0].Said("captured as a CUDA graph"));
  for (size_t i = 0; i < 16; ++i) {
    EXPECT_NEAR(runs[1].loss[i], runs[0].loss[i], 1e-4 * runs[0].loss[i]) << "step " << i + 1;
    EXPECT_NEAR(runs[1].grad_norm[i], runs[0].grad_norm[i], 1e-3 * runs[0].grad_norm[i]) << "step " << i + 1;
    EXPECT_DOUBLE_EQ(runs[1].lr[i], runs[0].lr[i]);
  }
  EXPECT_LT(runs[1].loss.back(), runs[1].loss.front());
}

// An epoch of 22 samples in batches of 4 ends with one of 2: that step runs
// uncaptured (said once), the replays go on after it, and the losses are
// the eager run's.
TEST(CudaGraphStep, AnEpochsLastSmallerBatchRunsUncaptured) {
  TempDir dir;
  const std::string config = GpuFusedLlamaDir(dir);
  NotesAndLosses runs[2];
  JobSpec spec = CapturedLlama(config);
  spec.gradient_accumulation_steps = 1;
  spec.data.num_samples = 22;
  spec.max_steps = 14;  // steps 6 and 12 take the 2 left of an epoch
  RunEagerAndCaptured(spec, runs);
  ASSERT_EQ(runs[1].loss.size(), 14u);
  EXPECT_TRUE(runs[1].Said("step 6 runs uncaptured: its batch has inputs [2, 64]"))
      << ::testing::PrintToString(runs[1].notes);
  for (size_t i = 0; i < 14; ++i) {
    EXPECT_NEAR(runs[1].loss[i], runs[0].loss[i], 1e-4 * runs[0].loss[i]) << "step " << i + 1;
  }
}

// A checkpoint of a captured job holds the steps the replays took (the
// optimizer's state counts them), and resumes into the eager path where
// the captured job goes on.
TEST(CudaGraphStep, ACheckpointOfACapturedJobResumesEager) {
  TempDir dir, project;
  JobSpec spec = CapturedLlama(GpuFusedLlamaDir(dir));
  spec.checkpoint.project_dir = project.path();
  spec.fused.cuda_graph = StepCapture::kOn;
  std::string saved;
  double captured_next = 0;
  RunTrainers(spec, 1,
              [&](int, Trainer& t) {
                for (int i = 0; i < 8; ++i) t.Step();  // 3 eager, then 5 replays
                saved = t.Checkpoint(CheckpointType::kFull, "request", 0).path;
                t.WaitForCheckpoints();
                captured_next = t.Step();
              },
              nullptr, nullptr, {kFusedGpu});
  ASSERT_FALSE(saved.empty());
  spec.fused.cuda_graph = StepCapture::kOff;
  double eager_next = 0;
  RunTrainers(spec, 1,
              [&](int, Trainer& t) {
                t.Resume(saved);
                EXPECT_EQ(t.step(), 8);
                const at::Tensor first = t.model().parameters().front();
                auto& state =
                    static_cast<torch::optim::AdamWParamState&>(*t.optimizer().state().at(first.unsafeGetTensorImpl()));
                EXPECT_EQ(state.step(), 8) << "the replayed steps are counted in the optimizer's state";
                eager_next = t.Step();
              },
              nullptr, nullptr, {kFusedGpu});
  EXPECT_NEAR(eager_next, captured_next, 1e-4 * captured_next);
}

// DDP over an NCCL group of one rank: the Reducer's allreduce is captured
// with the step (after 11 eager steps), and trains as the eager run.
TEST(CudaGraphStep, DdpOverNcclIsCapturedWithItsAllreduce) {
  TempDir dir;
  const std::string config = GpuFusedLlamaDir(dir);
  NotesAndLosses runs[2];
  for (const bool captured : {false, true}) {
    JobSpec spec = CapturedLlama(config);
    spec.backend = Backend::kNccl;
    spec.max_steps = 14;
    spec.fused.cuda_graph = captured ? StepCapture::kOn : StepCapture::kOff;
    UseDevice(kFusedGpu);
    auto store = c10::make_intrusive<c10d::HashStore>();
    DistSetup setup = SetUpGroups(spec, store, 0, 1, "127.0.0.1", std::chrono::seconds(60));
    DistContext context = setup.context();
    ASSERT_NE(context.process_group, nullptr);
    context.device = kFusedGpu;
    Trainer t(spec, 0, 1, context, &runs[captured], nullptr);
    ASSERT_NE(t.ddp(), nullptr);
    t.Run();
  }
  ASSERT_EQ(runs[1].loss.size(), 14u);
  EXPECT_TRUE(runs[1].Said("captured as a CUDA graph at step 12")) << ::testing::PrintToString(runs[1].notes);
  for (size_t i = 0; i < 14; ++i) {
    EXPECT_NEAR(runs[1].loss[i], runs[0].loss[i], 1e-4 * runs[0].loss[i]) << "step " << i + 1;
  }
}

}  // namespace
}  // namespace trainyard
