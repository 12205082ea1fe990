// GPU tests: the CUDA paths of the worker on a real GPU. They run wherever a
// CUDA device is visible and exit 77 (ctest: skipped) on machines without
// an NVIDIA GPU; TRAINYARD_REQUIRE_GPU turns that skip into a failure
// (tests/gpu_presence.h).
//
// Ranks that run DDP or FSDP on CUDA are processes (tests/worker/
// rank_processes.h says why not threads); the others are threads. Two ranks
// on one GPU talk over Gloo (NCCL refuses two ranks on one device); with two
// or more GPUs the NCCL tests run too.
// References are independent: a single-process float64 computation on the
// CPU, or the same job on the CPU.
#include <ATen/cuda/CUDAContext.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <barrier>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "tests/gpu_presence.h"
#include "tests/test_util.h"
#include "tests/worker/dist_test_util.h"
#include "tests/worker/rank_processes.h"
#include "tests/worker/trainer_test_util.h"
#include "worker/base/crash_report.h"
#include "worker/base/device.h"
#include "worker/base/gpu_monitor.h"
#include "worker/checkpoint/checkpoint.h"
#include "worker/collectives/process_group.h"
#include "worker/models/models.h"
#include "worker/parallel/ddp.h"
#include "worker/parallel/fsdp.h"
#include "worker/train/trainer.h"

namespace trainyard {
namespace {

const c10::Device kGpu0(c10::kCUDA, 0);
constexpr int kSteps = 5;
constexpr int64_t kPerRankBatch = 16;
constexpr double kLr = 0.05;

ModelSpec SmallMlp() {
  ModelSpec ms;
  ms.kind = ModelKind::kMlp;
  ms.hidden = {64, 32};
  return ms;
}

struct Data {
  at::Tensor inputs;   // [steps, world * B, 784]
  at::Tensor targets;  // [steps, world * B]
};

Data RandomData(int world, uint64_t seed) {
  torch::manual_seed(seed);
  return {torch::randn({kSteps, world * kPerRankBatch, 784}), torch::randint(0, 10, {kSteps, world * kPerRankBatch})};
}

// Plain SGD on one process over the whole batch, in float64 on the CPU.
std::vector<at::Tensor> Float64Reference(const ModelSpec& ms, uint64_t seed, const Data& d) {
  auto model = BuildModel(ms, seed);
  model->to(at::kDouble);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(kLr));
  for (int s = 0; s < kSteps; ++s) {
    opt.zero_grad();
    torch::nn::functional::cross_entropy(model->forward(d.inputs[s].to(at::kDouble)), d.targets[s]).backward();
    opt.step();
  }
  std::vector<at::Tensor> out;
  for (const at::Tensor& p : model->parameters()) out.push_back(p.detach().clone());
  return out;
}

void ExpectClose(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& want, double atol,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    const at::Tensor g = got[i].to(at::kCPU, at::kDouble);
    const double diff = (g - want[i].to(at::kDouble)).abs().max().item<double>();
    EXPECT_LE(diff, atol) << what << ": parameter " << i << " differs from the reference by " << diff;
  }
}

// ---- DDP on CUDA tensors, every hook, against float64 ----------------------

struct HookCase {
  CommHookType hook;
  double atol;  // fp32 sums: 1e-5; half-precision wire: its rounding over a few steps
  friend void PrintTo(const HookCase& c, std::ostream* os) { *os << CommHookName(c.hook); }
};

class CudaDdpHooks : public ::testing::TestWithParam<HookCase> {};

TEST_P(CudaDdpHooks, TwoRanksOnOneGpuOverGlooMatchFloat64) {
  const HookCase c = GetParam();
  const ModelSpec ms = SmallMlp();
  const uint64_t seed = 11;
  const Data d = RandomData(2, 5);
  DdpSpec ds;
  ds.bucket_cap_mb = 0.05;  // several buckets
  ds.comm_hook = c.hook;
  // Full rank and no error feedback: PowerSGD's average is exact, so the
  // float64 reference holds; every matrix is compressed from the first step.
  // The rank is above the gradients' (2 x 16 samples; the last layer's: 9),
  // so the extra columns of P are rounding noise: orthogonalized by QR the
  // average stays exact (Gram-Schmidt was 2e-3 off here on an H100).
  ds.power_sgd.matrix_approximation_rank = 64;
  // Batched PowerSGD compresses each bucket as one square matrix, of full
  // rank: exact only at a rank of its side (the first layer's weight, larger
  // than the bucket cap, is a bucket of its own: 50176 values, 224 x 224).
  if (c.hook == CommHookType::kBatchedPowerSgd) ds.power_sgd.matrix_approximation_rank = 256;
  ds.power_sgd.start_powerSGD_iter = 0;
  ds.power_sgd.min_compression_rate = 0;
  ds.power_sgd.use_error_feedback = false;
  // Each rank's parameters, then its wire and fp32-equivalent bytes.
  std::vector<std::vector<at::Tensor>> results = RunRankProcesses(2, [&](int rank, int world, const auto& store) {
    UseDevice(kGpu0);
    auto pg = MakeProcessGroup(Backend::kGloo, store, rank, world, "127.0.0.1", std::chrono::seconds(60));
    auto model = BuildModel(ms, seed + 100 * rank);  // DDP broadcasts rank 0's weights
    model->to(kGpu0);
    DistributedDataParallel ddp(model->parameters(), model->buffers(), pg, ds);
    torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(kLr));
    for (int s = 0; s < kSteps; ++s) {
      at::Tensor x = d.inputs[s].narrow(0, rank * kPerRankBatch, kPerRankBatch).to(kGpu0);
      at::Tensor y = d.targets[s].narrow(0, rank * kPerRankBatch, kPerRankBatch).to(kGpu0);
      ddp.PrepareForward();
      at::Tensor loss = torch::nn::functional::cross_entropy(model->forward(x), y);
      ddp.PrepareBackward({});
      loss.backward();
      for (const at::Tensor& p : model->parameters()) EXPECT_TRUE(p.grad().is_cuda());
      opt.step();
      for (auto& p : model->parameters()) p.mutable_grad() = at::Tensor();
    }
    std::vector<at::Tensor> out;
    for (const at::Tensor& p : model->parameters()) out.push_back(p.detach().cpu());
    out.push_back(torch::tensor({static_cast<int64_t>(ddp.comm_stats().wire_bytes),
                                 static_cast<int64_t>(ddp.comm_stats().fp32_equivalent_bytes)},
                                at::kLong));
    return out;
  });
  std::vector<int64_t> wire(2), fp32(2);
  for (int r = 0; r < 2; ++r) {
    ASSERT_FALSE(results[r].empty()) << "rank " << r << " returned nothing";
    wire[r] = results[r].back()[0].item<int64_t>();
    fp32[r] = results[r].back()[1].item<int64_t>();
    results[r].pop_back();
  }
  const auto want = Float64Reference(ms, seed, d);
  for (int r = 0; r < 2; ++r) ExpectClose(results[r], want, c.atol, "rank " + std::to_string(r));
  if (c.hook == CommHookType::kFp16 || c.hook == CommHookType::kBf16) {
    EXPECT_EQ(2 * wire[0], fp32[0]) << "a half-precision hook carries half the bytes";
  }
  // The weights moved: the test cannot pass on untouched parameters.
  auto init = BuildModel(ms, seed)->parameters();
  EXPECT_GT((init[0].to(at::kDouble) - want[0]).abs().max().item<double>(), 1e-3);
}

INSTANTIATE_TEST_SUITE_P(Hooks, CudaDdpHooks,
                         ::testing::Values(HookCase{CommHookType::kNone, 1e-5}, HookCase{CommHookType::kFp16, 2e-3},
                                           HookCase{CommHookType::kBf16, 5e-3}, HookCase{CommHookType::kPowerSgd, 1e-4},
                                           HookCase{CommHookType::kBatchedPowerSgd, 1e-4}));

// An NCCL group of one rank: DDP's allreduce runs through NCCL for real.
TEST(CudaNccl, WorldOfOneAveragesThroughNccl) {
  UseDevice(kGpu0);
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto pg = MakeProcessGroup(Backend::kNccl, store, 0, 1, "127.0.0.1", std::chrono::seconds(60));
  ASSERT_TRUE(UsesNccl(*pg));
  const ModelSpec ms = SmallMlp();
  const Data d = RandomData(1, 8);
  auto model = BuildModel(ms, 3);
  model->to(kGpu0);
  DistributedDataParallel ddp(model->parameters(), model->buffers(), pg, DdpSpec{});
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(kLr));
  for (int s = 0; s < kSteps; ++s) {
    ddp.PrepareForward();
    at::Tensor loss =
        torch::nn::functional::cross_entropy(model->forward(d.inputs[s].to(kGpu0)), d.targets[s].to(kGpu0));
    ddp.PrepareBackward({});
    loss.backward();
    opt.step();
    for (auto& p : model->parameters()) p.mutable_grad() = at::Tensor();
  }
  std::vector<at::Tensor> got;
  for (const at::Tensor& p : model->parameters()) got.push_back(p.detach());
  ExpectClose(got, Float64Reference(ms, 3, d), 1e-5, "NCCL world 1");
  EXPECT_GT(ddp.comm_stats().wire_bytes, 0);
}

// ---- Trainer on CUDA -------------------------------------------------------

JobSpec TrainerSpec(const std::string& project_dir = "") {
  JobSpec s;
  s.model.hidden = {64, 48, 32};
  s.data.num_samples = 64;
  s.data.batch_size = 8;
  s.optimizer.kind = OptimizerKind::kAdamW;
  s.optimizer.lr = 1e-3;
  s.max_steps = 6;
  s.device = Device::kCuda;
  s.ddp.bucket_cap_mb = 0.05;
  s.ddp.intra_host_transport = IntraHostTransport::kProcessGroup;
  s.backend = Backend::kGloo;  // two ranks on one GPU
  s.fsdp.auto_wrap_policy = WrapPolicy::kSizeBased;
  s.fsdp.min_num_params = 2000;
  s.checkpoint.project_dir = project_dir;
  s.checkpoint.save_final = false;
  return s;
}

std::vector<at::Tensor> HostCopies(const std::vector<at::Tensor>& ts) {
  std::vector<at::Tensor> out;
  for (const at::Tensor& t : ts) out.push_back(t.detach().to(at::kCPU, /*non_blocking=*/false, /*copy=*/true));
  return out;
}

// The same job on the CPU and on the GPU ends with the same weights (fp32
// on both: only the kernels' summation orders differ). The GPU ranks are
// processes; `after_first_step` (may be empty) looks at each GPU rank's
// trainer after its first step.
void ExpectCudaMatchesCpu(JobSpec spec, int world, double atol, const std::string& what,
                          const std::function<void(Trainer&)>& after_first_step = {}) {
  spec.device = Device::kCuda;
  const std::vector<std::vector<at::Tensor>> ranks = RunRankProcesses(world, [&](int r, int w, const auto& store) {
    UseDevice(kGpu0);
    at::set_num_threads(1);
    DistSetup dist = SetUpGroups(spec, store, r, w, "127.0.0.1", std::chrono::seconds(60));
    Trainer t(spec, r, w, dist.context(), nullptr, nullptr);
    if (after_first_step) {
      t.Step();
      after_first_step(t);
    }
    t.Run();
    for (const at::Tensor& p : t.model().parameters()) EXPECT_TRUE(p.is_cuda()) << what;
    std::vector<at::Tensor> full = t.fsdp() ? t.fsdp()->FullParameters() : t.model().parameters();  // collective
    return r == 0 ? HostCopies(full) : std::vector<at::Tensor>{};
  });
  const std::vector<at::Tensor>& on_gpu = ranks.at(0);
  std::vector<at::Tensor> on_cpu;
  spec.device = Device::kCpu;
  spec.backend = Backend::kAuto;
  RunTrainers(spec, world, [&](int r, Trainer& t) {
    t.Run();
    if (r == 0)
      on_cpu = HostCopies(t.fsdp() ? t.fsdp()->FullParameters() : t.model().parameters());
    else if (t.fsdp())
      t.fsdp()->FullParameters();
  });
  ExpectClose(on_gpu, on_cpu, atol, what);
}

TEST(CudaTrainer, DdpTrainerMatchesTheCpuRun) { ExpectCudaMatchesCpu(TrainerSpec(), 2, 1e-5, "DDP"); }

TEST(CudaTrainer, FsdpFullShardMatchesTheCpuRun) {
  JobSpec spec = TrainerSpec();
  spec.distributed_type = DistributedType::kFsdp;
  spec.fsdp.sharding_strategy = ShardingStrategy::kFullShard;
  ExpectCudaMatchesCpu(spec, 2, 1e-5, "FSDP FULL_SHARD");
}

// The llama model on CUDA (SDPA's CUDA kernels, grouped K/V heads), sharded
// by decoder layer with activation checkpointing: the CPU run's weights.
TEST(CudaTrainer, LlamaFsdpWithCheckpointingMatchesTheCpuRun) {
  TempDir dir;
  std::ofstream(dir.path() + "/config.json")
      << R"({"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 128, "hidden_size": 64,
             "intermediate_size": 112, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
             "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
             "tie_word_embeddings": false})";
  JobSpec spec = TrainerSpec();
  spec.model = ModelSpec{};
  spec.model.kind = ModelKind::kLlama;
  spec.model.config = dir.path();
  spec.model.context = 32;
  spec.data.batch_size = 2;
  spec.distributed_type = DistributedType::kFsdp;
  spec.fsdp.auto_wrap_policy = WrapPolicy::kTransformerBased;
  spec.fsdp.transformer_layer_cls_to_wrap = {"LlamaDecoderLayer"};
  spec.activation_checkpointing = true;
  ExpectCudaMatchesCpu(spec, 2, 1e-4, "llama FSDP FULL_SHARD with activation checkpointing");
}

// offload_params on CUDA: shards, their gradients and optimizer state stay
// in host memory; each unit is copied to the GPU for its all-gather and its
// reduced gradient copied back — real copies here, no-ops on the CPU.
TEST(CudaTrainer, FsdpOffloadKeepsShardsOnTheHostAndMatchesTheCpuRun) {
  JobSpec spec = TrainerSpec();
  spec.distributed_type = DistributedType::kFsdp;
  spec.fsdp.sharding_strategy = ShardingStrategy::kFullShard;
  spec.fsdp.offload_params = true;
  ExpectCudaMatchesCpu(spec, 2, 1e-5, "FSDP FULL_SHARD offload", [](Trainer& t) {
    for (const at::Tensor& shard : t.fsdp()->ShardParameters()) {
      EXPECT_TRUE(shard.device().is_cpu()) << "a shard left host memory";
    }
    // A step releases its gradients when it ends: one forward and backward
    // (collective, on every rank) shows where they land, then they go
    // without an optimizer step, so the run still matches the CPU's.
    ParallelModel& pm = t.parallel_model();
    // Fixed inputs: no random generator the run depends on is drawn from.
    const at::Tensor x = torch::linspace(-1, 1, kPerRankBatch * 784).reshape({kPerRankBatch, 784}).to(kGpu0);
    const at::Tensor y = (torch::arange(kPerRankBatch) % 10).to(kGpu0);
    const at::Tensor out = pm.Forward(x, /*sync=*/true);
    pm.Backward(torch::nn::functional::cross_entropy(out, y), out, /*sync=*/true);
    for (const at::Tensor& shard : t.fsdp()->ShardParameters()) {
      EXPECT_TRUE(shard.grad().defined() && shard.grad().device().is_cpu()) << "a shard's gradient is not on the host";
    }
    pm.ReleaseGradients();
  });
}

// FULL_SHARD frees each wrapped unit's gathered parameters after its
// forward; SHARD_GRAD_OP keeps them until backward. Measured with each rank
// process's CUDA allocator counters between forward and backward.
TEST(CudaFsdp, FullShardFreesGatheredParametersAfterForward) {
  // Per rank: [unit bytes, allocated after forward under FULL_SHARD, under SHARD_GRAD_OP].
  const std::vector<std::vector<at::Tensor>> ranks = RunRankProcesses(2, [](int r, int w, const auto& store) {
    UseDevice(kGpu0);
    int64_t unit_bytes = 0;
    std::vector<int64_t> allocated;
    for (ShardingStrategy strategy : {ShardingStrategy::kFullShard, ShardingStrategy::kShardGradOp}) {
      JobSpec spec = TrainerSpec();
      spec.distributed_type = DistributedType::kFsdp;
      spec.fsdp.sharding_strategy = strategy;
      auto prefixed = c10::make_intrusive<c10d::PrefixStore>(ShardingStrategyName(strategy), store);
      DistSetup dist = SetUpGroups(spec, prefixed, r, w, "127.0.0.1", std::chrono::seconds(60));
      Trainer t(spec, r, w, dist.context(), nullptr, nullptr);
      FullyShardedModel& fsdp = *t.fsdp();
      unit_bytes = 0;
      for (const FsdpUnitInfo& u : fsdp.units()) {
        if (!u.layers.empty()) unit_bytes += u.shard_numel * fsdp.shard_size() * 4;  // fp32 full buffer
      }
      at::Tensor x = torch::randn({8, 784}).to(kGpu0);
      at::Tensor y = torch::randint(0, 10, {8}).to(kGpu0);
      at::Tensor loss = torch::nn::functional::cross_entropy(fsdp.Forward(x), y);
      Synchronize(kGpu0);
      allocated.push_back(ReadDeviceMemory(kGpu0)->allocated);
      fsdp.PrepareBackward();
      loss.backward();
      fsdp.FinishBackward();
    }
    return std::vector<at::Tensor>{torch::tensor({unit_bytes, allocated[0], allocated[1]}, at::kLong)};
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(ranks[r].size(), 1u) << "rank " << r;
    const int64_t unit_bytes = ranks[r][0][0].item<int64_t>();
    const int64_t full_shard = ranks[r][0][1].item<int64_t>(), shard_grad_op = ranks[r][0][2].item<int64_t>();
    ASSERT_GT(unit_bytes, 0) << "no wrapped unit: the test would prove nothing";
    EXPECT_GE(shard_grad_op - full_shard, unit_bytes * 9 / 10)
        << "rank " << r << ": FULL_SHARD " << full_shard << " B vs SHARD_GRAD_OP " << shard_grad_op << " B, units "
        << unit_bytes << " B";
  }
}

// fp16 autocast with loss scaling, and bf16 autocast, on CUDA: they train,
// stay close to fp32, and really compute in half precision (the weights
// differ from the fp32 run's).
TEST(CudaMixedPrecision, Fp16WithLossScalingAndBf16Train) {
  auto run = [](MixedPrecision mp) {
    JobSpec spec = TrainerSpec();
    spec.mixed_precision = mp;
    spec.max_steps = 30;
    // SGD: an update is lr x gradient, so the weights carry the gradients'
    // precision (Adam's normalised steps would hide it).
    spec.optimizer.kind = OptimizerKind::kSgd;
    spec.optimizer.lr = kLr;
    std::vector<at::Tensor> params;
    double first = 0, last = 0;
    RunTrainers(spec, 1,
                [&](int, Trainer& t) {
                  TrainResult res = t.Run();
                  first = res.first_loss;
                  last = res.last_loss;
                  params = HostCopies(t.model().parameters());
                  for (const at::Tensor& p : t.model().parameters()) EXPECT_EQ(p.scalar_type(), at::kFloat);
                },
                nullptr, nullptr, {kGpu0});
    EXPECT_LT(last, first) << "mixed precision " << static_cast<int>(mp);
    return params;
  };
  const auto fp32 = run(MixedPrecision::kNo);
  const auto fp16 = run(MixedPrecision::kFp16);
  const auto bf16 = run(MixedPrecision::kBf16);
  ExpectClose(fp16, fp32, 2e-3, "fp16 vs fp32");
  ExpectClose(bf16, fp32, 1e-2, "bf16 vs fp32");
  EXPECT_FALSE(torch::equal(fp16[0], fp32[0])) << "fp16 autocast did not change the arithmetic";
  EXPECT_FALSE(torch::equal(bf16[0], fp32[0])) << "bf16 autocast did not change the arithmetic";
}

// ---- Checkpoints between devices -------------------------------------------

struct Held {
  std::vector<at::Tensor> params, exp_avg, exp_avg_sq;
  int64_t step = 0;
};

Held Hold(Trainer& t) {
  Held h;
  h.step = t.step();
  for (const at::Tensor& p : t.model().parameters()) {
    h.params.push_back(p.detach().cpu());
    auto* a = dynamic_cast<torch::optim::AdamWParamState*>(OptimizerStateOf(t.optimizer(), p));
    if (a == nullptr) throw std::runtime_error("no optimizer state");
    h.exp_avg.push_back(a->exp_avg().cpu());
    h.exp_avg_sq.push_back(a->exp_avg_sq().cpu());
  }
  return h;
}

void ExpectBitwise(const Held& a, const Held& b, const std::string& what) {
  EXPECT_EQ(a.step, b.step) << what;
  ASSERT_EQ(a.params.size(), b.params.size()) << what;
  for (size_t i = 0; i < a.params.size(); ++i) {
    EXPECT_TRUE(torch::equal(a.params[i], b.params[i])) << what << " parameter " << i;
    EXPECT_TRUE(torch::equal(a.exp_avg[i], b.exp_avg[i])) << what << " exp_avg " << i;
    EXPECT_TRUE(torch::equal(a.exp_avg_sq[i], b.exp_avg_sq[i])) << what << " exp_avg_sq " << i;
  }
}

// Saved on one device, resumed on the other: parameters and optimizer state
// bitwise, in both layouts.
void CheckpointAcross(Device from, Device to, CheckpointType type) {
  TempDir dir;
  JobSpec spec = TrainerSpec(dir.path());
  spec.max_steps = 4;
  spec.device = from;
  Held saved;
  std::string path;
  RunTrainers(spec, 1,
              [&](int, Trainer& t) {
                t.Run();
                CheckpointEvent ev = t.Checkpoint(type);
                ASSERT_TRUE(ev.ok) << ev.error;
                path = ev.path;
                saved = Hold(t);
              },
              nullptr, nullptr, {from == Device::kCuda ? kGpu0 : c10::Device(c10::kCPU)});
  spec.device = to;
  spec.checkpoint.resume_from = path;
  RunTrainers(spec, 1,
              [&](int, Trainer& t) {
                ASSERT_EQ(t.resumed_from(), path);
                for (const at::Tensor& p : t.model().parameters()) EXPECT_EQ(p.is_cuda(), to == Device::kCuda);
                ExpectBitwise(Hold(t), saved, std::string(DeviceName(from)) + " -> " + DeviceName(to));
              },
              nullptr, nullptr, {to == Device::kCuda ? kGpu0 : c10::Device(c10::kCPU)});
}

TEST(CudaCheckpoint, WrittenOnCudaResumedOnCpuBitwise) {
  CheckpointAcross(Device::kCuda, Device::kCpu, CheckpointType::kFull);
  CheckpointAcross(Device::kCuda, Device::kCpu, CheckpointType::kSharded);
}

TEST(CudaCheckpoint, WrittenOnCpuResumedOnCudaBitwise) {
  CheckpointAcross(Device::kCpu, Device::kCuda, CheckpointType::kFull);
  CheckpointAcross(Device::kCpu, Device::kCuda, CheckpointType::kSharded);
}

// ---- Several GPUs: NCCL for real -------------------------------------------

class MultiGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() >= 2) return;
    if (RequiredGpus() >= 2)
      FAIL() << "TRAINYARD_REQUIRE_GPU=" << RequiredGpus() << " but CUDA sees " << CudaDeviceCount();
    GTEST_SKIP() << "needs two GPUs (NCCL takes one device per rank)";
  }
};

TEST_F(MultiGpu, NcclDdpAndFsdpMatchTheCpuRun) {
  const std::vector<c10::Device> gpus = {c10::Device(c10::kCUDA, 0), c10::Device(c10::kCUDA, 1)};
  for (DistributedType type : {DistributedType::kDdp, DistributedType::kFsdp}) {
    JobSpec spec = TrainerSpec();
    spec.backend = Backend::kNccl;
    spec.distributed_type = type;
    std::vector<at::Tensor> on_gpu, on_cpu;
    RunTrainers(
        spec, 2,
        [&](int r, Trainer& t) {
          t.Run();
          auto full = t.fsdp() ? t.fsdp()->FullParameters() : t.model().parameters();
          if (r == 0) on_gpu = HostCopies(full);
        },
        nullptr, nullptr, gpus);
    spec.device = Device::kCpu;
    spec.backend = Backend::kAuto;
    RunTrainers(spec, 2, [&](int r, Trainer& t) {
      t.Run();
      auto full = t.fsdp() ? t.fsdp()->FullParameters() : t.model().parameters();
      if (r == 0) on_cpu = HostCopies(full);
    });
    ExpectClose(on_gpu, on_cpu, 1e-5, DistributedTypeName(type));
  }
}

// NVML, as the driver of this GPU answers: the rank's GPU found by CUDA's
// PCI bus id, its memory total what CUDA reports (within 2%), memory in use
// growing with a 1 GiB allocation, sane utilization, power and temperature.
TEST(CudaGpuMonitor, ReadsTheRanksGpuThroughNvml) {
  const std::string bus_id = PciBusId(kGpu0);
  ASSERT_FALSE(bus_id.empty());
  auto monitor = GpuMonitor::Open(bus_id);
  ASSERT_TRUE(monitor.ok()) << monitor.status();
  const GpuReading before = (*monitor)->Read();
  std::cout << "NVML: " << (*monitor)->name() << " at " << bus_id << ": utilization " << before.utilization
            << ", memory " << before.memory_used_bytes << " / " << before.memory_total_bytes << " B, "
            << before.power_watts << " W, " << before.temperature_celsius << " C, ECC " << before.ecc_corrected << "/"
            << before.ecc_uncorrected << "\n";
  const double cuda_total = static_cast<double>(at::cuda::getDeviceProperties(0)->totalGlobalMem);
  EXPECT_NEAR(static_cast<double>(before.memory_total_bytes), cuda_total, 0.02 * cuda_total);
  EXPECT_GE(before.utilization, 0.0);
  EXPECT_LE(before.utilization, 1.0);
  EXPECT_GT(before.temperature_celsius, 0.0);
  EXPECT_LT(before.temperature_celsius, 120.0);
  if (before.power_watts >= 0) EXPECT_GT(before.power_watts, 1.0);
  at::Tensor big = torch::empty({int64_t{1} << 28}, torch::TensorOptions().dtype(torch::kFloat).device(kGpu0));
  big.fill_(1);
  Synchronize(kGpu0);
  const GpuReading after = (*monitor)->Read();
  EXPECT_GE(after.memory_used_bytes - before.memory_used_bytes, int64_t{1} << 30);
  // Sampling hands the latest reading to the step sink.
  (*monitor)->StartSampling(std::chrono::milliseconds(100));
  GpuReading latest;
  WaitFor([&] { return (latest = (*monitor)->Latest()).memory_total_bytes >= 0; }, std::chrono::seconds(2));
  EXPECT_EQ(latest.memory_total_bytes, before.memory_total_bytes);
}

}  // namespace
}  // namespace trainyard

int main(int argc, char** argv) {
  trainyard::InstallCrashReport("gpu_test");
  ::testing::InitGoogleTest(&argc, argv);
  const int required = trainyard::RequiredGpus();
  if (required < 0) {
    std::cout << "gpu_test: TRAINYARD_REQUIRE_GPU must be a number of GPUs (0, 1, 2...)\n";
    return 1;
  }
  const int usable = trainyard::CudaDeviceCount(), present = trainyard::NvidiaGpusPresent();
  if (usable == 0 && present > 0) {
    std::cout << "gpu_test: the NVIDIA driver shows " << present
              << " GPU(s) but CUDA sees none: CUDA is broken on this machine\n";
    return 1;
  }
  if (usable < required) {
    std::cout << "gpu_test: TRAINYARD_REQUIRE_GPU=" << required << " but CUDA sees " << usable << " device(s)\n";
    return 1;
  }
  if (usable == 0) {
    std::cout << "gpu_test: no NVIDIA GPU on this machine; skipped\n";
    return 77;
  }
  std::cout << "gpu_test: " << usable << " CUDA device(s)\n";
  return RUN_ALL_TESTS();
}
