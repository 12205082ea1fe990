// The training step over real Gloo (ranks as threads): gradient
// accumulation, clipping, schedules, mixed precision and loss scaling,
// evaluation.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "tests/test_util.h"
#include "tests/worker/trainer_test_util.h"
#include "worker/models/optimizer.h"
#include "worker/parallel/ddp.h"
#include "worker/parallel/fsdp.h"
#include "worker/train/loss_scaler.h"

namespace trainyard {
namespace {

JobSpec AsFsdp(JobSpec s) {
  s.distributed_type = DistributedType::kFsdp;
  s.fsdp.sharding_strategy = ShardingStrategy::kFullShard;
  s.fsdp.auto_wrap_policy = WrapPolicy::kSizeBased;
  s.fsdp.min_num_params = 1000;
  return s;
}

// Full parameters of rank 0 after Run().
std::vector<at::Tensor> Train(const JobSpec& spec, int world) {
  std::vector<at::Tensor> out;
  RunTrainers(spec, world, [&](int r, Trainer& t) {
    t.Run();
    std::vector<at::Tensor> full = t.fsdp() != nullptr ? t.fsdp()->FullParameters() : t.model().parameters();
    if (r == 0) {
      for (const at::Tensor& p : full) out.push_back(p.detach().clone());
    }
  });
  return out;
}

void ExpectClose(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b, const std::string& what,
                 double rtol = 1e-5, double atol = 1e-6) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(torch::allclose(a[i], b[i], rtol, atol))
        << what << " parameter " << i << " max diff " << (a[i] - b[i]).abs().max().item<double>();
  }
}

TEST(Accumulation, MicroStepsEqualOneLargeBatch) {
  for (bool fsdp : {false, true}) {
    JobSpec micro = Mlp(4, 4), large = Mlp(16, 1);
    if (fsdp) {
      micro = AsFsdp(micro);
      large = AsFsdp(large);
    }
    ExpectClose(Train(micro, 2), Train(large, 2), fsdp ? "FSDP 4x4 vs 16" : "DDP 4x4 vs 16");
  }
}

// Counting what the comm hook is handed: accumulating micro-steps send
// nothing, so 4 micro-steps per step cost what 1 does.
TEST(Accumulation, NoCommunicationOnAccumulatingMicroSteps) {
  std::vector<int64_t> wire(2);
  for (int accum : {1, 4}) {
    JobSpec spec = Mlp(4, accum);
    spec.ddp.comm_hook = CommHookType::kFp16;
    RunTrainers(spec, 2, [&](int r, Trainer& t) {
      t.Run();
      if (r == 0) wire[accum == 1 ? 0 : 1] = t.ddp()->comm_stats().wire_bytes.load();
    });
  }
  EXPECT_GT(wire[0], 0);
  EXPECT_EQ(wire[1], wire[0]);
}

// Clipping by value equals clipping the full-batch gradient of one process
// (2 ranks x b samples = the same 2b samples at world 1), and does clip.
TEST(Clipping, ByValueMatchesTheFullBatchReference) {
  for (bool fsdp : {false, true}) {
    JobSpec two = Mlp(8, 1), one = Mlp(16, 1), unclipped = Mlp(8, 1);
    two.clip_grad_value = one.clip_grad_value = 1e-3;
    if (fsdp) {
      two = AsFsdp(two);
      one = AsFsdp(one);
      unclipped = AsFsdp(unclipped);
    }
    const auto clipped = Train(two, 2);
    ExpectClose(clipped, Train(one, 1), fsdp ? "FSDP clip_grad_value" : "DDP clip_grad_value");
    const auto free = Train(unclipped, 2);
    double diff = 0;
    for (size_t i = 0; i < free.size(); ++i) diff = std::max(diff, (free[i] - clipped[i]).abs().max().item<double>());
    EXPECT_GT(diff, 1e-3) << "clipping changed nothing";
  }
}

TEST(Clipping, ByNormMatchesTheFullBatchReference) {
  JobSpec two = Mlp(8, 1), one = Mlp(16, 1);
  two.max_grad_norm = one.max_grad_norm = 0.05;
  ExpectClose(Train(two, 2), Train(one, 1), "DDP max_grad_norm");
  ExpectClose(Train(AsFsdp(two), 2), Train(AsFsdp(one), 1), "FSDP max_grad_norm");
}

TEST(Schedules, ClosedForms) {
  const double kPi = std::acos(-1.0);
  SchedulerSpec s;
  s.warmup_steps = 10;
  for (SchedulerKind kind : {SchedulerKind::kConstant, SchedulerKind::kLinear, SchedulerKind::kCosine}) {
    s.kind = kind;
    EXPECT_DOUBLE_EQ(LearningRateFactor(s, 0, 100), 0.0);
    EXPECT_DOUBLE_EQ(LearningRateFactor(s, 5, 100), 0.5);
    EXPECT_DOUBLE_EQ(LearningRateFactor(s, 10, 100), 1.0);
  }
  s.kind = SchedulerKind::kConstant;
  EXPECT_DOUBLE_EQ(LearningRateFactor(s, 77, 100), 1.0);
  s.kind = SchedulerKind::kLinear;
  EXPECT_DOUBLE_EQ(LearningRateFactor(s, 55, 100), 45.0 / 90.0);
  EXPECT_DOUBLE_EQ(LearningRateFactor(s, 100, 100), 0.0);
  s.kind = SchedulerKind::kCosine;
  EXPECT_NEAR(LearningRateFactor(s, 55, 100), 0.5 * (1 + std::cos(kPi * 45.0 / 90.0)), 1e-15);
  EXPECT_NEAR(LearningRateFactor(s, 70, 100), 0.5 * (1 + std::cos(kPi * 60.0 / 90.0)), 1e-15);
  s.warmup_steps = 0;
  EXPECT_DOUBLE_EQ(LearningRateFactor(s, 0, 100), 1.0);
}

TEST(Schedules, AppliedEachStepAndRestoredOnResume) {
  TempDir a, b;
  JobSpec spec = Mlp(8, 1);
  spec.max_steps = 8;
  spec.scheduler.kind = SchedulerKind::kCosine;
  spec.scheduler.warmup_steps = 3;
  spec.checkpoint.project_dir = a.path();
  Lrs straight;
  RunTrainers(
      spec, 2, [&](int, Trainer& t) { t.Run(); }, &straight);
  for (int64_t step = 1; step <= 8; ++step) {
    EXPECT_DOUBLE_EQ(straight.lr[step], spec.optimizer.lr * LearningRateFactor(spec.scheduler, step - 1, 8)) << step;
  }
  spec.checkpoint.project_dir = b.path();
  spec.max_steps = 8;
  RunTrainers(spec, 2, [&](int, Trainer& t) {
    for (int i = 0; i < 4; ++i) t.Step();
    if (!t.Checkpoint(CheckpointType::kFull).ok) throw std::runtime_error("checkpoint failed");
  });
  spec.checkpoint.resume_from = "latest";
  Lrs resumed;
  RunTrainers(
      spec, 2, [&](int, Trainer& t) { t.Run(); }, &resumed);
  ASSERT_EQ(resumed.lr.size(), 4u);
  for (int64_t step = 5; step <= 8; ++step) EXPECT_DOUBLE_EQ(resumed.lr[step], straight.lr[step]) << step;
}

TEST(MixedPrecision, Bf16AutocastTrainsAndKeepsFp32Parameters) {
  JobSpec spec = Mlp(16, 1);
  spec.max_steps = 40;
  // SGD: an update is lr x gradient, so the weights carry the gradients'
  // precision (Adam's normalised steps would amplify bf16's rounding noise).
  spec.optimizer.kind = OptimizerKind::kSgd;
  spec.optimizer.lr = 0.05;
  spec.optimizer.momentum = 0.9;
  spec.mixed_precision = MixedPrecision::kBf16;
  Lrs bf16, fp32;
  std::vector<at::Tensor> with, without;
  RunTrainers(
      spec, 2,
      [&](int r, Trainer& t) {
        t.Run();
        for (const at::Tensor& p : t.model().parameters()) {
          EXPECT_EQ(p.scalar_type(), at::kFloat);
          if (r == 0) with.push_back(p.detach().clone());
        }
      },
      &bf16);
  spec.mixed_precision = MixedPrecision::kNo;
  RunTrainers(
      spec, 2,
      [&](int r, Trainer& t) {
        t.Run();
        if (r == 0) without = t.model().parameters();
      },
      &fp32);
  const auto [first, last] = FirstLast(bf16.loss);
  EXPECT_LT(last, 0.8 * first);
  // bf16 compute rounds differently: the runs are close, not equal. Close
  // is measured against how far training moved the weights: the bf16 run's
  // weights must differ from the fp32 run's by a small part of that.
  const auto init = BuildModel(spec.model, spec.seed)->parameters();
  double diff = 0, moved = 0;
  for (size_t i = 0; i < with.size(); ++i) {
    diff = std::max(diff, (with[i] - without[i]).abs().max().item<double>());
    moved = std::max(moved, (without[i] - init[i]).abs().max().item<double>());
  }
  std::cout << "bf16 vs fp32: " << diff << " after the weights moved " << moved << "\n";
  EXPECT_GT(diff, 0.0);
  EXPECT_LT(diff, 0.1 * moved) << "bf16 vs fp32 " << diff << ", training moved the weights by " << moved;
}

TEST(MixedPrecision, LossScalerSkipsOnInfAndAdjustsTheScale) {
  LossScalerOptions o;
  o.init_scale = 1024;
  o.growth_interval = 3;
  LossScaler scaler(o);
  at::Tensor g = at::full({4}, 2048.0);
  EXPECT_TRUE(scaler.UnscaleAndCheck({g}, {}));
  EXPECT_TRUE(torch::equal(g, at::full({4}, 2.0)));  // divided by the scale
  scaler.Update(true);
  scaler.Update(true);
  EXPECT_EQ(scaler.scale(), 1024);
  scaler.Update(true);
  EXPECT_EQ(scaler.scale(), 2048);  // grown after 3 finite steps
  at::Tensor bad = at::ones({3});
  bad[1] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(scaler.UnscaleAndCheck({at::Tensor(), bad}, {}));
  scaler.Update(false);
  EXPECT_EQ(scaler.scale(), 1024);
  EXPECT_EQ(scaler.skipped_steps(), 1);
  at::Tensor nan = at::full({2}, std::nan(""));
  EXPECT_FALSE(scaler.UnscaleAndCheck({nan}, {}));
  LossScaler restored(o);
  restored.LoadState(scaler.State());
  EXPECT_EQ(restored.scale(), 1024);
  EXPECT_EQ(restored.skipped_steps(), 1);
}

// Inf on one rank only: every rank skips the step and backs off, so the
// replicas never diverge; the next finite step goes through on all.
TEST(MixedPrecision, InfOnOneRankMakesEveryRankSkip) {
  LossScalerOptions o;
  o.init_scale = 1024;
  std::vector<std::vector<bool>> finite(2);
  std::vector<double> scales(2);
  std::vector<int64_t> skipped(2);
  RunRanks(2, [&](int rank, c10::intrusive_ptr<c10d::ProcessGroup> pg) {
    LossScaler scaler(o);
    for (int step = 0; step < 2; ++step) {
      at::Tensor g = at::full({8}, 4096.0);
      if (step == 0 && rank == 1) g[3] = std::numeric_limits<float>::infinity();
      const bool ok = scaler.UnscaleAndCheck({g}, pg);
      scaler.Update(ok);
      finite[rank].push_back(ok);
    }
    scales[rank] = scaler.scale();
    skipped[rank] = scaler.skipped_steps();
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(finite[r], (std::vector<bool>{false, true})) << "rank " << r;
    EXPECT_EQ(scales[r], 512) << "rank " << r << " did not back off";
    EXPECT_EQ(skipped[r], 1) << "rank " << r;
  }
}

// fp16 on CPU: the scaler runs around fp32 compute.
TEST(MixedPrecision, Fp16LossScalingTrainsOverRanks) {
  JobSpec spec = Mlp(16, 1);
  spec.max_steps = 40;
  spec.data.num_samples = 64;  // a small set the model can fit
  spec.optimizer.kind = OptimizerKind::kAdamW;
  spec.optimizer.lr = 3e-3;
  spec.mixed_precision = MixedPrecision::kFp16;
  Lrs m;
  RunTrainers(
      spec, 2, [&](int, Trainer& t) { t.Run(); }, &m);
  const auto [first, last] = FirstLast(m.loss);
  EXPECT_LT(last, 0.8 * first);
}

TEST(Evaluation, HeldOutLossEveryNSteps) {
  JobSpec spec = Mlp(16, 1);
  spec.max_steps = 40;
  spec.eval_every_steps = 10;
  spec.eval_batches = 4;
  spec.optimizer.kind = OptimizerKind::kAdamW;
  spec.optimizer.lr = 3e-3;
  Lrs m;
  double direct = 0;
  RunTrainers(
      spec, 2,
      [&](int r, Trainer& t) {
        t.Run();
        const double e = t.Evaluate();
        if (r == 0) direct = e;
      },
      &m);
  for (int64_t step = 1; step <= 40; ++step) {
    EXPECT_EQ(std::isnan(m.eval[step]), step % 10 != 0) << step;
  }
  EXPECT_LT(m.eval[40], m.eval[10]);
  EXPECT_DOUBLE_EQ(direct, m.eval[40]);  // the same batches each time, nothing changed since
}

}  // namespace
}  // namespace trainyard
