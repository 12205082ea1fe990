// bench/ddp_overhead: DDP overhead of Trainyard's worker vs PyTorch's Python
// DDP, by the method of the PyTorch/XLA DDP note: per-rank samples/s of the
// same model and per-rank batch at world 1 without DDP and at world 2 with
// DDP (1 intra-op thread per rank, Gloo on loopback), with mean, median,
// p90, standard deviation and coefficient of variation over steps.
//
// Trainyard's steps run through the worker's real Trainer (model, Reducer
// DDP, optimizer and the per-step control exchange); the synthetic data
// loading time is excluded from the step time, as the Python peer trains on
// a pre-made batch. Both sides run with one thread per process and the
// worker's allocator thresholds (bench_util's RunEnvironment); the peer runs
// a second time as a user runs it, with glibc's defaults, and every "vs
// PyTorch" ratio is against the first. Ranks are child processes of this program. Every setup
// runs `--rounds` times, interleaved with the others, and its steps are
// pooled: on a shared machine whose speed drifts over minutes, setups run
// one after the other would otherwise each meet a different machine.
//
//   ddp_overhead [--steps-percent P] [--warmup W] [--rounds R] [--only K] [--python PATH]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>

#include "bench/bench_util.h"
#include "common/allocator_tuning.h"
#include "common/job_spec.h"
#include "worker/collectives/dist_setup.h"
#include "worker/collectives/process_group.h"
#include "worker/collectives/shm_collectives.h"
#include "worker/train/trainer.h"

namespace trainyard {
namespace {

struct Config {
  std::string label;
  ModelKind kind;
  std::vector<int64_t> hidden;  // mlp
  int64_t batch;
  int steps;
  int64_t channels = 16;    // resnet
  int64_t image_size = 32;  // resnet, resnet50
};

using bench::Stats;
using bench::Summarize;

// Collects per-step training time (step minus data loading) after warm-up.
class TimingSink final : public MetricsSink {
 public:
  explicit TimingSink(int warmup) : warmup_(warmup) {}
  void OnStep(const StepMetrics& m) override {
    if (m.step <= warmup_) return;
    train_seconds.push_back(m.step_seconds - m.data_seconds);
    hook_seconds += m.comm_hook_seconds;
    phases["compute"].push_back(m.compute_seconds);
    phases["optimizer"].push_back(m.optimizer_seconds);
    phases["other"].push_back(m.step_seconds - m.data_seconds - m.compute_seconds - m.optimizer_seconds);
  }
  std::vector<double> train_seconds;
  double hook_seconds = 0;  // in the gradient allreduce (shared-memory hook)
  // Rank 0's step by phase (its StepMetrics): forward and backward, the
  // optimizer, and the rest (the step's agreement, its accounting).
  std::map<std::string, std::vector<double>> phases;

 private:
  int warmup_;
};

// One rank of a Trainyard run; rank 0 prints its step times as JSON.
// With no_ddp, `world` processes train independently at the same time: the
// cost of sharing the machine, without any communication.
int RunRank(int rank, int world, int port, const Config& c, int warmup, bool no_ddp, const std::string& transport) {
  at::set_num_threads(1);
  TuneAllocator();  // as trainyard-worker does
  JobSpec spec;
  spec.model.kind = c.kind;
  spec.model.hidden = c.hidden;
  spec.model.channels = c.channels;
  spec.model.image_size = c.image_size;
  spec.data.batch_size = c.batch;
  spec.data.num_samples = 60000;
  spec.optimizer.kind = OptimizerKind::kAdamW;
  spec.optimizer.lr = 1e-3;
  spec.optimizer.weight_decay = 0.01;
  spec.max_steps = warmup + c.steps;
  const bool reporter = rank == 0;
  if (no_ddp) world = 1, rank = 0;
  spec.num_processes = world;
  spec.distributed_type = world > 1 ? DistributedType::kDdp : DistributedType::kNo;
  spec.ddp.intra_host_transport =
      transport == "shm" ? IntraHostTransport::kSharedMemory : IntraHostTransport::kProcessGroup;
  RendezvousOptions ro;
  ro.master_port = port;
  ro.rank = rank;
  ro.world_size = world;
  ro.timeout = std::chrono::seconds(120);
  spec.backend = Backend::kGloo;
  const DistSetup dist = SetUpDistributed(spec, ro);
  TimingSink sink(warmup);
  Trainer trainer(spec, rank, world, dist.context(), &sink, nullptr);
  trainer.Run();
  if (dist.world) dist.world->barrier()->wait();
  if (reporter)
    std::cout << nlohmann::json{{"train_seconds", sink.train_seconds},
                                {"hook_seconds", sink.hook_seconds},
                                {"phases", sink.phases}}
                     .dump()
              << std::endl;
  return 0;
}

nlohmann::json RunProcesses(const std::vector<std::string>& argv, int world, const bench::RunEnvironment& env) {
  return bench::RunRanks(world, argv, env);
}

std::vector<double> SamplesPerSecond(const nlohmann::json& j, int64_t batch) {
  std::vector<double> sps;
  for (double t : j["train_seconds"]) sps.push_back(static_cast<double>(batch) / t);
  return sps;
}

std::string Join(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

}  // namespace
}  // namespace trainyard

int main(int argc, char** argv) {
  using namespace trainyard;
  CLI::App app{"DDP overhead: Trainyard vs PyTorch Python DDP"};
  int steps_scale = 100, warmup = 20;
  std::string python = TRAINYARD_PYTHON;  // the venv whose torch the worker is built against
  std::string role = "orchestrate";
  int rank_hidden_cfg = 0;
  bool no_ddp = false;
  std::string transport = "shm";
  app.add_option("--steps-percent", steps_scale, "Scale the measured step counts (percent)")->capture_default_str();
  app.add_option("--warmup", warmup, "Warm-up steps not measured (in every process)")->capture_default_str();
  int rounds = 3;
  app.add_option("--rounds", rounds, "Run every setup this many times, interleaved, each with 1/rounds of the steps")
      ->capture_default_str()
      ->check(CLI::Range(1, 100));
  int round_steps = 0;
  app.add_option("--round-steps", round_steps, "internal: measured steps of this process");
  app.add_option("--python", python, "Python with torch: the peer (default: the one the build used)")
      ->capture_default_str();
  app.add_option("--role", role, "internal: orchestrate | rank");
  app.add_option("--config", rank_hidden_cfg, "internal: config index");
  app.add_flag("--no-ddp", no_ddp, "internal: ranks train independently");
  app.add_option("--transport", transport, "internal: shm | process_group");
  int only = -1;
  app.add_option("--only", only, "Run only this row of the model table (0-based)");
  CLI11_PARSE(app, argc, argv);

  std::vector<Config> configs = {
      {"MLP 784-1024-1024-10, batch 64", ModelKind::kMlp, {1024, 1024}, 64, 300 * steps_scale / 100},
      {"MLP 784-128-10, batch 32", ModelKind::kMlp, {128}, 32, 2000 * steps_scale / 100},
      {"MNIST CNN, batch 64", ModelKind::kCnn, {}, 64, 200 * steps_scale / 100},
      {"ResNet-18 (16 channels, BatchNorm) 3x32x32, batch 32", ModelKind::kResNet, {}, 32, 60 * steps_scale / 100},
      // torchvision's resnet50 on both sides (25.5M parameters: 98 MiB of gradients a step).
      {"ResNet-50 (torchvision) 3x32x32, batch 8", ModelKind::kResNet50, {}, 8, 51 * steps_scale / 100},
  };
  if (role == "rank") {
    Config c = configs.at(rank_hidden_cfg);
    if (round_steps > 0) c.steps = round_steps;
    return RunRank(std::stoi(getenv("RANK")), std::stoi(getenv("WORLD_SIZE")), std::stoi(getenv("MASTER_PORT")), c,
                   warmup, no_ddp, transport);
  }

  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string script = std::filesystem::path(TRAINYARD_BENCH_DIR) / "python_ddp.py";
  std::ostringstream md;
  md << "| model | implementation | setup | mean samples/s/rank | min | median | max | CV | DDP overhead vs 1 process "
        "(vs 2 processes) | vs PyTorch, our settings |\n"
     << "|---|---|---|---|---|---|---|---|---|---|\n";
  for (size_t ci = 0; ci < configs.size(); ++ci) {
    if (only >= 0 && static_cast<size_t>(only) != ci) continue;
    const Config& c = configs[ci];
    struct Run {
      std::string impl;
      std::string setup;
      Stats stats;
    };
    std::vector<Run> runs;
    // Samples/s of every step measured, per setup, pooled over the rounds.
    const int round_steps = std::max(1, c.steps / rounds);
    double hook_s = 0, step_s = 0, hook_steps = 0;  // rank 0 of shared-memory DDP, summed over rounds
    auto trainyard = [&](int procs, const std::vector<std::string>& extra) {
      std::vector<std::string> a = {self,
                                    "--role",
                                    "rank",
                                    "--config",
                                    std::to_string(ci),
                                    "--warmup",
                                    std::to_string(warmup),
                                    "--round-steps",
                                    std::to_string(round_steps)};
      a.insert(a.end(), extra.begin(), extra.end());
      const nlohmann::json j = RunProcesses(a, procs, bench::OurSettings());
      if (j.value("hook_seconds", 0.0) > 0) {
        hook_s += j["hook_seconds"].get<double>();
        for (double t : j["train_seconds"]) step_s += t;
        hook_steps += static_cast<double>(j["train_seconds"].size());
      }
      return SamplesPerSecond(j, c.batch);
    };
    auto pytorch = [&](int procs, const std::vector<std::string>& extra, const bench::RunEnvironment& env) {
      // The engine's AdamW is ATen's fused one (the spec's fused.optimizer, on by default): the peer's is
      // too, torch.optim.AdamW(fused=True).
      std::vector<std::string> a = {python,         script,
                                    "--model",      ModelKindName(c.kind),
                                    "--hidden",     Join(c.hidden),
                                    "--channels",   std::to_string(c.channels),
                                    "--image-size", std::to_string(c.image_size),
                                    "--batch",      std::to_string(c.batch),
                                    "--steps",      std::to_string(round_steps),
                                    "--warmup",     std::to_string(warmup),
                                    "--fused"};
      a.insert(a.end(), extra.begin(), extra.end());
      return SamplesPerSecond(RunProcesses(a, procs, env), c.batch);
    };
    const std::string kTy = "Trainyard", kPy = "PyTorch DDP (Python), our settings",
                      kPyDefaults = "PyTorch DDP (Python), defaults", kAcc = "Accelerate (Python), our settings";
    const bench::RunEnvironment ours = bench::OurSettings(), defaults = bench::PeerDefaults();
    struct Setup {
      std::string impl, setup;
      std::function<std::vector<double>()> run;
    };
    const std::vector<Setup> setups = {
        {kTy, "1 process", [&] { return trainyard(1, {}); }},
        {kPy, "1 process", [&] { return pytorch(1, {}, ours); }},
        {kPyDefaults, "1 process", [&] { return pytorch(1, {}, defaults); }},
        {kTy, "2 processes, no DDP", [&] { return trainyard(2, {"--no-ddp"}); }},
        {kPy, "2 processes, no DDP", [&] { return pytorch(2, {"--no-ddp"}, ours); }},
        {kPyDefaults, "2 processes, no DDP", [&] { return pytorch(2, {"--no-ddp"}, defaults); }},
        {kTy, "2 ranks, DDP, shared memory",
         [&] {
           return trainyard(2, {"--transport", "shm"});
         }},
        {kTy, "2 ranks, DDP, Gloo",
         [&] {
           return trainyard(2, {"--transport", "process_group"});
         }},
        {kPy, "2 ranks, DDP, Gloo", [&] { return pytorch(2, {}, ours); }},
        {kPyDefaults, "2 ranks, DDP, Gloo", [&] { return pytorch(2, {}, defaults); }},
        {kAcc, "2 ranks, DDP, Gloo", [&] { return pytorch(2, {"--accelerate"}, ours); }},
    };
    // Rounds interleave the setups (A B C … A B C …), so a drift of the
    // machine's speed during the run weighs on all of them alike.
    std::vector<std::vector<double>> samples(setups.size());
    for (int round = 0; round < rounds; ++round) {
      for (size_t i = 0; i < setups.size(); ++i) {
        std::vector<double> v = setups[i].run();
        samples[i].insert(samples[i].end(), v.begin(), v.end());
      }
    }
    for (size_t i = 0; i < setups.size(); ++i) runs.push_back({setups[i].impl, setups[i].setup, Summarize(samples[i])});
    const double allreduce_ms = hook_steps > 0 ? 1e3 * hook_s / hook_steps : 0;
    const double step_ms = hook_steps > 0 ? 1e3 * step_s / hook_steps : 0;
    auto find = [&](const std::string& impl, const std::string& setup) -> const Stats& {
      for (const Run& r : runs) {
        if (r.impl == impl && r.setup == setup) return r.stats;
      }
      throw std::logic_error("missing run");
    };
    for (const Run& r : runs) {
      char extra[96] = "", vs_peer[64] = "";
      if (r.setup.rfind("2 ranks", 0) == 0) {
        // Accelerate runs PyTorch: its baselines are PyTorch's without DDP.
        const std::string& base = r.impl == kAcc ? kPy : r.impl;
        const double vs1 = 1.0 - r.stats.mean / find(base, "1 process").mean;
        const double vs2 = 1.0 - r.stats.mean / find(base, "2 processes, no DDP").mean;
        std::snprintf(extra, sizeof(extra), "%.1f%% (%.1f%%)", vs1 * 100, vs2 * 100);
      }
      if (r.impl == kTy) {
        // Shared memory is a transport PyTorch lacks on CPU: against its Gloo.
        const std::string peer_setup = r.setup == "2 ranks, DDP, shared memory" ? "2 ranks, DDP, Gloo" : r.setup;
        std::snprintf(vs_peer, sizeof(vs_peer), "%.2fx", r.stats.mean / find(kPy, peer_setup).mean);
      }
      char line[700];
      std::snprintf(line, sizeof(line), "| %s | %s | %s | %.1f | %.1f | %.1f | %.1f | %.3f | %s | %s |\n",
                    c.label.c_str(), r.impl.c_str(), r.setup.c_str(), r.stats.mean, r.stats.min, r.stats.median,
                    r.stats.max, r.stats.cv, extra, vs_peer);
      md << line;
    }
    if (step_ms > 0) {
      char line[200];
      std::snprintf(
          line, sizeof(line),
          "| %s | Trainyard | shared-memory allreduce per step (rank 0) | %.2f ms of %.1f ms |  |  |  |  |  |  |\n",
          c.label.c_str(), allreduce_ms, step_ms);
      md << line;
    }
  }
  std::cout << bench::DescribeConditions() << "\n\n" << md.str();
  std::cout << "\nDDP overhead = 1 - mean(2 ranks with DDP) / mean(1 process without DDP), per-rank samples/s;\n"
            << "in parentheses against 2 independent processes without DDP (machine sharing factored out).\n";
  std::cout << "command: " << argv[0] << " --steps-percent " << steps_scale << " --warmup " << warmup << " --rounds "
            << rounds << (only >= 0 ? " --only " + std::to_string(only) : std::string()) << "\n";
  return 0;
}
