// Checkpoints over real Gloo (ranks as threads), through the Trainer as the
// worker runs it: bitwise round trips for DDP and every FSDP strategy in both
// layouts; resume equals an uninterrupted run (PowerSGD state included);
// resharding across world sizes and strategies; the FULL layout read by the
// real Python `safetensors` library; write failures; requests through the
// control word; periodic saves and total_limit.
#include "worker/checkpoint/checkpoint.h"

#include <c10/core/CPUAllocator.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "absl/strings/str_join.h"
#include "common/checkpoint_dir.h"
#include "tests/test_paths.h"
#include "tests/test_util.h"
#include "tests/worker/test_python.h"
#include "tests/worker/trainer_test_util.h"
#include "worker/base/safetensors.h"
#include "worker/collectives/collectives.h"
#include "worker/collectives/process_group.h"
#include "worker/models/models.h"
#include "worker/parallel/fsdp.h"
#include "worker/train/trainer.h"
#include "worker/worker_main.h"

namespace trainyard {
namespace {
namespace fs = std::filesystem;

JobSpec BaseSpec(const std::string& project_dir) {
  JobSpec s;
  s.model.hidden = {64, 48, 32};
  s.data.num_samples = 48;  // 3 batches per rank and epoch at 2 ranks: resumes cross epochs
  s.data.batch_size = 8;
  s.optimizer.kind = OptimizerKind::kAdamW;
  s.optimizer.weight_decay = 0.01;
  s.max_steps = 8;
  s.ddp.bucket_cap_mb = 0.05;  // several buckets
  s.ddp.intra_host_transport = IntraHostTransport::kProcessGroup;
  s.fsdp.auto_wrap_policy = WrapPolicy::kSizeBased;
  s.fsdp.min_num_params = 2000;  // fc0, fc1 wrapped; fc2 + fc3 in the root
  s.checkpoint.project_dir = project_dir;
  s.checkpoint.save_final = false;
  return s;
}

JobSpec Fsdp(JobSpec s, ShardingStrategy strategy, int world) {
  s.distributed_type = DistributedType::kFsdp;
  s.fsdp.sharding_strategy = strategy;
  s.num_processes = world;
  if (strategy == ShardingStrategy::kHybridShard || strategy == ShardingStrategy::kHybridShardZero2) {
    s.fsdp.ranks_per_node = 2;
  }
  return s;
}

// What one rank holds: the optimizer's parameters and their state.
struct Snapshot {
  std::vector<at::Tensor> holders;
  std::vector<std::vector<at::Tensor>> state;  // exp_avg, exp_avg_sq per holder
  std::vector<int64_t> steps;
  int64_t step = 0;
};

Snapshot Take(Trainer& t) {
  Snapshot s;
  s.step = t.step();
  const auto holders = t.fsdp() != nullptr ? t.fsdp()->ShardParameters() : t.model().parameters();
  for (const at::Tensor& h : holders) {
    s.holders.push_back(h.detach().clone());
    torch::optim::OptimizerParamState* state = OptimizerStateOf(t.optimizer(), h);
    if (state == nullptr) {
      s.state.push_back({});
      s.steps.push_back(-1);
      continue;
    }
    auto& a = dynamic_cast<torch::optim::AdamWParamState&>(*state);
    s.state.push_back({a.exp_avg().clone(), a.exp_avg_sq().clone()});
    s.steps.push_back(a.step());
  }
  return s;
}

void ExpectBitwiseEqual(const Snapshot& a, const Snapshot& b, const std::string& what) {
  EXPECT_EQ(a.step, b.step) << what;
  ASSERT_EQ(a.holders.size(), b.holders.size()) << what;
  for (size_t i = 0; i < a.holders.size(); ++i) {
    EXPECT_TRUE(torch::equal(a.holders[i], b.holders[i]))
        << what << " parameter " << i << " max diff " << (a.holders[i] - b.holders[i]).abs().max().item<double>();
    ASSERT_EQ(a.state[i].size(), b.state[i].size()) << what << " optimizer state of " << i;
    EXPECT_EQ(a.steps[i], b.steps[i]) << what << " optimizer step of " << i;
    for (size_t k = 0; k < a.state[i].size(); ++k) {
      EXPECT_TRUE(torch::equal(a.state[i][k], b.state[i][k])) << what << " optimizer field " << k << " of " << i;
    }
  }
}

struct Config {
  std::string name;
  DistributedType type;
  ShardingStrategy strategy;
  int world;
  bool bf16_offload = false;  // bf16 compute with fp32 shards, offloaded
};

std::vector<Config> AllConfigs() {
  return {{"DDP", DistributedType::kDdp, ShardingStrategy::kFullShard, 2},
          {"FULL_SHARD", DistributedType::kFsdp, ShardingStrategy::kFullShard, 2},
          {"SHARD_GRAD_OP", DistributedType::kFsdp, ShardingStrategy::kShardGradOp, 2},
          {"NO_SHARD", DistributedType::kFsdp, ShardingStrategy::kNoShard, 2},
          {"HYBRID_SHARD", DistributedType::kFsdp, ShardingStrategy::kHybridShard, 4},
          {"_HYBRID_SHARD_ZERO2", DistributedType::kFsdp, ShardingStrategy::kHybridShardZero2, 4},
          {"FULL_SHARD bf16 offload", DistributedType::kFsdp, ShardingStrategy::kFullShard, 2, true}};
}

JobSpec SpecFor(const Config& c, const std::string& dir) {
  JobSpec s = BaseSpec(dir);
  s.num_processes = c.world;
  if (c.bf16_offload) {
    s.mixed_precision = MixedPrecision::kBf16;
    s.fsdp.offload_params = true;
  }
  return c.type == DistributedType::kFsdp ? Fsdp(s, c.strategy, c.world) : s;
}

class RoundTrip : public ::testing::TestWithParam<CheckpointType> {};

TEST_P(RoundTrip, EveryStrategyRestoresBitwise) {
  const CheckpointType type = GetParam();
  for (const Config& c : AllConfigs()) {
    TempDir dir;
    JobSpec spec = SpecFor(c, dir.path());
    std::vector<Snapshot> before(c.world), after(c.world);
    std::string path;
    RunTrainers(spec, c.world, [&](int r, Trainer& t) {
      for (int i = 0; i < 3; ++i) t.Step();
      before[r] = Take(t);
      CheckpointEvent ev = t.Checkpoint(type);
      if (!ev.ok) throw std::runtime_error(ev.error);
      if (r == 0) path = ev.path;
    });
    ASSERT_FALSE(path.empty()) << c.name;
    spec.checkpoint.resume_from = path;
    RunTrainers(spec, c.world, [&](int r, Trainer& t) { after[r] = Take(t); });
    for (int r = 0; r < c.world; ++r) ExpectBitwiseEqual(before[r], after[r], c.name + " rank " + std::to_string(r));
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, RoundTrip, ::testing::Values(CheckpointType::kFull, CheckpointType::kSharded),
                         [](const auto& info) { return std::string(CheckpointTypeName(info.param)); });

// save_dtype bf16: a FULL checkpoint's weights are the model's rounded to
// bf16 (FSDP assembles them from the shards), the optimizer state stays
// float32, and a resumed job starts from the rounded weights, saying so.
TEST(FullSave, Bf16WeightsAreTheModelsRoundedAndResumeFromThem) {
  TempDir dir;
  JobSpec spec = Fsdp(BaseSpec(dir.path()), ShardingStrategy::kFullShard, 2);
  spec.checkpoint.save_dtype = SaveDtype::kBf16;
  std::string path;
  std::vector<at::Tensor> trained;
  std::vector<std::string> names;
  RunTrainers(spec, 2, [&](int r, Trainer& t) {
    for (int i = 0; i < 2; ++i) t.Step();
    const std::vector<at::Tensor> full = t.fsdp()->FullParameters();  // collective
    CheckpointEvent ev = t.Checkpoint(CheckpointType::kFull);
    if (!ev.ok) throw std::runtime_error(ev.error);
    if (r != 0) return;
    path = ev.path;
    trained = full;
    for (const auto& item : t.model().named_parameters()) names.push_back(item.key());
  });
  ASSERT_FALSE(path.empty());
  const SafetensorsHeader header = ReadSafetensorsHeader(path + "/model.safetensors");
  ASSERT_EQ(header.tensors.size(), names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    const at::Tensor saved = ReadSafetensor(path + "/model.safetensors", header, names[i]);
    EXPECT_EQ(saved.scalar_type(), at::kBFloat16) << names[i];
    EXPECT_TRUE(torch::equal(saved, trained[i].to(at::kBFloat16))) << names[i];
  }
  CheckpointReader reader(path);
  for (const std::string& n : reader.OptimizerTensors()) {
    EXPECT_EQ(reader.OptimizerTensor(n).scalar_type(), at::kFloat) << n;
  }
  spec.checkpoint.resume_from = path;
  std::vector<at::Tensor> resumed;
  RunTrainers(spec, 2, [&](int r, Trainer& t) {
    const std::vector<at::Tensor> full = t.fsdp()->FullParameters();
    if (r == 0) resumed = full;
  });
  ASSERT_EQ(resumed.size(), trained.size());
  for (size_t i = 0; i < trained.size(); ++i) {
    EXPECT_TRUE(torch::equal(resumed[i], trained[i].to(at::kBFloat16).to(at::kFloat))) << names[i];
  }
}

// Counts the live and peak bytes of CPU tensors allocated by threads that
// turned counting on (rank 0's, as threads-as-ranks share one allocator).
class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* base) : base_(base) {}
  static thread_local bool counting;

  c10::DataPtr allocate(size_t n) override {
    c10::DataPtr inner = base_->allocate(n);
    if (!counting) return inner;
    auto* ctx = new Context{std::move(inner), n, this};
    {
      std::lock_guard<std::mutex> lock(mu_);
      live_ += static_cast<int64_t>(n);
      peak_ = std::max(peak_, live_);
    }
    return {ctx->inner.get(), ctx, &Free, ctx->inner.device()};
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }

  // Starts a measurement: the peak restarts from what is live now.
  int64_t Reset() {
    std::lock_guard<std::mutex> lock(mu_);
    peak_ = live_;
    return live_;
  }
  int64_t peak() {
    std::lock_guard<std::mutex> lock(mu_);
    return peak_;
  }

 private:
  struct Context {
    c10::DataPtr inner;
    size_t bytes;
    CountingAllocator* self;
  };
  static void Free(void* p) {
    auto* ctx = static_cast<Context*>(p);
    {
      std::lock_guard<std::mutex> lock(ctx->self->mu_);
      ctx->self->live_ -= static_cast<int64_t>(ctx->bytes);
    }
    delete ctx;
  }

  c10::Allocator* base_;
  std::mutex mu_;
  int64_t live_ = 0, peak_ = 0;
};
thread_local bool CountingAllocator::counting = false;

// A FULL save under FSDP assembles whole tensors on rank 0 one at a time:
// its extra memory peaks at no more than twice the largest tensor (counted
// by the allocator, not estimated), while the model is many times that.
TEST(FullSave, PeakExtraMemoryOnRankZeroIsAtMostTwiceTheLargestTensor) {
  static CountingAllocator allocator(c10::GetCPUAllocator());
  c10::SetCPUAllocator(&allocator, /*priority=*/100);
  TempDir dir;
  JobSpec spec = Fsdp(BaseSpec(dir.path()), ShardingStrategy::kFullShard, 2);
  spec.model.hidden = std::vector<int64_t>(10, 256);  // largest 784x256; the model is ~3.7x that
  int64_t extra = -1, largest = 0, total = 0;
  RunTrainers(spec, 2, [&](int r, Trainer& t) {
    t.Step();
    int64_t before = 0;
    if (r == 0) {
      for (const at::Tensor& p : t.model().parameters()) {
        largest = std::max<int64_t>(largest, p.numel() * 4);
        total += p.numel() * 4;
      }
      before = allocator.Reset();
      CountingAllocator::counting = true;
    }
    CheckpointEvent ev = t.Checkpoint(CheckpointType::kFull);
    if (r == 0) {
      CountingAllocator::counting = false;
      extra = allocator.peak() - before;
    }
    if (!ev.ok) throw std::runtime_error(ev.error);
  });
  // Were the whole model gathered on rank 0, the bound below would fail.
  ASSERT_GT(total, 3 * largest) << "the model must be much larger than its largest tensor";
  ASSERT_GT(extra, 0) << "nothing was counted: the measurement would prove nothing";
  std::cout << "FULL save: rank 0 peak extra " << extra << " B = " << static_cast<double>(extra) / largest
            << "x the largest tensor (" << largest << " B); model " << total << " B\n";
  EXPECT_LE(extra, 2 * largest) << "rank 0 held " << extra << " extra bytes; largest tensor " << largest << ", model "
                                << total;
}

// Train to 4, checkpoint, resume in new processes' stead (new trainers),
// train to 8: bitwise the uninterrupted run, data order and optimizer state
// included — and PowerSGD's error feedback, Q memories and iteration.
void ExpectResumeMatches(JobSpec spec, int world, CheckpointType type, const std::string& what) {
  TempDir a, b;
  spec.checkpoint.project_dir = a.path();
  std::vector<Snapshot> straight(world), resumed(world);
  RunTrainers(spec, world, [&](int r, Trainer& t) {
    EXPECT_EQ(t.Run().final_step, 8);
    straight[r] = Take(t);
  });
  spec.checkpoint.project_dir = b.path();
  std::string path;
  RunTrainers(spec, world, [&](int r, Trainer& t) {
    for (int i = 0; i < 4; ++i) t.Step();
    CheckpointEvent ev = t.Checkpoint(type);
    if (!ev.ok) throw std::runtime_error(ev.error);
    if (r == 0) path = ev.path;
  });
  spec.checkpoint.resume_from = "latest";
  RunTrainers(spec, world, [&](int r, Trainer& t) {
    EXPECT_EQ(t.resumed_from(), path);
    EXPECT_EQ(t.step(), 4);
    EXPECT_EQ(t.Run().final_step, 8);
    resumed[r] = Take(t);
  });
  for (int r = 0; r < world; ++r) ExpectBitwiseEqual(straight[r], resumed[r], what + " rank " + std::to_string(r));
}

TEST(Resume, DdpEqualsUninterruptedRun) { ExpectResumeMatches(BaseSpec(""), 2, CheckpointType::kFull, "DDP full"); }

TEST(Resume, PowerSgdStateIsRestored) {
  JobSpec spec = BaseSpec("");
  spec.ddp.comm_hook = CommHookType::kPowerSgd;
  spec.ddp.power_sgd.start_powerSGD_iter = 2;
  ExpectResumeMatches(spec, 2, CheckpointType::kSharded, "DDP PowerSGD sharded");
}

TEST(Resume, FsdpEqualsUninterruptedRun) {
  ExpectResumeMatches(Fsdp(BaseSpec(""), ShardingStrategy::kFullShard, 2), 2, CheckpointType::kSharded,
                      "FULL_SHARD sharded");
}

// Every model and optimizer tensor of a FULL checkpoint.
std::map<std::string, at::Tensor> AllTensors(const std::string& dir) {
  CheckpointReader r(dir);
  std::map<std::string, at::Tensor> out;
  for (const auto& n : r.ModelTensors()) out["model:" + n] = r.ModelTensor(n);
  for (const auto& n : r.OptimizerTensors()) out["optimizer:" + n] = r.OptimizerTensor(n);
  return out;
}

TEST(Reshard, ShardedAtTwoLoadsAtOneThreeFourAndUnderDdp) {
  TempDir src;
  const JobSpec spec = Fsdp(BaseSpec(src.path()), ShardingStrategy::kFullShard, 2);
  std::string sharded, full;
  RunTrainers(spec, 2, [&](int r, Trainer& t) {
    for (int i = 0; i < 3; ++i) t.Step();
    CheckpointEvent a = t.Checkpoint(CheckpointType::kSharded);
    CheckpointEvent b = t.Checkpoint(CheckpointType::kFull);
    if (!a.ok || !b.ok) throw std::runtime_error(a.error + b.error);
    if (r == 0) {
      sharded = a.path;
      full = b.path;
    }
  });
  const auto expected = AllTensors(full);
  ASSERT_EQ(expected.size(), 8u * 3);  // 8 parameters, each with exp_avg and exp_avg_sq
  struct Target {
    std::string name;
    JobSpec spec;
    int world;
    std::string from;
  };
  std::vector<Target> targets = {
      {"FULL_SHARD at 1 from sharded", Fsdp(BaseSpec(""), ShardingStrategy::kFullShard, 1), 1, sharded},
      {"FULL_SHARD at 4 from sharded", Fsdp(BaseSpec(""), ShardingStrategy::kFullShard, 4), 4, sharded},
      {"HYBRID_SHARD at 4 from sharded", Fsdp(BaseSpec(""), ShardingStrategy::kHybridShard, 4), 4, sharded},
      {"DDP at 3 from sharded", BaseSpec(""), 3, sharded},
      {"SHARD_GRAD_OP at 3 from full", Fsdp(BaseSpec(""), ShardingStrategy::kShardGradOp, 3), 3, full},
  };
  for (Target& target : targets) {
    TempDir out;
    target.spec.checkpoint.project_dir = out.path();
    target.spec.checkpoint.resume_from = target.from;
    target.spec.num_processes = target.world;
    std::string written;
    RunTrainers(target.spec, target.world, [&](int r, Trainer& t) {
      EXPECT_EQ(t.step(), 3) << target.name;
      CheckpointEvent ev = t.Checkpoint(CheckpointType::kFull);
      if (!ev.ok) throw std::runtime_error(ev.error);
      if (r == 0) written = ev.path;
    });
    const auto got = AllTensors(written);
    ASSERT_EQ(got.size(), expected.size()) << target.name;
    for (const auto& [name, t] : expected) {
      ASSERT_TRUE(got.count(name)) << target.name << " lacks " << name;
      EXPECT_TRUE(torch::equal(got.at(name), t)) << target.name << ": " << name;
    }
  }
}

TEST(FullLayout, ReadByPythonSafetensorsIntoAnEquivalentModule) {
  TempDir dir, ref;
  JobSpec spec = Fsdp(BaseSpec(dir.path()), ShardingStrategy::kFullShard, 2);
  spec.checkpoint.max_shard_size = "60KB";  // several model files plus the index
  std::string full, sharded;
  RunTrainers(spec, 2, [&](int r, Trainer& t) {
    for (int i = 0; i < 2; ++i) t.Step();
    const std::vector<at::Tensor> params = t.fsdp()->FullParameters();  // collective
    CheckpointEvent a = t.Checkpoint(CheckpointType::kFull);
    CheckpointEvent b = t.Checkpoint(CheckpointType::kSharded);
    if (!a.ok || !b.ok) throw std::runtime_error(a.error + b.error);
    if (r != 0) return;
    full = a.path;
    sharded = b.path;
    // What the worker holds, in a plain format of our own (not safetensors).
    nlohmann::json table = nlohmann::json::array();
    std::ofstream bin(ref.path() + "/reference.bin", std::ios::binary);
    size_t i = 0;
    for (const auto& item : t.model().named_parameters()) {
      const at::Tensor p = params[i++].contiguous();
      table.push_back({{"name", item.key()}, {"shape", p.sizes().vec()}, {"dtype", "float32"}});
      bin.write(static_cast<const char*>(p.data_ptr()), static_cast<std::streamsize>(p.nbytes()));
    }
    std::ofstream(ref.path() + "/reference.json") << table.dump();
  });
  const std::string cmd = TestPython() + " " + TRAINYARD_SOURCE_DIR + "/tests/fixtures/checkpoint_check.py " + full +
                          " " + sharded + " " + ref.path();
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

// A real write failure (the file-size limit makes write() fail with EFBIG):
// reported on every rank, nothing left that looks complete, the previous
// checkpoint still the latest; numbering continues.
TEST(Failures, WriteErrorLeavesPreviousCheckpointLatest) {
  TempDir dir;
  JobSpec spec = BaseSpec(dir.path());
  std::vector<CheckpointEvent> failed(2);
  std::string first, third;
  std::atomic<int> at_barrier{0};
  RunTrainers(spec, 2, [&](int r, Trainer& t) {
    t.Step();
    CheckpointEvent ok = t.Checkpoint(CheckpointType::kFull);
    if (!ok.ok) throw std::runtime_error(ok.error);
    if (r == 0) first = ok.path;
    t.Step();
    // Both ranks are here before the limit changes (it is process-wide).
    at_barrier.fetch_add(1);
    while (at_barrier.load() < 2) std::this_thread::yield();
    struct rlimit old {};
    if (r == 0) {
      ::signal(SIGXFSZ, SIG_IGN);
      getrlimit(RLIMIT_FSIZE, &old);
      struct rlimit tiny = old;
      tiny.rlim_cur = 4096;
      setrlimit(RLIMIT_FSIZE, &tiny);
    }
    at_barrier.fetch_add(1);
    while (at_barrier.load() < 4) std::this_thread::yield();
    failed[r] = t.Checkpoint(CheckpointType::kFull);
    at_barrier.fetch_add(1);
    while (at_barrier.load() < 6) std::this_thread::yield();
    if (r == 0) setrlimit(RLIMIT_FSIZE, &old);
    at_barrier.fetch_add(1);
    while (at_barrier.load() < 8) std::this_thread::yield();
    t.Step();
    CheckpointEvent again = t.Checkpoint(CheckpointType::kFull);
    if (!again.ok) throw std::runtime_error(again.error);
    if (r == 0) third = again.path;
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_FALSE(failed[r].ok);
    EXPECT_FALSE(failed[r].error.empty());
  }
  EXPECT_NE(failed[0].error.find("File too large"), std::string::npos) << failed[0].error;
  EXPECT_EQ(fs::path(first).filename(), "checkpoint_0");
  EXPECT_EQ(fs::path(third).filename(), "checkpoint_2");  // N never reused
  CheckpointScan scan = CheckpointDir(dir.path()).List(/*verify=*/true);
  ASSERT_EQ(scan.complete.size(), 2u);
  EXPECT_EQ(scan.complete[0].path, third);
  EXPECT_EQ(scan.complete[1].path, first);
  EXPECT_FALSE(fs::exists(dir.path() + "/checkpoints/checkpoint_1"));
  for (const auto& e : fs::directory_iterator(dir.path() + "/checkpoints")) {
    EXPECT_EQ(e.path().filename().string().rfind(".staging", 0), std::string::npos) << e.path();
  }
}

TEST(Failures, ExplicitResumePathMustBeComplete) {
  TempDir dir;
  fs::create_directories(dir.path() + "/checkpoints/checkpoint_3");
  JobSpec spec = BaseSpec(dir.path());
  spec.checkpoint.resume_from = dir.path() + "/checkpoints/checkpoint_3";
  try {
    Trainer t(spec, 0, 1, DistContext{}, nullptr, nullptr);
    FAIL() << "resumed from an incomplete checkpoint";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no manifest"), std::string::npos) << e.what();
  }
}

// Records rank 0's checkpoint reports; asks for a checkpoint at a step.
struct Recorder : MetricsSink {
  TrainerControl* control = nullptr;
  int64_t request_at = -1;
  CheckpointRequest request;
  std::vector<CheckpointEvent> events;
  void OnStep(const StepMetrics& m) override {
    if (m.step == request_at) control->RequestCheckpoint(request);
  }
  void OnCheckpoint(const CheckpointEvent& e) override { events.push_back(e); }
  std::vector<std::string> notes;
  void OnNote(const std::string& n) override { notes.push_back(n); }
};

TEST(Requests, CheckpointThenStopTakesEffectOnEveryRankAtOneStep) {
  TempDir dir;
  JobSpec spec = BaseSpec(dir.path());
  spec.max_steps = 50;
  TrainerControl control;
  Recorder rec;
  rec.control = &control;
  rec.request_at = 3;
  rec.request = {CheckpointType::kSharded, 7, /*stop_after=*/true};
  std::vector<TrainResult> results(2);
  RunTrainers(
      spec, 2, [&](int r, Trainer& t) { results[r] = t.Run(); }, &rec, &control);
  // Asked during step 3; the next step's exchange carries it.
  for (const TrainResult& r : results) {
    EXPECT_TRUE(r.stopped);
    EXPECT_EQ(r.final_step, 4);
  }
  ASSERT_EQ(rec.events.size(), 1u);
  const CheckpointEvent& e = rec.events[0];
  EXPECT_TRUE(e.ok) << e.error;
  EXPECT_EQ(e.request_id, 7);
  EXPECT_EQ(e.type, CheckpointType::kSharded);
  EXPECT_EQ(e.trigger, "cancel");
  EXPECT_EQ(e.step, 4);
  EXPECT_GT(e.bytes, 0);
  EXPECT_TRUE(CheckCheckpoint(e.path, true).ok());
}

TEST(Periodic, EveryStepsWithTotalLimitAndFinal) {
  TempDir dir;
  JobSpec spec = BaseSpec(dir.path());
  spec.max_steps = 7;
  spec.checkpoint.every_steps = 2;
  spec.checkpoint.total_limit = 2;
  spec.checkpoint.save_final = true;
  Recorder rec;
  std::vector<TrainResult> results(2);
  RunTrainers(
      spec, 2, [&](int r, Trainer& t) { results[r] = t.Run(); }, &rec);
  // Steps 2, 4, 6 periodic, 7 final.
  ASSERT_EQ(rec.events.size(), 4u);
  std::vector<int64_t> steps;
  for (const auto& e : rec.events) steps.push_back(e.step);
  EXPECT_EQ(steps, (std::vector<int64_t>{2, 4, 6, 7}));
  EXPECT_EQ(rec.events.back().trigger, "final");
  EXPECT_EQ(results[0].final_checkpoint, rec.events.back().path);
  CheckpointScan scan = CheckpointDir(dir.path()).List(true);
  ASSERT_EQ(scan.complete.size(), 2u);
  EXPECT_EQ(scan.complete[0].index, 3);
  EXPECT_EQ(scan.complete[1].index, 2);
  // The final checkpoint's step is 7 and it loads. Resumed there, the job
  // has nothing to train: no second final checkpoint, and a note says so.
  spec.checkpoint.resume_from = "latest";
  Recorder again;
  RunTrainers(
      spec, 2,
      [&](int r, Trainer& t) {
        EXPECT_EQ(t.step(), 7);
        results[r] = t.Run();
      },
      &again);
  EXPECT_TRUE(again.events.empty()) << again.events.size() << " checkpoints, the first at step "
                                    << again.events.front().step;
  EXPECT_EQ(results[0].final_checkpoint, rec.events.back().path);
  EXPECT_EQ(results[0].start_step, 7);
  EXPECT_EQ(results[0].final_step, 7);
  const std::string said =
      "already at step 7 (max_steps 7, resumed from " + rec.events.back().path + "): nothing to train";
  EXPECT_EQ(std::count(again.notes.begin(), again.notes.end(), said), 1) << absl::StrJoin(again.notes, "\n");
}

}  // namespace
}  // namespace trainyard
