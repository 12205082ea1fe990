// The fused path (the job's `fused` section) against its unfused forms:
// ATen's fused AdamW against torch::optim::AdamW, the chunked loss against
// the whole logits' cross-entropy, at::rms_norm against transformers'
// RMSNorm written out — in float64 within 1e-10, in bf16 within its
// rounding — and a trainer with every piece on against one with every
// piece off: the same loss curve over 200 steps, the same FLOPs, a
// checkpoint of one resumed by the other, DDP with the chunked loss.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/test_util.h"
#include "tests/worker/trainer_test_util.h"
#include "worker/models/attention_backend.h"
#include "worker/models/chunked_loss.h"
#include "worker/models/fused_adamw.h"
#include "worker/models/models.h"
#include "worker/parallel/parallel_model.h"

namespace trainyard {
namespace {

// ---- fused AdamW ----

std::vector<at::Tensor> FusedTestParams() {
  torch::manual_seed(3);
  return {torch::randn({3, 4}, at::kDouble), torch::randn({5}, at::kDouble), torch::randn({2, 2, 2}, at::kDouble)};
}

std::vector<at::Tensor> CopiesOf(const std::vector<at::Tensor>& params) {
  std::vector<at::Tensor> out;
  for (const at::Tensor& p : params) out.push_back(p.detach().clone().set_requires_grad(true));
  return out;
}

torch::optim::AdamWOptions FusedTestOptions() {
  return torch::optim::AdamWOptions(1e-2).betas({0.9, 0.95}).eps(1e-8).weight_decay(0.1);
}

// The same gradients on both sets; `skip`: this parameter gets none.
void SetGrads(std::vector<at::Tensor>& a, std::vector<at::Tensor>& b, int step, int skip = -1) {
  torch::manual_seed(100 + step);
  for (size_t i = 0; i < a.size(); ++i) {
    if (static_cast<int>(i) == skip) {
      a[i].mutable_grad() = at::Tensor();
      b[i].mutable_grad() = at::Tensor();
      continue;
    }
    const at::Tensor g = torch::randn_like(a[i]);
    a[i].mutable_grad() = g.clone();
    b[i].mutable_grad() = g.clone();
  }
}

double MaxDiff(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, (a[i] - b[i]).abs().max().item<double>());
  return d;
}

TEST(FusedAdamW, EqualsAdamWInFloat64) {
  std::vector<at::Tensor> init = FusedTestParams();
  std::vector<at::Tensor> a = CopiesOf(init), b = CopiesOf(init);
  torch::optim::AdamW plain(a, FusedTestOptions());
  FusedAdamW fused(b, FusedTestOptions());
  for (int step = 0; step < 6; ++step) {
    SetGrads(a, b, step, /*skip=*/step == 2 ? 1 : -1);
    plain.step();
    fused.step();
    EXPECT_LT(MaxDiff(a, b), 1e-10) << "after step " << step;
  }
  EXPECT_GT(MaxDiff(a, init), 1e-3) << "the parameters moved";
  // The same state, which checkpoints read: the step count and the moments.
  for (size_t i = 0; i < a.size(); ++i) {
    auto& pa = static_cast<torch::optim::AdamWParamState&>(*plain.state().at(a[i].unsafeGetTensorImpl()));
    auto& pb = static_cast<torch::optim::AdamWParamState&>(*fused.state().at(b[i].unsafeGetTensorImpl()));
    EXPECT_EQ(pa.step(), pb.step()) << "parameter " << i;
    EXPECT_LT((pa.exp_avg() - pb.exp_avg()).abs().max().item<double>(), 1e-12);
    EXPECT_LT((pa.exp_avg_sq() - pb.exp_avg_sq()).abs().max().item<double>(), 1e-12);
  }
}

// A state put in place from outside (a checkpoint loaded) is what the next
// step continues from: its step count, not the one the optimizer counted.
TEST(FusedAdamW, AReplacedStateCountsFromItsOwnStep) {
  std::vector<at::Tensor> init = FusedTestParams();
  std::vector<at::Tensor> a = CopiesOf(init), b = CopiesOf(init);
  torch::optim::AdamW plain(a, FusedTestOptions());
  FusedAdamW fused(b, FusedTestOptions());
  for (int step = 0; step < 5; ++step) {
    SetGrads(a, b, step);
    plain.step();
    if (step < 2) fused.step();  // the fused one has counted 2 steps
  }
  // Load: the plain optimizer's parameters and state (5 steps) into the fused one.
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < a.size(); ++i) b[i].copy_(a[i]);
  }
  for (size_t i = 0; i < a.size(); ++i) {
    const auto& from = static_cast<torch::optim::AdamWParamState&>(*plain.state().at(a[i].unsafeGetTensorImpl()));
    auto copy = std::make_unique<torch::optim::AdamWParamState>();
    copy->step(from.step());
    copy->exp_avg(from.exp_avg().clone());
    copy->exp_avg_sq(from.exp_avg_sq().clone());
    fused.state()[b[i].unsafeGetTensorImpl()] = std::move(copy);
  }
  SetGrads(a, b, 9);
  plain.step();
  fused.step();
  EXPECT_LT(MaxDiff(a, b), 1e-10);
}

// What a captured step records: the learning rate read from a tensor (a
// schedule changes it between replays), the host's step counts advanced
// per replay, and the storages a replay may write (a replaced state is
// another).
TEST(FusedAdamW, ALearningRateTensorStepsAsTheNumber) {
  std::vector<at::Tensor> init = FusedTestParams();
  std::vector<at::Tensor> a = CopiesOf(init), b = CopiesOf(init);
  torch::optim::AdamW plain(a, FusedTestOptions());
  FusedAdamW fused(b, FusedTestOptions());
  at::Tensor lr = at::zeros({}, at::kFloat);
  for (int step = 0; step < 5; ++step) {
    lr.fill_(1e-2 * (step + 1));  // the plain step takes the float32 the tensor holds
    static_cast<torch::optim::AdamWOptions&>(plain.param_groups()[0].options()).lr(lr.item<double>());
    SetGrads(a, b, step);
    plain.step();
    fused.StepWithLr(lr);
    EXPECT_LT(MaxDiff(a, b), 1e-10) << "after step " << step;
  }
  auto step_of = [&](const at::Tensor& p) {
    return static_cast<torch::optim::AdamWParamState&>(*fused.state().at(p.unsafeGetTensorImpl())).step();
  };
  EXPECT_EQ(step_of(b[0]), 5);
  const std::vector<const void*> storages = fused.Storages();
  EXPECT_EQ(storages.size(), 4 * b.size());  // each parameter, its two moments, its step counter
  fused.CountReplayedStep();
  fused.CountReplayedStep();
  EXPECT_EQ(step_of(b[0]), 7);
  EXPECT_EQ(step_of(b[1]), 7);
  EXPECT_EQ(fused.Storages(), storages) << "counting on the host replaces no tensor";
  auto& state = static_cast<torch::optim::AdamWParamState&>(*fused.state().at(b[0].unsafeGetTensorImpl()));
  state.exp_avg(state.exp_avg().clone());  // as a loaded checkpoint does
  EXPECT_NE(fused.Storages(), storages);
}

// ---- the chunked loss ----

TEST(ChunkedCrossEntropy, EqualsTheWholeLogitsLossAndGradientsInFloat64) {
  torch::manual_seed(5);
  const at::Tensor h0 = torch::randn({37, 8}, at::kDouble), w0 = torch::randn({50, 8}, at::kDouble);
  at::Tensor targets = torch::randint(0, 50, {37}, at::kLong);
  targets.index_put_({torch::tensor({0, 7, 36})}, -100);  // ignored rows
  for (const int64_t chunk : {0, 1, 5, 37, 64}) {
    const at::Tensor h1 = h0.clone().set_requires_grad(true), w1 = w0.clone().set_requires_grad(true);
    const at::Tensor h2 = h0.clone().set_requires_grad(true), w2 = w0.clone().set_requires_grad(true);
    const at::Tensor want = torch::nn::functional::cross_entropy(torch::matmul(h1, w1.t()), targets);
    const at::Tensor got = ChunkedCrossEntropy(h2, w2, targets, chunk);
    EXPECT_NEAR(got.item<double>(), want.item<double>(), 1e-10) << "chunk " << chunk;
    (want * 0.7).backward();  // a scaled loss (gradient accumulation, loss scaling)
    (got * 0.7).backward();
    EXPECT_LT((h1.grad() - h2.grad()).abs().max().item<double>(), 1e-10) << "chunk " << chunk;
    EXPECT_LT((w1.grad() - w2.grad()).abs().max().item<double>(), 1e-10) << "chunk " << chunk;
    EXPECT_EQ(h2.grad().select(0, 7).abs().max().item<double>(), 0.0) << "an ignored row has no gradient";
  }
  EXPECT_EQ(LossChunkRows(1024, 512, 8192), 64);  // Liger's rule: 1024 / ceil(8192 / 512)
  EXPECT_EQ(LossChunkRows(16384, 2048, 32000), 1024);
}

TEST(ChunkedCrossEntropy, Bf16WithinItsRounding) {
  torch::manual_seed(6);
  const at::Tensor h = torch::randn({64, 32}) * 0.5, w = torch::randn({300, 32}) * 0.2;
  const at::Tensor targets = torch::randint(0, 300, {64}, at::kLong);
  const double want =
      torch::nn::functional::cross_entropy(torch::matmul(h.to(at::kDouble), w.to(at::kDouble).t()), targets)
          .item<double>();
  const double got = ChunkedCrossEntropy(h.to(at::kBFloat16), w.to(at::kBFloat16), targets, 16).item<double>();
  EXPECT_NEAR(got, want, 2e-2 * want);
  EXPECT_GT(std::abs(got - want), 0.0) << "bf16 products round";
}

// ---- the llama model's fused ops ----

std::string FusedTinyLlamaDir(const TempDir& dir, bool tied = false) {
  std::ofstream(dir.path() + "/config.json")
      << R"({"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 96, "hidden_size": 32,
             "intermediate_size": 56, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
             "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
             "tie_word_embeddings": )"
      << (tied ? "true" : "false") << "}";
  return dir.path();
}

JobSpec FusedLlamaJob(const std::string& config_dir) {
  JobSpec spec;
  spec.model.kind = ModelKind::kLlama;
  spec.model.config = config_dir;
  spec.model.context = 16;
  spec.data.batch_size = 4;
  spec.optimizer.kind = OptimizerKind::kAdamW;
  spec.optimizer.lr = 3e-3;
  spec.optimizer.weight_decay = 0.01;
  spec.checkpoint.save_final = false;
  return spec;
}

JobSpec Unfused(JobSpec spec) {
  spec.fused.optimizer = spec.fused.rms_norm = spec.fused.chunked_loss = false;
  return spec;
}

TEST(FusedOps, RmsNormEqualsItsFormulaInFloat64) {
  torch::manual_seed(2);
  const at::Tensor x = torch::randn({3, 5, 32}, at::kDouble), w = torch::randn({32}, at::kDouble);
  const at::Tensor want = w * (x * torch::rsqrt(x.pow(2).mean(-1, true) + 1e-5));
  EXPECT_LT((at::rms_norm(x, {32}, w, 1e-5) - want).abs().max().item<double>(), 1e-12);
}

// Every gradient of the model through the chunked loss is the one through
// the whole logits' loss (float64, the fused model on both sides).
TEST(FusedLlama, TheChunkedLossGivesTheWholeLossGradientsInFloat64) {
  for (const bool tied : {false, true}) {
    TempDir dir;
    const JobSpec spec = FusedLlamaJob(FusedTinyLlamaDir(dir, tied));
    auto whole = BuildModel(spec.model, 7);
    auto chunked = BuildModel(spec.model, 7);
    UseFusedKernels(spec, whole.get());
    UseFusedKernels(spec, chunked.get());
    ASSERT_TRUE(chunked->projection_left_to_loss());
    whole->to(at::kDouble);
    chunked->to(at::kDouble);
    torch::manual_seed(1);
    const at::Tensor tokens = torch::randint(0, 96, {3, 16}, at::kLong);
    const at::Tensor targets = torch::randint(0, 96, {3, 16}, at::kLong).reshape({-1});
    const at::Tensor h1 = whole->forward(tokens), h2 = chunked->forward(tokens);
    ASSERT_EQ(h2.size(-1), 32) << "the last stage stops before the projection";
    const at::Tensor logits = torch::matmul(h1.reshape({-1, 32}), whole->output_projection().t());
    const at::Tensor want = torch::nn::functional::cross_entropy(logits, targets);
    const at::Tensor got = ChunkedCrossEntropy(h2.reshape({-1, 32}), chunked->output_projection(), targets, 7);
    EXPECT_NEAR(got.item<double>(), want.item<double>(), 1e-10);
    want.backward();
    got.backward();
    auto b = chunked->named_parameters();
    for (const auto& p : whole->named_parameters()) {
      const at::Tensor& g = b[p.key()].grad();
      ASSERT_TRUE(g.defined()) << p.key();
      EXPECT_LT((p.value().grad() - g).abs().max().item<double>(), 1e-10) << p.key() << (tied ? " (tied)" : "");
    }
  }
}

// The fused model (at::rms_norm, the chunked loss) against the model as
// transformers writes it, in float32 (its RMSNorm computes in float32).
TEST(FusedLlama, EqualsTheUnfusedModelInFloat32) {
  TempDir dir;
  const JobSpec spec = FusedLlamaJob(FusedTinyLlamaDir(dir));
  auto plain = BuildModel(spec.model, 7);
  auto fused = BuildModel(spec.model, 7);
  UseFusedKernels(Unfused(spec), plain.get());
  UseFusedKernels(spec, fused.get());
  ASSERT_FALSE(plain->projection_left_to_loss());
  torch::manual_seed(1);
  const at::Tensor tokens = torch::randint(0, 96, {3, 16}, at::kLong);
  const at::Tensor targets = torch::randint(0, 96, {3, 16}, at::kLong).reshape({-1});
  const at::Tensor logits = plain->forward(tokens);
  const at::Tensor hidden = fused->forward(tokens);
  const at::Tensor fused_logits = torch::matmul(hidden, fused->output_projection().t());
  EXPECT_TRUE(torch::allclose(fused_logits, logits, 1e-5, 1e-6)) << (fused_logits - logits).abs().max().item<double>();
  const at::Tensor want = torch::nn::functional::cross_entropy(logits.reshape({-1, 96}), targets);
  const at::Tensor got = ChunkedCrossEntropy(hidden.reshape({-1, 32}), fused->output_projection(), targets);
  EXPECT_NEAR(got.item<double>(), want.item<double>(), 1e-5 * want.item<double>());
  want.backward();
  got.backward();
  auto b = fused->named_parameters();
  for (const auto& p : plain->named_parameters()) {
    const at::Tensor& g = b[p.key()].grad();
    const double scale = p.value().grad().abs().max().item<double>();
    EXPECT_TRUE(torch::allclose(g, p.value().grad(), 1e-4, 1e-4 * scale)) << p.key();
  }
}

TEST(FusedLlama, ReportsTheAttentionKernelAndHonoursAForcedOne) {
  TempDir dir;
  JobSpec spec = FusedLlamaJob(FusedTinyLlamaDir(dir));
  const at::Tensor tokens = torch::randint(0, 96, {2, 16}, at::kLong);
  for (const auto& [backend, want] : std::vector<std::pair<AttentionBackend, int>>{
           {AttentionBackend::kMath, 0}, {AttentionBackend::kFlash, 1}, {AttentionBackend::kAuto, 1}}) {
    spec.fused.attention = backend;
    auto model = BuildModel(spec.model, 7);
    EXPECT_EQ(model->attention_backend(), -1) << "before the first forward";
    UseFusedKernels(spec, model.get());
    model->forward(tokens);
    EXPECT_EQ(model->attention_backend(), want) << AttentionBackendName(backend);
  }
  EXPECT_STREQ(SdpaBackendName(1), "flash");
  EXPECT_STREQ(SdpaBackendName(-1), "none");
}

// ---- the trainer: every piece on against every piece off ----

struct FusedRun {
  std::vector<double> losses;
  double flops_per_sample = 0;
};

FusedRun TrainFusedOrNot(const JobSpec& spec, int steps) {
  FusedRun run;
  RunTrainers(spec, 1, [&](int, Trainer& t) {
    for (int i = 0; i < steps; ++i) run.losses.push_back(t.Step());
    run.flops_per_sample = t.parallel_model().forward_flops_per_sample();
  });
  return run;
}

TEST(FusedTrainer, TwoHundredStepsWithinOnePercentOfTheUnfusedCurve) {
  TempDir dir;
  JobSpec spec = FusedLlamaJob(FusedTinyLlamaDir(dir));
  spec.max_steps = 200;
  const FusedRun fused = TrainFusedOrNot(spec, 200);
  const FusedRun plain = TrainFusedOrNot(Unfused(spec), 200);
  double worst = 0;
  for (int i = 0; i < 200; ++i) worst = std::max(worst, std::abs(fused.losses[i] / plain.losses[i] - 1));
  EXPECT_LT(worst, 0.01);
  EXPECT_LT(fused.losses.back(), 0.9 * fused.losses.front()) << "it learns";
  // The projection the loss applies is counted as the model's FLOPs (a
  // seventh of them here); the norms' elementwise counts differ a little.
  EXPECT_NEAR(fused.flops_per_sample, plain.flops_per_sample, 0.01 * plain.flops_per_sample);
}

TEST(FusedTrainer, ACheckpointOfTheFusedPathResumesUnfused) {
  TempDir dir, project;
  JobSpec spec = FusedLlamaJob(FusedTinyLlamaDir(dir));
  spec.checkpoint.project_dir = project.path();
  std::string saved;
  double fused_next = 0;
  RunTrainers(spec, 1, [&](int, Trainer& t) {
    for (int i = 0; i < 4; ++i) t.Step();
    saved = t.Checkpoint(CheckpointType::kFull, "request", 0).path;
    t.WaitForCheckpoints();
    fused_next = t.Step();
  });
  ASSERT_FALSE(saved.empty());
  double plain_next = 0;
  RunTrainers(Unfused(spec), 1, [&](int, Trainer& t) {
    t.Resume(saved);
    EXPECT_EQ(t.step(), 4);
    plain_next = t.Step();
  });
  EXPECT_NEAR(plain_next, fused_next, 1e-4 * fused_next);
}

// fused.cuda_graph on where the step cannot be captured (here: the CPU) is
// refused when the trainer is built, not run uncaptured; auto runs it.
TEST(FusedTrainer, ACapturedStepWhereItCannotApplyIsRefused) {
  TempDir dir;
  JobSpec spec = FusedLlamaJob(FusedTinyLlamaDir(dir));
  spec.fused.cuda_graph = StepCapture::kOn;
  try {
    Trainer t(spec, 0, 1, DistContext{}, nullptr, nullptr);
    ADD_FAILURE() << "built";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "fused.cuda_graph on: the step cannot be captured: device is cpu; a CUDA graph holds CUDA work");
  }
  spec.fused.cuda_graph = StepCapture::kAuto;
  Trainer t(spec, 0, 1, DistContext{}, nullptr, nullptr);
  EXPECT_TRUE(std::isfinite(t.Step()));
}

TEST(FusedTrainer, DdpWithTheChunkedLossTrainsAsWithout) {
  TempDir dir;
  JobSpec spec = FusedLlamaJob(FusedTinyLlamaDir(dir, /*tied=*/true));
  spec.num_processes = 2;
  spec.distributed_type = DistributedType::kDdp;
  spec.ddp.find_unused_parameters = true;  // walks the graph from the loss
  std::vector<at::Tensor> weights[2];
  for (const bool fused : {false, true}) {
    RunTrainers(fused ? spec : Unfused(spec), 2, [&](int r, Trainer& t) {
      for (int i = 0; i < 3; ++i) t.Step();
      if (r == 0) {
        for (const at::Tensor& p : t.model().parameters()) weights[fused].push_back(p.detach().clone());
      }
    });
  }
  ASSERT_EQ(weights[0].size(), weights[1].size());
  for (size_t i = 0; i < weights[0].size(); ++i) {
    EXPECT_TRUE(torch::allclose(weights[0][i], weights[1][i], 1e-4, 1e-5)) << "parameter " << i;
  }
}

}  // namespace
}  // namespace trainyard
