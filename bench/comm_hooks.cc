// bench/comm_hooks: step time, samples/s, gradient wire bytes per step and
// the final loss of Trainyard's DDP communication hooks on a
// communication-bound model (an MLP with several 1024x1024 layers, small
// batch), 2 ranks, against PyTorch's own DDP with its own hooks
// (bench/python_hooks.py, the venv's torch) on the same link:
//   - loopback, and
//   - two network namespaces joined by a veth pair shaped to 100 Mbit/s
//     (bench/netns.sh; needs root, skipped with a message otherwise).
// Each Trainyard rank runs the worker's real Trainer; gradients go through
// the process group (Gloo), never shared memory, so the link is what is
// measured. Every configuration runs in --rounds interleaved rounds (the
// setups take turns) whose measured steps are pooled.
//
//   comm_hooks [--steps N] [--rounds R] [--rate 100mbit] [--skip-loopback] [--skip-netns] [--python PATH]
#include <torch/torch.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <sstream>

#include "bench/bench_util.h"
#include "common/allocator_tuning.h"
#include "common/job_spec.h"
#include "worker/collectives/process_group.h"
#include "worker/train/trainer.h"

namespace trainyard {
namespace {

struct HookConfig {
  std::string label;
  CommHookType hook;
  int rank;
  std::string python_hook;  // bench/python_hooks.py --hook
};

const std::vector<HookConfig>& Configs() {
  static const std::vector<HookConfig> kConfigs = {
      {"no hook (fp32 allreduce)", CommHookType::kNone, 0, "none"},
      {"fp16", CommHookType::kFp16, 0, "fp16"},
      {"bf16", CommHookType::kBf16, 0, "bf16"},
      {"PowerSGD rank 1", CommHookType::kPowerSgd, 1, "power_sgd"},
      {"PowerSGD rank 2", CommHookType::kPowerSgd, 2, "power_sgd"},
      {"PowerSGD rank 4", CommHookType::kPowerSgd, 4, "power_sgd"},
      {"batched PowerSGD rank 2", CommHookType::kBatchedPowerSgd, 2, "batched_power_sgd"},
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
    loss.push_back(m.loss);
  }
  std::vector<double> step_seconds, wire, fp32, loss;

 private:
  int warmup_;
};

int RunRank(const HookConfig& c, int steps, int warmup, const std::string& bind_addr) {
  TuneAllocator();  // as trainyard-worker does
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
    // The mean loss of the last 10 steps, as the Python peer reports it.
    const size_t n = std::min<size_t>(10, sink.loss.size());
    double loss = 0;
    for (size_t i = sink.loss.size() - n; i < sink.loss.size(); ++i) loss += sink.loss[i] / static_cast<double>(n);
    std::cout << nlohmann::json{{"step_seconds", sink.step_seconds},
                                {"wire", sink.wire},
                                {"fp32", sink.fp32},
                                {"loss", loss}}
                     .dump()
              << std::endl;
  }
  return 0;
}

struct Row {
  std::string link, implementation, label;
  std::vector<double> steps;  // pooled over rounds
  std::vector<double> wire, fp32, losses;
  std::string error;
};

}  // namespace
}  // namespace trainyard

int main(int argc, char** argv) {
  using namespace trainyard;
  CLI::App app{"DDP communication hooks, Trainyard vs PyTorch's own: loopback and a shaped link"};
  int steps = 50, warmup = 3, config = 0, rounds = 2;
  std::string role = "orchestrate", bind_addr = "127.0.0.1", rate = "100mbit";
  std::string python = TRAINYARD_PYTHON;
  bool skip_loopback = false, skip_netns = false;
  app.add_option("--steps", steps, "Measured steps per configuration (over all rounds)")->capture_default_str();
  app.add_option("--rounds", rounds, "Interleaved rounds, each with steps/rounds measured steps")
      ->capture_default_str()
      ->check(CLI::Range(1, 100));
  app.add_option("--warmup", warmup, "Unmeasured first steps of every run (>= 3: PowerSGD starts at step 3)")
      ->capture_default_str();
  app.add_option("--rate", rate, "Link rate for tc tbf")->capture_default_str();
  app.add_option("--python", python, "Python with torch for the PyTorch peer")->capture_default_str();
  std::vector<size_t> selected;
  app.add_option("--configs", selected, "Only these rows of the hook table (0-based; default: all)");
  app.add_flag("--skip-loopback", skip_loopback);
  app.add_flag("--skip-netns", skip_netns);
  app.add_option("--role", role, "internal");
  app.add_option("--config", config, "internal");
  app.add_option("--bind-addr", bind_addr, "internal");
  CLI11_PARSE(app, argc, argv);
  if (role == "rank") return RunRank(Configs().at(config), steps, warmup, bind_addr);

  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string netns = std::filesystem::path(TRAINYARD_BENCH_DIR) / "netns.sh";
  const std::string peer = std::filesystem::path(TRAINYARD_BENCH_DIR) / "python_hooks.py";
  const int per_round = std::max(1, steps / rounds);
  if (selected.empty()) {
    for (size_t i = 0; i < Configs().size(); ++i) selected.push_back(i);
  }
  std::vector<Row> rows;
  // The peer runs with our settings, and without a hook also as a user
  // runs it (glibc's defaults): kImpls[2] covers config 0 only.
  const char* kImpls[] = {"Trainyard", "PyTorch, our settings", "PyTorch, defaults"};
  auto run_link = [&](const std::string& link, bool namespaced) {
    std::map<std::pair<int, size_t>, size_t> row_of;  // (implementation, config) -> rows index
    for (int which = 0; which < 3; ++which) {
      for (size_t ci : selected) {
        if (which == 2 && ci != 0) continue;
        row_of[{which, ci}] = rows.size();
        rows.push_back(Row{link, kImpls[which], Configs().at(ci).label});
      }
    }
    for (int round = 0; round < rounds; ++round) {
      for (size_t k = 0; k < selected.size(); ++k) {
        const size_t ci = selected[k];
        for (int which = 0; which < 3; ++which) {  // Trainyard, then the peer, config by config
          auto at = row_of.find({which, ci});
          if (at == row_of.end()) continue;
          Row& row = rows[at->second];
          if (!row.error.empty()) continue;
          const bench::RunEnvironment env = which == 2 ? bench::PeerDefaults() : bench::OurSettings();
          std::vector<std::vector<std::string>> argvs;
          for (int r = 0; r < 2; ++r) {
            std::vector<std::string> a;
            const std::string addr = namespaced ? (r == 0 ? "10.231.0.1" : "10.231.0.2") : "127.0.0.1";
            if (namespaced) a = {"ip", "netns", "exec", r == 0 ? "ty-hosta" : "ty-hostb"};
            if (which == 0) {
              for (const std::string& x :
                   {self, std::string("--role"), std::string("rank"), std::string("--config"), std::to_string(ci),
                    std::string("--steps"), std::to_string(per_round), std::string("--warmup"), std::to_string(warmup),
                    std::string("--bind-addr"), addr}) {
                a.push_back(x);
              }
            } else {
              // A peer that hangs (PyTorch's PowerSGD on Gloo can) is stopped
              // after 5 minutes and recorded as failed.
              a.push_back("timeout");
              a.push_back("300");
              // Gloo binds where the name resolves; inside the namespaces, to the veth.
              a.push_back("env");
              a.push_back(std::string("GLOO_SOCKET_IFNAME=") +
                          (namespaced ? (r == 0 ? "ty-veth-a" : "ty-veth-b") : "lo"));
              for (const std::string& x :
                   {python, peer, std::string("--hook"), Configs()[ci].python_hook, std::string("--rank"),
                    std::to_string(std::max(1, Configs()[ci].rank)), std::string("--steps"), std::to_string(per_round),
                    std::string("--warmup"), std::to_string(warmup)}) {
                a.push_back(x);
              }
            }
            argvs.push_back(a);
          }
          nlohmann::json j;
          try {
            j = bench::RunRanks(argvs, env, namespaced ? "10.231.0.1" : "127.0.0.1");
          } catch (const std::exception& e) {
            // A rank that aborts (PyTorch's PowerSGD on Gloo can) is a result too.
            j = {{"error", std::string("a rank aborted (") + e.what() + "; its stderr is above)"}};
          }
          if (j.contains("error")) {
            row.error = j["error"].get<std::string>();
            std::cerr << link << " / " << row.implementation << " / " << row.label << ": " << row.error << "\n";
            continue;
          }
          for (double x : j["step_seconds"].get<std::vector<double>>()) row.steps.push_back(x);
          if (j.contains("wire")) {
            for (double x : j["wire"].get<std::vector<double>>()) row.wire.push_back(x);
            for (double x : j["fp32"].get<std::vector<double>>()) row.fp32.push_back(x);
          }
          row.losses.push_back(j["loss"].get<double>());
          std::cerr << link << " / " << row.implementation << " / " << row.label << " (round " << round + 1
                    << "): " << bench::Summarize(row.steps).median * 1e3 << " ms/step median\n";
        }
      }
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

  std::cout << bench::DescribeConditions() << "\n\n"
            << "| link | implementation | hook | step ms min | median | max | CV | samples/s (2 ranks, median) | "
               "speed-up vs its own no hook (median) | vs PyTorch, our settings | wire MB/step | wire / fp32 | loss "
               "(last 10 steps) |\n"
               "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const Row& r : rows) {
    if (!r.error.empty()) {
      std::cout << "| " << r.link << " | " << r.implementation << " | " << r.label << " | failed: " << r.error
                << " |  |  |  |  |  |  |  |  |  |\n";
      continue;
    }
    const bench::Stats st = bench::Summarize(r.steps);
    double base = 0, peer = 0;
    for (const Row& b : rows) {
      if (b.link == r.link && b.implementation == r.implementation && b.label == Configs()[0].label) {
        base = bench::Summarize(b.steps).median;
      }
      if (b.link == r.link && b.implementation == kImpls[1] && b.label == r.label && b.error.empty()) {
        peer = bench::Summarize(b.steps).median;
      }
    }
    char vs[32] = "";
    if (r.implementation == kImpls[0] && peer > 0) std::snprintf(vs, sizeof(vs), "%.2fx", peer / st.median);
    double loss = 0;
    for (double l : r.losses) loss += l / static_cast<double>(r.losses.size());
    const double wire = bench::Summarize(r.wire).mean, fp32 = bench::Summarize(r.fp32).mean;
    char line[640];
    std::snprintf(line, sizeof(line),
                  "| %s | %s | %s | %.1f | %.1f | %.1f | %.3f | %.1f | %.2fx | %s | %s | %s | %.4f |\n", r.link.c_str(),
                  r.implementation.c_str(), r.label.c_str(), st.min * 1e3, st.median * 1e3, st.max * 1e3, st.cv,
                  2 * kBatch / st.median, base > 0 ? base / st.median : 0.0, vs,
                  r.wire.empty() ? "-" : std::to_string(wire / 1e6).substr(0, 6).c_str(),
                  r.wire.empty() || fp32 <= 0 ? "-" : std::to_string(wire / fp32).substr(0, 6).c_str(), loss);
    std::cout << line;
  }
  std::cout << "\nmodel: MLP 784-1024-1024-1024-1024-10 (3.96M parameters), batch " << kBatch
            << " per rank, SGD momentum 0.9, lr 0.01, 1 thread per rank, Gloo; " << steps << " measured steps in "
            << rounds << " interleaved rounds after " << warmup
            << " warm-up steps per run; PowerSGD from step 3 with error feedback and warm start "
               "(min_compression_rate 2) on both sides; PyTorch: DDP(gradient_as_bucket_view=True) with "
               "torch.distributed.algorithms.ddp_comm_hooks.\n"
            << "command: " << argv[0] << " --steps " << steps << " --rounds " << rounds << " --warmup " << warmup
            << " --rate " << rate;
  if (selected.size() < Configs().size()) {
    std::cout << " --configs";
    for (size_t ci : selected) std::cout << " " << ci;
  }
  if (skip_loopback) std::cout << " --skip-loopback";
  if (skip_netns) std::cout << " --skip-netns";
  std::cout << "\n";
  return 0;
}
