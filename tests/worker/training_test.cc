// The training loop over real Gloo (ranks as threads): gradient
// accumulation, clipping, schedules, mixed precision and loss scaling,
// evaluation, every model, the TorchScript path, and the data readers.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <zlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <numeric>
#include <set>

#include "common/model_layers.h"
#include "tests/test_util.h"
#include "tests/worker/trainer_test_util.h"
#include "worker/data.h"
#include "worker/data_loader.h"
#include "worker/ddp.h"
#include "worker/distributed_sampler.h"
#include "worker/fsdp.h"
#include "worker/job_data.h"
#include "worker/loss_scaler.h"
#include "worker/mnist_dataset.h"
#include "worker/models.h"
#include "worker/optimizer.h"
#include "worker/safetensors.h"
#include "worker/synthetic_dataset.h"
#include "worker/token_file.h"

namespace trainyard {
namespace {
namespace fs = std::filesystem;

JobSpec Mlp(int64_t batch, int accum) {
  JobSpec s;
  s.model.hidden = {32, 16};
  s.data.num_samples = 512;
  s.data.batch_size = batch;
  s.gradient_accumulation_steps = accum;
  s.optimizer.kind = OptimizerKind::kSgd;
  s.optimizer.lr = 0.1;
  s.optimizer.momentum = 0.9;
  s.max_steps = 3;
  s.ddp.intra_host_transport = IntraHostTransport::kProcessGroup;
  s.checkpoint.save_final = false;
  return s;
}

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

// Mean of the first and of the last three losses.
std::pair<double, double> FirstLast(const std::vector<double>& loss) {
  const size_t n = loss.size();
  return {(loss[0] + loss[1] + loss[2]) / 3, (loss[n - 1] + loss[n - 2] + loss[n - 3]) / 3};
}

struct Lrs : MetricsSink {
  std::map<int64_t, double> lr, eval;
  std::vector<double> loss;
  void OnStep(const StepMetrics& m) override {
    lr[m.step] = m.learning_rate;
    eval[m.step] = m.eval_loss;
    loss.push_back(m.loss);
  }
};

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

// Every model trains (loss falls) under DDP at 2 ranks, with gradients,
// buffers and the control word through shared memory (the default on one
// host) and, for the ResNet's BatchNorm buffers, through Gloo too.
TEST(Models, EachTrainsUnderDdp) {
  const std::vector<std::pair<ModelKind, IntraHostTransport>> runs = {
      {ModelKind::kMlp, IntraHostTransport::kAuto},
      {ModelKind::kCnn, IntraHostTransport::kAuto},
      {ModelKind::kResNet, IntraHostTransport::kAuto},
      {ModelKind::kResNet, IntraHostTransport::kProcessGroup},
      {ModelKind::kGpt, IntraHostTransport::kAuto}};
  for (const auto& [kind, transport] : runs) {
    JobSpec spec;
    spec.model.kind = kind;
    spec.model.channels = 8;
    spec.model.layers = 2;
    spec.model.width = 32;
    spec.model.context = 16;
    spec.model.vocab = 64;
    spec.data.batch_size = kind == ModelKind::kGpt ? 4 : 16;
    spec.data.num_samples = 64;  // a small set each model can fit
    spec.optimizer.lr = 3e-3;
    spec.max_steps = kind == ModelKind::kResNet ? 25 : 40;
    spec.ddp.intra_host_transport = transport;
    Lrs m;
    std::vector<std::vector<at::Tensor>> buffers(2);
    RunTrainers(
        spec, 2,
        [&](int r, Trainer& t) {
          t.Run();
          for (const at::Tensor& b : t.model().buffers()) buffers[r].push_back(b.clone());
        },
        &m);
    const auto [first, last] = FirstLast(m.loss);
    EXPECT_LT(last, 0.8 * first) << ModelKindName(kind) << " " << first << " -> " << last;
    // broadcast_buffers: BatchNorm statistics are rank 0's before each
    // forward, so after the last step they differ by one update at most;
    // the counters are equal.
    ASSERT_EQ(buffers[0].size(), buffers[1].size());
    if (kind == ModelKind::kResNet) {
      EXPECT_FALSE(buffers[0].empty());
      for (size_t i = 0; i < buffers[0].size(); ++i) {
        if (buffers[0][i].scalar_type() == at::kLong) EXPECT_TRUE(torch::equal(buffers[0][i], buffers[1][i]));
      }
    }
  }
}

std::string Python();

// Initial weights made by PyTorch (tests/fixtures/init_weights.py) load through
// model.init_from: the loss of the loaded model on a fixed batch equals
// PyTorch's loss of the same module on the same batch — for a plain file, a
// Hugging Face sharded directory under a "model." prefix (one process, DDP
// and FSDP FULL_SHARD on 2 ranks, each rank reading its shard), and a
// TorchScript module given other weights than its own.
class InitFrom : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    const std::string cmd = Python() + " " + TRAINYARD_SOURCE_DIR + "/tests/fixtures/init_weights.py " + dir_->path() +
                            " 2> " + dir_->path() + "/python.log";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  static void TearDownTestSuite() { delete dir_; }

  static double Expected(const std::string& file) {
    std::ifstream in(dir_->path() + "/" + file);
    double v = 0;
    in >> v;
    return v;
  }
  // The loss of the trainer's model on a fixed batch (collective under
  // FSDP); language models' logits [B, T, V] against targets [B, T].
  static double Loss(Trainer& t, const std::string& batch = "batch.safetensors") {
    torch::NoGradGuard no_grad;
    const std::string path = dir_->path() + "/" + batch;
    const SafetensorsHeader h = ReadSafetensorsHeader(path);
    const at::Tensor inputs = ReadSafetensor(path, h, "inputs"), targets = ReadSafetensor(path, h, "targets");
    at::Tensor out = t.fsdp() ? t.fsdp()->Forward(inputs) : t.model().forward(inputs);
    if (t.fsdp()) t.fsdp()->FinishBackward();
    return torch::nn::functional::cross_entropy(out.reshape({-1, out.size(-1)}), targets.reshape({-1})).item<double>();
  }
  static JobSpec Mlp(const std::string& init_from, const std::string& prefix = "") {
    JobSpec spec;
    spec.model.hidden = {32, 16};
    spec.model.init_from = init_from;
    spec.model.init_from_prefix = prefix;
    spec.max_steps = 1;
    spec.ddp.intra_host_transport = IntraHostTransport::kProcessGroup;
    return spec;
  }
  static TempDir* dir_;
};
TempDir* InitFrom::dir_ = nullptr;

TEST_F(InitFrom, TheFirstLossIsPyTorchsOnTheSameBatch) {
  const double want = Expected("loss.txt");
  struct Case {
    std::string name;
    JobSpec spec;
    int world;
  };
  std::vector<Case> cases = {{"file", Mlp(dir_->path() + "/mlp.safetensors"), 1},
                             {"sharded dir, prefix", Mlp(dir_->path() + "/prefixed", "model."), 1},
                             {"DDP", Mlp(dir_->path() + "/mlp.safetensors"), 2}};
  JobSpec fsdp = Mlp(dir_->path() + "/prefixed", "model.");
  fsdp.distributed_type = DistributedType::kFsdp;
  fsdp.fsdp.sharding_strategy = ShardingStrategy::kFullShard;
  fsdp.fsdp.auto_wrap_policy = WrapPolicy::kTransformerBased;
  fsdp.fsdp.transformer_layer_cls_to_wrap = {"Linear"};
  cases.push_back({"FSDP FULL_SHARD", fsdp, 2});
  for (Case& c : cases) {
    c.spec.num_processes = c.world;
    if (c.world == 1) c.spec.distributed_type = DistributedType::kNo;
    std::vector<double> loss(c.world);
    std::vector<int64_t> held(c.world);
    RunTrainers(c.spec, c.world, [&](int r, Trainer& t) {
      for (const at::Tensor& p : t.fsdp() ? t.fsdp()->ShardParameters() : t.model().parameters()) {
        held[r] += p.numel();
      }
      loss[r] = Loss(t);
    });
    for (int r = 0; r < c.world; ++r) EXPECT_NEAR(loss[r], want, 1e-5 * std::abs(want)) << c.name << " rank " << r;
    if (c.name == "FSDP FULL_SHARD") EXPECT_LT(held[0], 784 * 32) << "each rank holds a shard";
  }
  // Random initialization is not it: the check can fail.
  JobSpec fresh = Mlp("");
  fresh.distributed_type = DistributedType::kNo;
  RunTrainers(fresh, 1, [&](int, Trainer& t) { EXPECT_GT(std::abs(Loss(t) - want), 1e-3); });
}

// The worker's cnn and gpt against PyTorch reimplementations with the same
// state-dict names (tests/fixtures/init_weights.py), gpt also under FSDP
// FULL_SHARD on 2 ranks with each Block its own unit.
TEST_F(InitFrom, CnnAndGptGiveTheLossOfPyTorchsReimplementations) {
  JobSpec cnn;
  cnn.model.kind = ModelKind::kCnn;
  cnn.model.init_from = dir_->path() + "/cnn.safetensors";
  JobSpec gpt;
  gpt.model.kind = ModelKind::kGpt;
  gpt.model.layers = 2;
  gpt.model.width = 32;
  gpt.model.heads = 4;
  gpt.model.context = 16;
  gpt.model.vocab = 64;
  gpt.model.init_from = dir_->path() + "/gpt.safetensors";
  JobSpec gpt_fsdp = gpt;
  gpt_fsdp.distributed_type = DistributedType::kFsdp;
  gpt_fsdp.fsdp.sharding_strategy = ShardingStrategy::kFullShard;
  gpt_fsdp.fsdp.auto_wrap_policy = WrapPolicy::kTransformerBased;
  gpt_fsdp.fsdp.transformer_layer_cls_to_wrap = {"Block"};
  struct Case {
    const char* name;
    JobSpec spec;
    int world;
  };
  for (Case c : {Case{"cnn", cnn, 1}, Case{"gpt", gpt, 1}, Case{"gpt FSDP", gpt_fsdp, 2}}) {
    c.spec.max_steps = 1;
    c.spec.num_processes = c.world;
    c.spec.ddp.intra_host_transport = IntraHostTransport::kProcessGroup;
    if (c.world == 1) c.spec.distributed_type = DistributedType::kNo;
    const std::string model = c.spec.model.kind == ModelKind::kCnn ? "cnn" : "gpt";
    const double want = Expected(model + "_loss.txt");
    std::vector<double> loss(c.world);
    RunTrainers(c.spec, c.world, [&](int r, Trainer& t) { loss[r] = Loss(t, model + "_batch.safetensors"); });
    for (int r = 0; r < c.world; ++r) EXPECT_NEAR(loss[r], want, 1e-5 * std::abs(want)) << c.name << " rank " << r;
    // Its own initialization gives another loss: the check can fail.
    c.spec.model.init_from.clear();
    RunTrainers(c.spec, c.world, [&](int r, Trainer& t) {
      const double own = Loss(t, model + "_batch.safetensors");
      if (r == 0) EXPECT_GT(std::abs(own - want), 1e-3) << c.name;
    });
  }
}

TEST_F(InitFrom, ATorchScriptModuleTakesOtherWeights) {
  JobSpec spec;
  spec.model.kind = ModelKind::kTorchScript;
  spec.model.path = dir_->path() + "/torchscript.pt";
  spec.model.init_from = dir_->path() + "/torchscript.safetensors";
  spec.max_steps = 1;
  spec.distributed_type = DistributedType::kNo;
  const double want = Expected("torchscript_loss.txt");
  ASSERT_GT(want, 0);
  const std::string file = spec.model.init_from;
  const SafetensorsHeader h = ReadSafetensorsHeader(file);
  ASSERT_EQ(h.tensors.size(), 4u);  // fc1 and fc2, weight and bias
  RunTrainers(spec, 1, [&](int, Trainer& t) {
    // Every parameter is the file's tensor of its name, bit for bit.
    const auto params = t.model().named_parameters();
    EXPECT_EQ(params.size(), h.tensors.size());
    for (const SafetensorsEntry& e : h.tensors) {
      const at::Tensor* p = params.find(e.spec.name);
      ASSERT_NE(p, nullptr) << e.spec.name;
      EXPECT_TRUE(torch::equal(*p, ReadSafetensor(file, h, e.spec.name))) << e.spec.name;
    }
    EXPECT_NEAR(Loss(t), want, 1e-5 * want);
  });
  // The module's own weights (those saved in the .pt) give another loss:
  // the check above can fail.
  spec.model.init_from.clear();
  RunTrainers(spec, 1, [&](int, Trainer& t) { EXPECT_GT(std::abs(Loss(t) - want), 1e-3); });
}

TEST_F(InitFrom, EachMismatchIsNamed) {
  auto error = [&](JobSpec spec) -> std::string {
    spec.distributed_type = DistributedType::kNo;
    try {
      Trainer t(spec, 0, 1, DistContext{}, nullptr, nullptr);
    } catch (const std::exception& e) {
      return e.what();
    }
    return "";
  };
  // Missing and unexpected: the file's names carry a prefix the spec does not remove.
  const std::string prefixed = error(Mlp(dir_->path() + "/prefixed"));
  EXPECT_NE(prefixed.find("missing: fc0.weight, fc0.bias"), std::string::npos) << prefixed;
  EXPECT_NE(prefixed.find("unexpected: model.fc0.bias"), std::string::npos) << prefixed;
  EXPECT_NE(prefixed.find("init_from_prefix"), std::string::npos) << prefixed;
  // Wrong shape: another hidden width.
  JobSpec wide = Mlp(dir_->path() + "/mlp.safetensors");
  wide.model.hidden = {48, 16};
  const std::string shape = error(wide);
  EXPECT_NE(shape.find("fc0.weight is F32[32, 784] in the file, F32[48, 784] in the model"), std::string::npos)
      << shape;
  // Another precision: the same tensors in bf16 load, converted (as a
  // Hugging Face checkpoint shared in bf16); integers do not.
  auto rewrite = [&](at::ScalarType dtype, const std::string& name) {
    const std::string src = dir_->path() + "/mlp.safetensors", dst = dir_->path() + "/" + name;
    const SafetensorsHeader h = ReadSafetensorsHeader(src);
    std::vector<TensorSpec> specs;
    std::vector<at::Tensor> data;
    for (const SafetensorsEntry& e : h.tensors) {
      specs.push_back({e.spec.name, dtype, e.spec.shape});
      data.push_back(ReadSafetensor(src, h, e.spec.name).to(dtype));
    }
    WriteSafetensors(dst, specs, [&](size_t i) { return data[i]; });
    return dst;
  };
  {
    const std::string bf16 = rewrite(at::kBFloat16, "mlp-bf16.safetensors");
    JobSpec spec = Mlp(bf16);
    Trainer t(spec, 0, 1, DistContext{}, nullptr, nullptr);
    const SafetensorsHeader h = ReadSafetensorsHeader(bf16);
    for (const auto& p : t.model().named_parameters()) {
      EXPECT_TRUE(torch::equal(p.value(), ReadSafetensor(bf16, h, p.key()).to(at::kFloat))) << p.key();
    }
    const std::string integers = error(Mlp(rewrite(at::kInt, "mlp-i32.safetensors")));
    EXPECT_NE(integers.find("fc0.bias is I32[32] in the file, F32[32] in the model"), std::string::npos) << integers;
  }
  // Not there at all.
  const std::string none = error(Mlp(dir_->path() + "/nothing.safetensors"));
  EXPECT_NE(none.find("nothing.safetensors: no such file or directory"), std::string::npos) << none;
  // Not strict: missing and unexpected are skipped (here: everything).
  JobSpec lax = Mlp(dir_->path() + "/prefixed");
  lax.model.init_from_strict = false;
  EXPECT_EQ(error(lax), "");
}

// The layer types a spec may name in fsdp_transformer_layer_cls_to_wrap
// (checked at submit from common/model_layers.h) are exactly those the
// worker's models are built of, in order of first appearance.
TEST(Models, LayerTypesAreTheSpecTable) {
  for (ModelKind kind : {ModelKind::kMlp, ModelKind::kCnn, ModelKind::kGpt, ModelKind::kResNet}) {
    ModelSpec m;
    m.kind = kind;
    m.hidden = {8, 8};
    m.channels = 4;
    m.layers = 2;
    m.width = 16;
    m.context = 8;
    m.vocab = 32;
    std::vector<std::string> types;
    for (const Layer& layer : BuildModel(m, 1)->layers()) {
      if (std::find(types.begin(), types.end(), layer.type) == types.end()) types.push_back(layer.type);
    }
    EXPECT_EQ(types, ModelLayerTypes(kind)) << ModelKindName(kind);
  }
}

std::string Python() {
  const char* p = std::getenv("TRAINYARD_TEST_PYTHON");
  return p != nullptr ? p : TRAINYARD_TEST_PYTHON;
}

// A module scripted and saved by the venv's torch (the release the worker
// is built against) trains from C++ under DDP, and the FULL checkpoint's
// weights load back into it in Python: a plain MLP, and an attention model
// (F.scaled_dot_product_attention, LayerNorm, GELU, a buffer).
class TorchScriptModels : public ::testing::TestWithParam<std::string> {};

TEST_P(TorchScriptModels, TrainAndTheirWeightsLoadBackInPython) {
  TempDir dir;
  const std::string pt = dir.path() + "/net.pt";
  const std::string script = std::string(TRAINYARD_SOURCE_DIR) + "/examples/" + GetParam();
  ASSERT_EQ(std::system((Python() + " " + script + " " + pt).c_str()), 0);
  JobSpec spec;
  spec.model.kind = ModelKind::kTorchScript;
  spec.model.path = pt;
  for (const Layer& layer : BuildModel(spec.model, 1)->layers()) {
    EXPECT_EQ(std::vector<std::string>{layer.type}, ModelLayerTypes(ModelKind::kTorchScript));
  }
  spec.data.batch_size = 16;
  spec.data.num_samples = 64;
  spec.optimizer.lr = 3e-3;
  spec.max_steps = 40;
  spec.ddp.intra_host_transport = IntraHostTransport::kProcessGroup;
  spec.checkpoint.project_dir = dir.path() + "/project";
  spec.checkpoint.save_final = true;
  Lrs m;
  std::string final_path;
  // The trained module's output on a fixed input, from C++.
  const std::string outputs = dir.path() + "/outputs.safetensors";
  RunTrainers(
      spec, 2,
      [&](int r, Trainer& t) {
        TrainResult res = t.Run();
        if (r != 0) return;
        final_path = res.final_checkpoint;
        torch::NoGradGuard no_grad;
        t.model().eval();
        const at::Tensor out = t.model().forward(torch::linspace(-1, 1, 3 * 784).reshape({3, 784}));
        WriteSafetensors(outputs, {{"out", at::kFloat, out.sizes().vec()}}, [&](size_t) { return out.contiguous(); });
      },
      &m);
  const auto [first, last] = FirstLast(m.loss);
  EXPECT_LT(last, 0.8 * first);
  ASSERT_FALSE(final_path.empty());
  // Python loads the checkpoint into the scripted module (strict: every
  // parameter and buffer by name) and computes the same output (fp32; the
  // same kernels, so far below the 1e-5 allowed).
  const std::string check = Python() +
                            " -c \"import sys, torch; from safetensors.torch import load_file; "
                            "m = torch.jit.load(sys.argv[1]); sd = load_file(sys.argv[2] + '/model.safetensors'); "
                            "m.load_state_dict(sd, strict=True); m.eval(); "
                            "assert all(torch.equal(m.state_dict()[k], v) for k, v in sd.items()); "
                            "want = load_file(sys.argv[3])['out']; "
                            "got = m(torch.linspace(-1, 1, 3 * 784).reshape(3, 784)); "
                            "assert got.shape == (3, 10), got.shape; "
                            "torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5); "
                            "print('loaded', len(sd), 'tensors')\" " +
                            pt + " " + final_path + " " + outputs;
  EXPECT_EQ(std::system(check.c_str()), 0) << check;
}

INSTANTIATE_TEST_SUITE_P(Examples, TorchScriptModels, ::testing::Values("export_torchscript.py", "export_attention.py"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param == "export_torchscript.py" ? std::string("Mlp") : std::string("Attention");
                         });

// ---- data ------------------------------------------------------------------

void WriteBigEndian(std::string* out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out->push_back(static_cast<char>((v >> s) & 0xff));
}

void WriteFile(const std::string& path, const std::string& data, bool gzip) {
  if (gzip) {
    gzFile f = gzopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(gzwrite(f, data.data(), static_cast<unsigned>(data.size())), static_cast<int>(data.size()));
    gzclose(f);
  } else {
    std::ofstream(path, std::ios::binary) << data;
  }
}

// n images whose pixel (i, j) of image k is (k + i + j) % 256, label k % 10.
void WriteMnist(const std::string& dir, const std::string& split, int n, bool gzip) {
  std::string images, labels;
  WriteBigEndian(&images, 0x803);
  WriteBigEndian(&images, n);
  WriteBigEndian(&images, 28);
  WriteBigEndian(&images, 28);
  WriteBigEndian(&labels, 0x801);
  WriteBigEndian(&labels, n);
  for (int k = 0; k < n; ++k) {
    for (int i = 0; i < 28; ++i) {
      for (int j = 0; j < 28; ++j) images.push_back(static_cast<char>((k + i + j) % 256));
    }
    labels.push_back(static_cast<char>(k % 10));
  }
  const std::string gz = gzip ? ".gz" : "";
  WriteFile(dir + "/" + split + "-images-idx3-ubyte" + gz, images, gzip);
  WriteFile(dir + "/" + split + "-labels-idx1-ubyte" + gz, labels, gzip);
}

TEST(Data, MnistIdxPlainAndGzip) {
  for (bool gzip : {false, true}) {
    TempDir dir;
    WriteMnist(dir.path(), "train", 300, gzip);
    MnistDataset d(dir.path(), true, {1, 28, 28});
    ASSERT_EQ(d.size(), 300);
    Batch b = d.Get({0, 7, 299});
    ASSERT_EQ(b.inputs.sizes(), (std::vector<int64_t>{3, 1, 28, 28}));
    EXPECT_EQ(b.targets[1].item<int64_t>(), 7);
    EXPECT_EQ(b.targets[2].item<int64_t>(), 9);
    const double pixel = ((7 + 2 + 5) % 256 / 255.0 - 0.1307) / 0.3081;
    EXPECT_NEAR(b.inputs[1][0][2][5].item<double>(), pixel, 1e-6);
  }
}

TEST(Data, MnistErrorsNameTheFile) {
  TempDir dir;
  WriteMnist(dir.path(), "train", 10, false);
  std::ofstream(dir.path() + "/train-labels-idx1-ubyte", std::ios::binary) << "garbage!";
  try {
    MnistDataset d(dir.path(), true, {784});
    FAIL() << "read a broken label file";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("train-labels-idx1-ubyte"), std::string::npos) << e.what();
  }
  EXPECT_THROW(MnistDataset(dir.path() + "/none", true, {784}), std::runtime_error);
}

TEST(Data, MnistJobTrainsAndEvaluatesOnT10k) {
  TempDir dir;
  WriteMnist(dir.path(), "train", 400, true);
  WriteMnist(dir.path(), "t10k", 100, false);
  JobSpec spec = Mlp(16, 1);
  spec.data.kind = DataKind::kMnist;
  spec.data.path = dir.path();
  spec.max_steps = 30;
  spec.eval_every_steps = 30;
  spec.eval_batches = 2;
  Lrs m;
  RunTrainers(
      spec, 2, [&](int, Trainer& t) { t.Run(); }, &m);
  EXPECT_FALSE(std::isnan(m.eval[30]));
  EXPECT_LT(m.loss.back(), m.loss.front());
}

TEST(Data, TokenFileWindows) {
  TempDir dir;
  const std::string path = dir.path() + "/train.bin";
  // Token i is i: a window's first token says where in the file it starts.
  std::vector<uint16_t> tokens(1000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>(i);
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(tokens.data()), 2000);
  constexpr int64_t kVocab = 1024, kContext = 16;
  TokenFile f(path, TokenDtype::kUint16, kContext, kVocab, 100, 3, 0.0, 0.9);
  EXPECT_EQ(f.tokens(), 1000);
  Batch b = f.Get({0, 1, 2});
  ASSERT_EQ(b.inputs.sizes(), (std::vector<int64_t>{3, kContext}));
  for (int64_t i = 0; i < 3; ++i) {
    // Each window is consecutive tokens: targets are inputs shifted by one.
    EXPECT_TRUE(torch::equal(b.inputs[i].narrow(0, 1, kContext - 1), b.targets[i].narrow(0, 0, kContext - 1)));
    EXPECT_EQ(b.inputs[i][1].item<int64_t>() - b.inputs[i][0].item<int64_t>(), 1);
  }
  EXPECT_TRUE(torch::equal(f.Get({5}).inputs, f.Get({5}).inputs));  // deterministic
  // The training split: every window starts in the first 90%. The held-out
  // tail: every window starts in the last 10% and fits in the file.
  std::vector<int64_t> all(100);
  std::iota(all.begin(), all.end(), 0);
  const at::Tensor train_starts = f.Get(all).inputs.select(1, 0);
  EXPECT_LT(train_starts.max().item<int64_t>(), 900);
  TokenFile tail(path, TokenDtype::kUint16, kContext, kVocab, 50, 3, 0.9, 1.0);
  std::vector<int64_t> held(50);
  std::iota(held.begin(), held.end(), 0);
  const Batch t = tail.Get(held);
  EXPECT_GE(t.inputs.select(1, 0).min().item<int64_t>(), 900);
  EXPECT_LE(t.targets.select(1, kContext - 1).max().item<int64_t>(), 999);
  EXPECT_GT(t.inputs.select(1, 0).max().item<int64_t>() - t.inputs.select(1, 0).min().item<int64_t>(), 10)
      << "held-out windows should spread over the tail";
  EXPECT_THROW(TokenFile(path, TokenDtype::kUint16, kContext, 40, 10, 3).Get({0, 1, 2, 3, 4, 5}),
               std::runtime_error);                                                             // tokens >= vocab
  EXPECT_THROW(TokenFile(path, TokenDtype::kUint16, 2000, kVocab, 10, 3), std::runtime_error);  // too short
}

// uint32 ids in a directory of shards: one stream in name order, windows
// across shard ends, ids past 65535 intact, a bad id named by its shard.
TEST(Data, TokenShardsOfUint32) {
  TempDir dir;
  constexpr uint32_t kBase = 100000;  // every id needs more than 16 bits
  // Token i of the stream is kBase + i; shards of 300, 500 and 200 tokens,
  // written out of name order, and a file that is not a shard.
  const std::vector<std::pair<std::string, std::pair<uint32_t, uint32_t>>> shards = {
      {"b_001.bin", {300, 800}}, {"a_000.bin", {0, 300}}, {"c_002.bin", {800, 1000}}};
  for (const auto& [name, range] : shards) {
    std::vector<uint32_t> ids;
    for (uint32_t i = range.first; i < range.second; ++i) ids.push_back(kBase + i);
    std::ofstream(dir.path() + "/" + name, std::ios::binary)
        .write(reinterpret_cast<const char*>(ids.data()), static_cast<std::streamsize>(ids.size() * 4));
  }
  std::ofstream(dir.path() + "/README.txt") << "not tokens";
  constexpr int64_t kContext = 64;
  TokenFile f(dir.path(), TokenDtype::kUint32, kContext, 128256, 400, 7);
  EXPECT_EQ(f.tokens(), 1000);
  std::vector<int64_t> all(400);
  std::iota(all.begin(), all.end(), 0);
  const Batch b = f.Get(all);
  const at::Tensor starts = b.inputs.select(1, 0) - kBase;
  // Each window is kContext + 1 consecutive ids of the stream.
  const at::Tensor expected = starts.unsqueeze(1) + torch::arange(kContext, torch::kLong).unsqueeze(0) + kBase;
  EXPECT_TRUE(torch::equal(b.inputs, expected));
  EXPECT_TRUE(torch::equal(b.targets, expected + 1));
  // Some windows span the ends of the first and second shards.
  const at::Tensor spans =
      ((starts < 300) & (starts + kContext >= 300)) | ((starts < 800) & (starts + kContext >= 800));
  EXPECT_GT(spans.sum().item<int64_t>(), 0);
  // Read as uint16, the ids would be other numbers: the width matters.
  TokenFile narrow(dir.path(), TokenDtype::kUint16, kContext, 1 << 16, 10, 7);
  EXPECT_EQ(narrow.tokens(), 2000);
  // An id past the vocabulary fails naming the shard it is in.
  try {
    TokenFile(dir.path(), TokenDtype::kUint32, kContext, kBase + 850, 400, 7).Get(all);
    ADD_FAILURE() << "an id past the vocabulary was read";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("c_002.bin"), std::string::npos) << e.what();
  }
  // A size that is not a whole number of uint32 ids.
  std::ofstream(dir.path() + "/d_003.bin", std::ios::binary) << "abc";
  EXPECT_THROW(TokenFile(dir.path(), TokenDtype::kUint32, kContext, 128256, 10, 7), std::runtime_error);
}

// data kind tensors: samples are rows of named tensors in safetensors files
// (here two files of a directory, 60 + 40 samples whose input is their
// index). Over 2 ranks every training sample is seen exactly once per epoch,
// and the held-out split (the last 20%) is disjoint from it.
TEST(Data, TensorFilesEverySampleOncePerEpochAndAHeldOutSplit) {
  TempDir dir;
  const std::string data = dir.path() + "/data";
  std::filesystem::create_directories(data);
  int64_t next = 0;
  for (const auto& [file, n] : {std::pair{"a.safetensors", 60}, std::pair{"b.safetensors", 40}}) {
    at::Tensor inputs = at::arange(next, next + n, at::kFloat).view({n, 1}).repeat({1, 4}).contiguous();
    at::Tensor targets = (at::arange(next, next + n, at::kLong) % 10).contiguous();
    next += n;
    WriteSafetensors(data + "/" + file, {{"x", at::kFloat, {n, 4}}, {"y", at::kLong, {n}}},
                     [&](size_t i) { return i == 0 ? inputs : targets; });
  }
  JobSpec spec;
  spec.model.input_size = 4;
  spec.data.kind = DataKind::kTensors;
  spec.data.path = data;
  spec.data.inputs = "x";
  spec.data.targets = "y";
  spec.data.eval_fraction = 0.2;
  spec.data.batch_size = 8;
  spec.eval_every_steps = 10;
  std::vector<int64_t> seen, held;
  for (int rank = 0; rank < 2; ++rank) {
    JobData d = MakeJobData(spec, {4}, rank, 2);
    ASSERT_TRUE(d.eval);
    for (int b = 0; b < 5; ++b) {  // 80 training samples: 40 per rank, 5 batches of 8
      Batch batch = d.train->Next();
      ASSERT_EQ(batch.inputs.sizes(), (std::vector<int64_t>{8, 4}));
      for (int64_t i = 0; i < 8; ++i) {
        const int64_t v = static_cast<int64_t>(batch.inputs[i][3].item<float>());
        seen.push_back(v);
        EXPECT_EQ(batch.targets[i].item<int64_t>(), v % 10);
      }
    }
    d.train->Next();
    EXPECT_EQ(d.train->epoch(), 1) << "one epoch is 5 batches per rank";
    for (int b = 0; b < 2; ++b) {  // 20 held out: 10 per rank
      Batch batch = d.eval->Next();
      for (int64_t i = 0; i < batch.inputs.size(0); ++i) held.push_back(batch.inputs[i][0].item<float>());
    }
  }
  std::sort(seen.begin(), seen.end());
  std::vector<int64_t> want(80);
  std::iota(want.begin(), want.end(), 0);
  EXPECT_EQ(seen, want);
  for (int64_t v : held) EXPECT_GE(v, 80) << "held-out sample " << v << " is a training sample";
  // A name the files do not have is named.
  spec.data.inputs = "pixels";
  try {
    MakeJobData(spec, {4}, 0, 2);
    ADD_FAILURE() << "accepted a missing tensor";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("a.safetensors: has no tensor 'pixels'"), std::string::npos) << e.what();
  }
}

// Loader threads read ahead, and change nothing: the same batches in the
// same order across epochs and after a Seek (as a resume does), with the
// position of what was consumed; a reading error reaches the training thread.
TEST(Data, LoaderWorkersGiveTheSameBatchesInOrder) {
  auto data = std::make_shared<SyntheticDataset>(std::vector<int64_t>{6}, 5, 50, 7);
  auto batches = [&](int workers, int64_t seek_epoch, int64_t seek_offset) {
    DataLoader loader(data, DistributedSampler(50, 1, 2, true, 3), 4, workers, 3);
    if (seek_epoch >= 0) loader.Seek(seek_epoch, seek_offset);
    std::vector<at::Tensor> out;
    std::vector<std::pair<int64_t, int64_t>> positions;
    for (int i = 0; i < 20; ++i) {  // 25 samples per rank: 7 batches an epoch, ~3 epochs
      Batch b = loader.Next();
      out.push_back(at::cat({b.inputs.flatten(), b.targets.to(at::kFloat)}));
      positions.emplace_back(loader.epoch(), loader.offset());
    }
    return std::make_pair(out, positions);
  };
  for (int64_t seek : {-1, 1}) {
    const auto [want, want_pos] = batches(0, seek, seek >= 0 ? 8 : 0);
    for (int workers : {1, 3}) {
      const auto [got, got_pos] = batches(workers, seek, seek >= 0 ? 8 : 0);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(torch::equal(got[i], want[i])) << workers << " batch " << i;
      EXPECT_EQ(got_pos, want_pos) << workers;
    }
  }
  class Failing final : public Dataset {
   public:
    int64_t size() const override { return 8; }
    Batch Get(const std::vector<int64_t>&) const override { throw std::runtime_error("unreadable sample"); }
  };
  DataLoader failing(std::make_shared<Failing>(), DistributedSampler(8, 0, 1, false, 0), 2, 2, 2);
  EXPECT_THROW(
      {
        try {
          failing.Next();
        } catch (const std::runtime_error& e) {
          EXPECT_STREQ(e.what(), "unreadable sample");
          throw;
        }
      },
      std::runtime_error);
}

TEST(Data, SamplerDisjointReshuffledAndDropLast) {
  const int64_t n = 103;
  std::set<int64_t> seen;
  for (int r = 0; r < 4; ++r) {
    DistributedSampler s(n, r, 4, true, 7, /*drop_last=*/true);
    const auto idx = s.Indices(0);
    EXPECT_EQ(static_cast<int64_t>(idx.size()), n / 4);
    for (int64_t i : idx) EXPECT_TRUE(seen.insert(i).second) << "index " << i << " on two ranks";
    EXPECT_NE(s.Indices(0), s.Indices(1));  // reshuffled per epoch
    EXPECT_EQ(s.Indices(1), DistributedSampler(n, r, 4, true, 7, true).Indices(1));
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(n / 4 * 4));
  // Without drop_last the tail wraps around: every index appears.
  std::set<int64_t> all;
  for (int r = 0; r < 4; ++r) {
    for (int64_t i : DistributedSampler(n, r, 4, true, 7).Indices(0)) all.insert(i);
  }
  EXPECT_EQ(all.size(), static_cast<size_t>(n));
}

}  // namespace
}  // namespace trainyard
