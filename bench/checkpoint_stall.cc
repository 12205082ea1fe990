// bench/checkpoint_stall: what checkpoints cost training. A GPT under FSDP
// FULL_SHARD at N = 2 ranks (processes) trains the same steps under four
// settings, interleaved round by round: no checkpoints; a FULL checkpoint
// every --every steps, asynchronous (checkpoint.async, the default) and
// synchronous; and an in-memory snapshot every --snapshot-every steps.
// It prints the time training waited per save (synchronous: the whole save;
// asynchronous: the copy at the step boundary), each setting's throughput
// relative to no checkpoints, and how much longer the steps that save are
// than the others (per interval: the boundary's share of training time,
// free of the drift between rounds). The order of the settings rotates from
// round to round.
//
//   checkpoint_stall [--dir DIR] [--layers L] [--width W] [--vocab V]
//                    [--steps S] [--every E] [--snapshot-every K] [--rounds R]
#include <torch/torch.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "bench/bench_util.h"
#include "common/allocator_tuning.h"
#include "common/job_spec.h"
#include "worker/collectives/dist_setup.h"
#include "worker/train/trainer.h"
#include "worker/worker_main.h"

namespace trainyard {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string dir;
  int layers = 8, width = 512, vocab = 8192;
  int steps = 150, every = 50, snapshot_every = 5, rounds = 2, warmup = 5;
};

const char* const kModes[] = {"none", "async", "sync", "snapshot"};

JobSpec Spec(const Options& o, const std::string& mode, const std::string& project_dir) {
  JobSpec spec;
  spec.model.kind = ModelKind::kGpt;
  spec.model.layers = o.layers;
  spec.model.width = o.width;
  spec.model.heads = 8;
  spec.model.context = 64;
  spec.model.vocab = o.vocab;
  spec.data.batch_size = 2;
  spec.optimizer.kind = OptimizerKind::kAdamW;
  spec.num_processes = 2;
  spec.max_steps = 1 << 30;
  spec.backend = Backend::kGloo;
  spec.distributed_type = DistributedType::kFsdp;
  spec.fsdp.sharding_strategy = ShardingStrategy::kFullShard;
  spec.fsdp.auto_wrap_policy = WrapPolicy::kTransformerBased;
  spec.fsdp.transformer_layer_cls_to_wrap = {"Block"};
  spec.checkpoint.project_dir = project_dir;
  spec.checkpoint.save_final = false;
  spec.checkpoint.type = CheckpointType::kFull;
  spec.checkpoint.total_limit = 2;
  if (mode == "async" || mode == "sync") spec.checkpoint.every_steps = o.every;
  spec.checkpoint.async = mode != "sync";
  if (mode == "snapshot") spec.checkpoint.snapshot_every_steps = o.snapshot_every;
  return spec;
}

struct Saves : MetricsSink {
  std::vector<double> blocking, seconds;
  std::vector<int64_t> host_bytes;
  void OnStep(const StepMetrics&) override {}
  void OnCheckpoint(const CheckpointEvent& e) override {
    if (!e.ok) throw std::runtime_error("checkpoint failed: " + e.error);
    blocking.push_back(e.blocking_seconds);
    seconds.push_back(e.seconds);
    host_bytes.push_back(e.host_bytes);
  }
};

int RunRank(const Options& o) {
  TuneAllocator();  // as trainyard-worker does
  at::set_num_threads(1);
  const int rank = std::stoi(getenv("RANK"));
  const int world = std::stoi(getenv("WORLD_SIZE"));
  RendezvousOptions ro;
  ro.master_port = std::stoi(getenv("MASTER_PORT"));
  ro.rank = rank;
  ro.world_size = world;
  ro.timeout = std::chrono::minutes(10);
  const DistSetup dist = SetUpDistributed(Spec(o, "none", o.dir), ro);
  nlohmann::json out = nlohmann::json::object();
  for (const char* m : kModes) out[m] = {{"steps_per_s", nlohmann::json::array()}};
  for (int round = 0; round < o.rounds; ++round) {
    for (int i = 0; i < 4; ++i) {
      // The settings take turns, and each round starts with the next one.
      const std::string mode = kModes[(round + i) % 4];
      const std::string project = o.dir + "/" + mode + "-" + std::to_string(round);
      Saves saves;
      DistContext context = dist.context();
      context.snapshot_dir = o.dir + "/shm-" + std::to_string(round);
      if (mode == "snapshot") context.snapshot_dir = "/dev/shm/trainyard-bench-" + std::to_string(getppid());
      Trainer t(Spec(o, mode, project), rank, world, context, rank == 0 ? &saves : nullptr, nullptr);
      for (int i = 0; i < o.warmup; ++i) t.Step();
      dist.world->barrier()->wait();
      const auto t0 = Clock::now();
      // Steps warmup+1 .. warmup+steps: saves at multiples of `every`. Each
      // step's time goes with the steps that saved, or with the others.
      const int every = mode == "snapshot" ? o.snapshot_every : mode == "none" ? 0 : o.every;
      for (int i = 0; i < o.steps; ++i) {
        const auto s0 = Clock::now();
        t.Step();
        const double took = std::chrono::duration<double>(Clock::now() - s0).count();
        const bool saved = every > 0 && (o.warmup + i + 1) % every == 0;
        out[mode][saved ? "saving_step_s" : "plain_step_s"].push_back(took);
      }
      dist.world->barrier()->wait();
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      t.WaitForCheckpoints();
      out[mode]["steps_per_s"].push_back(o.steps / s);
      for (double b : saves.blocking) out[mode]["blocking"].push_back(b);
      for (double b : saves.seconds) out[mode]["seconds"].push_back(b);
      for (int64_t b : saves.host_bytes) out[mode]["host_bytes"].push_back(b);
      dist.world->barrier()->wait();
      if (rank == 0) {
        std::error_code ec;
        fs::remove_all(project, ec);
        if (mode == "snapshot") fs::remove_all(context.snapshot_dir, ec);
      }
    }
  }
  if (rank == 0) {
    std::cout << out.dump() << std::endl;
  }
  return 0;
}

}  // namespace
}  // namespace trainyard

int main(int argc, char** argv) {
  using namespace trainyard;
  CLI::App app{"Trainyard: what checkpoints and snapshots cost training"};
  Options o;
  o.dir = (fs::temp_directory_path() / "trainyard-bench-stall").string();
  std::string role = "orchestrate";
  app.add_option("--dir", o.dir, "Directory for the checkpoints (removed afterwards)")->capture_default_str();
  app.add_option("--layers", o.layers)->capture_default_str();
  app.add_option("--width", o.width)->capture_default_str();
  app.add_option("--vocab", o.vocab)->capture_default_str();
  app.add_option("--steps", o.steps, "Measured steps per setting and round")->capture_default_str();
  app.add_option("--every", o.every, "Checkpoint every this many steps")->capture_default_str();
  app.add_option("--snapshot-every", o.snapshot_every, "Snapshot every this many steps")->capture_default_str();
  app.add_option("--rounds", o.rounds, "Rounds; the settings alternate within each")->capture_default_str();
  app.add_option("--warmup", o.warmup, "Unmeasured steps before each measurement")->capture_default_str();
  app.add_option("--role", role, "internal");
  CLI11_PARSE(app, argc, argv);
  if (role == "rank") return RunRank(o);

  fs::remove_all(o.dir);
  fs::create_directories(o.dir);
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  std::vector<std::string> a = {self,
                                "--role",
                                "rank",
                                "--dir",
                                o.dir,
                                "--layers",
                                std::to_string(o.layers),
                                "--width",
                                std::to_string(o.width),
                                "--vocab",
                                std::to_string(o.vocab),
                                "--steps",
                                std::to_string(o.steps),
                                "--every",
                                std::to_string(o.every),
                                "--snapshot-every",
                                std::to_string(o.snapshot_every),
                                "--rounds",
                                std::to_string(o.rounds),
                                "--warmup",
                                std::to_string(o.warmup)};
  auto j = bench::RunRanks(2, a, bench::OurSettings());
  auto median = [](const nlohmann::json& v) {
    return v.is_array() && !v.empty() ? bench::Summarize(v.get<std::vector<double>>()).median : 0.0;
  };
  auto maximum = [](const nlohmann::json& v) {
    return v.is_array() && !v.empty() ? bench::Summarize(v.get<std::vector<double>>()).max : 0.0;
  };
  const double base = median(j["none"]["steps_per_s"]);
  std::printf(
      "| setting | steps/s (median of %d rounds) | vs no checkpoints | saves | training waited per save, s (median / "
      "max) | save wall time, s (median) | host copy, MB |\n|---|---|---|---|---|---|---|\n",
      o.rounds);
  for (const char* m : kModes) {
    const auto& k = j[m];
    const double sps = median(k["steps_per_s"]);
    const size_t saves = k.contains("blocking") ? k["blocking"].size() : 0;
    const double host = k.contains("host_bytes") && !k["host_bytes"].empty() ? k["host_bytes"][0].get<double>() : 0.0;
    std::printf("| %s | %.3f | %.3f | %zu | %.3f / %.3f | %.3f | %.1f |\n", m, sps, sps / base, saves,
                median(k["blocking"]), maximum(k["blocking"]), median(k["seconds"]), host / 1e6);
  }
  const double sync_wait = median(j["sync"]["blocking"]), async_wait = median(j["async"]["blocking"]);
  if (sync_wait > 0) std::printf("\nasynchronous wait / synchronous wait: %.3f\n", async_wait / sync_wait);
  // The cost at the step boundary alone, free of drift between rounds: how
  // much longer a step that saves is than the others, per interval.
  std::printf(
      "\n| setting | step that saves, s (median) | other steps, s (median) | extra per save, s | extra / interval "
      "|\n|---|---|---|---|---|\n");
  for (const char* m : {"async", "sync", "snapshot"}) {
    const auto& k = j[m];
    const double saving = median(k["saving_step_s"]), plain = median(k["plain_step_s"]);
    const int every = std::string(m) == "snapshot" ? o.snapshot_every : o.every;
    std::printf("| %s | %.3f | %.3f | %.3f | %.2f%% |\n", m, saving, plain, saving - plain,
                100.0 * (saving - plain) / (every * plain));
  }
  std::cout << "model: GPT " << o.layers << " layers, width " << o.width << ", vocab " << o.vocab
            << ", AdamW, FSDP FULL_SHARD at N=2 (processes, 1 thread each), FULL checkpoints every " << o.every
            << " steps, snapshots (SHARDED, /dev/shm) every " << o.snapshot_every << "; " << o.steps
            << " measured steps per setting after " << o.warmup << " unmeasured.\ncommand: " << argv[0] << " --layers "
            << o.layers << " --width " << o.width << " --vocab " << o.vocab << " --steps " << o.steps << " --every "
            << o.every << " --snapshot-every " << o.snapshot_every << " --rounds " << o.rounds << " --warmup "
            << o.warmup << "\n";
  fs::remove_all(o.dir);
  return 0;
}
