// bench/comm_hooks: step time, samples/s and gradient wire bytes per step of
// Trainyard's DDP communication hooks on a communication-bound model (an MLP
// with several 1024x1024 layers, small batch), 2 ranks, over
//   - loopback, and
//   - two network namespaces joined by a veth pair shaped to 100 Mbit/s
//     (bench/netns.sh; needs root, skipped with a message otherwise).
// Each rank runs the worker's real Trainer; gradients go through the process
// group (Gloo), never shared memory, so the link is what is measured.
//
//   comm_hooks [--steps N] [--rate 100mbit] [--skip-loopback] [--skip-netns]
#include <torch/torch.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "bench/bench_util.h"
#include "common/job_spec.h"
#include "worker/process_group.h"
#include "worker/trainer.h"

namespace trainyard {
namespace {

struct HookConfig {
  std::string label;
  CommHookType hook;
  int rank;
};

const std::vector<HookConfig>& Configs() {
  static const std::vector<HookConfig> kConfigs = {
      {"no hook (fp32 allreduce)", CommHookType::kNone, 0},
      {"fp16", CommHookType::kFp16, 0},
      {"bf16", CommHookType::kBf16, 0},
      {"PowerSGD rank 1", CommHookType::kPowerSgd, 1},
      {"PowerSGD rank 2", CommHookType::kPowerSgd, 2},
      {"PowerSGD rank 4", CommHookType::kPowerSgd, 4},
      {"batched PowerSGD rank 2", CommHookType::kBatchedPowerSgd, 2},
  };
  return kConfigs;
}

constexpr int64_t kBatch = 16;
const std::vector<int64_t> kHidden = {1024, 1024, 1024, 1024};

class Sink final : public MetricsSink {
 public:
  explicit Sink(int warmup) : warmup_(warmup) {}
  void OnStep(const StepMetrics& m) override {
    if (m.step <= warmup_) return;
    step_seconds.push_back(m.step_seconds - m.data_seconds);
    wire.push_back(static_cast<double>(m.comm_wire_bytes));
    fp32.push_back(static_cast<double>(m.comm_fp32_bytes));
  }
  std::vector<double> step_seconds, wire, fp32;

 private:
  int warmup_;
};

int RunRank(const HookConfig& c, int steps, int warmup, const std::string& bind_addr) {
  at::set_num_threads(1);
  const int rank = std::stoi(getenv("RANK"));
  const int world = std::stoi(getenv("WORLD_SIZE"));
  JobSpec spec;
  spec.model.hidden = kHidden;
  spec.data.batch_size = kBatch;
  spec.optimizer.kind = OptimizerKind::kSgd;
  spec.optimizer.lr = 0.01;
  spec.optimizer.momentum = 0.9;
  spec.max_steps = warmup + steps;
  spec.num_processes = world;
  spec.ddp.comm_hook = c.hook;
  spec.ddp.power_sgd.matrix_approximation_rank = std::max(1, c.rank);
  spec.ddp.power_sgd.start_powerSGD_iter = 2;  // compress from the third step (the first two rebuild buckets)
  spec.ddp.intra_host_transport = IntraHostTransport::kProcessGroup;
  RendezvousOptions ro;
  ro.master_addr = getenv("MASTER_ADDR");
  ro.master_port = std::stoi(getenv("MASTER_PORT"));
  ro.rank = rank;
  ro.world_size = world;
  auto store = ConnectStore(ro);
  auto pg = MakeProcessGroup(Backend::kGloo, store, rank, world, bind_addr, std::chrono::minutes(5));
  Sink sink(warmup);
  Trainer trainer(spec, rank, world, DistContext{pg, nullptr}, &sink, nullptr);
  trainer.Run();
  pg->barrier()->wait();
  if (rank == 0) {
    std::cout << nlohmann::json{{"step_seconds", sink.step_seconds}, {"wire", sink.wire}, {"fp32", sink.fp32}}.dump()
              << std::endl;
  }
  return 0;
}

struct Row {
  std::string link, label;
  bench::Stats step;
  double wire = 0, fp32 = 0;
};

}  // namespace
}  // namespace trainyard

int main(int argc, char** argv) {
  using namespace trainyard;
  CLI::App app{"Trainyard DDP communication hooks: loopback and a shaped link"};
  int steps = 8, warmup = 3, config = 0;
  std::string role = "orchestrate", bind_addr = "127.0.0.1", rate = "100mbit";
  bool skip_loopback = false, skip_netns = false;
  app.add_option("--steps", steps, "Measured steps per configuration")->capture_default_str();
  app.add_option("--warmup", warmup, "Unmeasured first steps (>= 3: PowerSGD starts at step 3)")->capture_default_str();
  app.add_option("--rate", rate, "Link rate for tc tbf")->capture_default_str();
  app.add_flag("--skip-loopback", skip_loopback);
  app.add_flag("--skip-netns", skip_netns);
  app.add_option("--role", role, "internal");
  app.add_option("--config", config, "internal");
  app.add_option("--bind-addr", bind_addr, "internal");
  CLI11_PARSE(app, argc, argv);
  if (role == "rank") return RunRank(Configs().at(config), steps, warmup, bind_addr);

  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string netns = std::filesystem::path(TRAINYARD_BENCH_DIR) / "netns.sh";
  std::vector<Row> rows;
  auto run_link = [&](const std::string& link, bool namespaced) {
    for (size_t ci = 0; ci < Configs().size(); ++ci) {
      std::vector<std::vector<std::string>> argvs;
      for (int r = 0; r < 2; ++r) {
        std::vector<std::string> a;
        if (namespaced) a = {"ip", "netns", "exec", r == 0 ? "ty-hosta" : "ty-hostb"};
        for (const std::string& x :
             {self, std::string("--role"), std::string("rank"), std::string("--config"), std::to_string(ci),
              std::string("--steps"), std::to_string(steps), std::string("--warmup"), std::to_string(warmup),
              std::string("--bind-addr"),
              namespaced ? std::string(r == 0 ? "10.231.0.1" : "10.231.0.2") : std::string("127.0.0.1")}) {
          a.push_back(x);
        }
        argvs.push_back(a);
      }
      auto j = bench::RunRanks(argvs, namespaced ? "10.231.0.1" : "127.0.0.1");
      Row row{link, Configs()[ci].label, bench::Summarize(j["step_seconds"].get<std::vector<double>>())};
      row.wire = bench::Summarize(j["wire"].get<std::vector<double>>()).mean;
      row.fp32 = bench::Summarize(j["fp32"].get<std::vector<double>>()).mean;
      std::cerr << link << " / " << row.label << ": " << row.step.mean * 1e3 << " ms/step\n";
      rows.push_back(row);
    }
  };
  if (!skip_loopback) run_link("loopback", false);
  if (!skip_netns) {
    if (std::system((netns + " check").c_str()) != 0) {
      std::cout << "netns: skipped (needs root and network namespaces)\n";
    } else if (std::system((netns + " up " + rate).c_str()) != 0) {
      std::cout << "netns: skipped (could not create the namespaces)\n";
    } else {
      try {
        run_link("veth " + rate, true);
      } catch (...) {
        std::system((netns + " down").c_str());
        throw;
      }
      std::system((netns + " down").c_str());
    }
  }

  std::cout << "| link | hook | step ms (mean) | median | p90 | CV | samples/s (2 ranks) | speed-up vs no hook | "
               "wire MB/step | wire / fp32 |\n|---|---|---|---|---|---|---|---|---|---|\n";
  for (const Row& r : rows) {
    double base = 0;
    for (const Row& b : rows) {
      if (b.link == r.link && b.label == Configs()[0].label) base = b.step.mean;
    }
    char line[512];
    std::snprintf(line, sizeof(line), "| %s | %s | %.1f | %.1f | %.1f | %.3f | %.1f | %.2fx | %.3f | %.4f |\n",
                  r.link.c_str(), r.label.c_str(), r.step.mean * 1e3, r.step.median * 1e3, r.step.p90 * 1e3, r.step.cv,
                  2 * kBatch / r.step.mean, base / r.step.mean, r.wire / 1e6, r.fp32 > 0 ? r.wire / r.fp32 : 0.0);
    std::cout << line;
  }
  std::cout << "\nmodel: MLP 784-1024-1024-1024-1024-10 (" << "3.96M parameters), batch " << kBatch
            << " per rank, SGD momentum, 1 thread per rank; " << steps << " measured steps after " << warmup
            << " warm-up steps; PowerSGD starts at step 3 with error feedback and warm start.\n"
            << "command: " << argv[0] << " --steps " << steps << " --warmup " << warmup << " --rate " << rate
            << "\n";
  return 0;
}
