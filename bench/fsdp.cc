// bench/fsdp: samples/s and per-rank bytes of parameters + gradients +
// optimizer state for DDP and each FSDP sharding strategy, at N = 2 and 4
// ranks (processes on this machine), on the GPT, against PyTorch's FSDP2
// (`fully_shard` per Block and the root, as FSDP2's examples apply it;
// bench/python_fsdp.py with the venv's torch) on the same model, with the
// same optimizer settings. Both sides run with one thread per process and
// the worker's allocator thresholds; the peer also as a user runs it
// (glibc's defaults) and with foreach AdamW. Memory is counted from tensor
// storages after the last optimizer step (the worker's Trainer::Memory; the
// peer counts its DTensors' local shards the same way), not RSS. HYBRID
// strategies take 2 ranks per "node" at N = 4 and 1 at N = 2. Every setup
// runs in --rounds interleaved rounds whose measured steps are pooled.
//
//   fsdp [--steps N] [--rounds R] [--warmup W] [--python PATH]
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "bench/bench_util.h"
#include "common/allocator_tuning.h"
#include "common/job_spec.h"
#include "worker/collectives/dist_setup.h"
#include "worker/collectives/process_group.h"
#include "worker/collectives/shm_collectives.h"
#include "worker/train/trainer.h"

namespace trainyard {
namespace {

struct Setup {
  std::string label;
  DistributedType type;
  ShardingStrategy strategy;
  IntraHostTransport transport;
};

const std::vector<Setup>& Setups() {
  static const std::vector<Setup> kSetups = {
      {"DDP (shared memory)", DistributedType::kDdp, ShardingStrategy::kFullShard, IntraHostTransport::kAuto},
      {"DDP (Gloo)", DistributedType::kDdp, ShardingStrategy::kFullShard, IntraHostTransport::kProcessGroup},
      {"FSDP FULL_SHARD", DistributedType::kFsdp, ShardingStrategy::kFullShard, IntraHostTransport::kAuto},
      {"FSDP SHARD_GRAD_OP", DistributedType::kFsdp, ShardingStrategy::kShardGradOp, IntraHostTransport::kAuto},
      {"FSDP NO_SHARD", DistributedType::kFsdp, ShardingStrategy::kNoShard, IntraHostTransport::kAuto},
      {"FSDP HYBRID_SHARD", DistributedType::kFsdp, ShardingStrategy::kHybridShard, IntraHostTransport::kAuto},
      {"FSDP HYBRID_SHARD_ZERO2", DistributedType::kFsdp, ShardingStrategy::kHybridShardZero2,
       IntraHostTransport::kAuto},
  };
  return kSetups;
}

JobSpec SpecFor(const Setup& setup, int world, int steps) {
  JobSpec spec;
  spec.model.kind = ModelKind::kGpt;
  spec.model.layers = 4;
  spec.model.width = 256;
  spec.model.heads = 4;
  spec.model.context = 64;
  spec.model.vocab = 512;
  spec.data.batch_size = 4;
  spec.optimizer.kind = OptimizerKind::kAdamW;
  spec.optimizer.lr = 1e-3;
  spec.optimizer.weight_decay = 0.0;  // as the peer's
  spec.max_steps = steps;
  spec.num_processes = world;
  spec.distributed_type = setup.type;
  spec.ddp.intra_host_transport = setup.transport;
  spec.fsdp.sharding_strategy = setup.strategy;
  spec.fsdp.auto_wrap_policy = WrapPolicy::kTransformerBased;
  spec.fsdp.transformer_layer_cls_to_wrap = {"Block"};
  spec.fsdp.ranks_per_node = world == 4 ? 2 : 1;
  return spec;
}

int RunRank(int setup_index, int steps, int warmup) {
  TuneAllocator();  // as trainyard-worker does
  at::set_num_threads(1);
  const int rank = std::stoi(getenv("RANK"));
  const int world = std::stoi(getenv("WORLD_SIZE"));
  JobSpec spec = SpecFor(Setups().at(setup_index), world, warmup + steps);
  RendezvousOptions ro;
  ro.master_port = std::stoi(getenv("MASTER_PORT"));
  ro.rank = rank;
  ro.world_size = world;
  ro.timeout = std::chrono::minutes(5);
  spec.backend = Backend::kGloo;
  const DistSetup dist = SetUpDistributed(spec, ro);
  bench::StepTimes sink(warmup);
  Trainer trainer(spec, rank, world, dist.context(), &sink, nullptr);
  trainer.Run();
  dist.world->barrier()->wait();
  if (rank == 0) {
    std::cout << nlohmann::json{{"seconds", sink.seconds},
                                {"param_bytes", sink.last.param_bytes},
                                {"grad_bytes", sink.last.grad_bytes},
                                {"optimizer_bytes", sink.last.optimizer_bytes}}
                     .dump()
              << std::endl;
  }
  return 0;
}

}  // namespace
}  // namespace trainyard

int main(int argc, char** argv) {
  using namespace trainyard;
  CLI::App app{"Trainyard FSDP: throughput and per-rank memory by sharding strategy, against FSDP2"};
  int steps = 50, warmup = 2, setup = 0, rounds = 2;
  std::string role = "orchestrate";
  std::string python = TRAINYARD_PYTHON;
  app.add_option("--steps", steps, "Measured steps per setup (over all rounds)")->capture_default_str();
  app.add_option("--rounds", rounds, "Interleaved rounds, each with steps/rounds measured steps")
      ->capture_default_str()
      ->check(CLI::Range(1, 100));
  app.add_option("--warmup", warmup, "Unmeasured first steps of every run")->capture_default_str();
  app.add_option("--python", python, "Python with torch for the FSDP2 peer")->capture_default_str();
  app.add_option("--role", role, "internal");
  app.add_option("--setup", setup, "internal");
  CLI11_PARSE(app, argc, argv);
  if (role == "rank") return RunRank(setup, steps, warmup);

  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string peer = std::filesystem::path(TRAINYARD_BENCH_DIR) / "python_fsdp.py";
  const int per_round = std::max(1, steps / rounds);
  // The last rows of each N: FSDP2 with our settings, as a user runs it,
  // and with foreach AdamW.
  struct Peer {
    std::string label;
    bench::RunEnvironment env;
    std::vector<std::string> extra;
  };
  const std::vector<Peer> peers = {
      {"PyTorch FSDP2 fully_shard (FULL_SHARD), our settings", bench::OurSettings(), {}},
      {"PyTorch FSDP2 fully_shard (FULL_SHARD), defaults", bench::PeerDefaults(), {}},
      {"PyTorch FSDP2 fully_shard (FULL_SHARD), foreach AdamW, our settings", bench::OurSettings(), {"--foreach"}},
  };
  const size_t kPeer = Setups().size(), kRows = Setups().size() + peers.size();
  std::cout << bench::DescribeConditions() << "\n\n"
            << "| N | implementation / setup | samples/s (all ranks, median step) | step s min | median | max | CV | "
               "params MB/rank | grads MB/rank | optimizer MB/rank | total MB/rank | total / DDP | vs FSDP2, our "
               "settings |\n"
               "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (int world : {2, 4}) {
    std::vector<std::vector<double>> seconds(kRows);
    std::vector<nlohmann::json> last(kRows);
    for (int round = 0; round < rounds; ++round) {
      for (size_t i = 0; i < kRows; ++i) {
        std::vector<std::string> a;
        bench::RunEnvironment env = bench::OurSettings();
        if (i >= kPeer) {
          a = {python, peer, "--steps", std::to_string(per_round), "--warmup", std::to_string(warmup)};
          a.insert(a.end(), peers[i - kPeer].extra.begin(), peers[i - kPeer].extra.end());
          env = peers[i - kPeer].env;
        } else {
          a = {self,
               "--role",
               "rank",
               "--setup",
               std::to_string(i),
               "--steps",
               std::to_string(per_round),
               "--warmup",
               std::to_string(warmup)};
        }
        auto j = bench::RunRanks(world, a, env);
        for (double x : j["seconds"].get<std::vector<double>>()) seconds[i].push_back(x);
        last[i] = j;
      }
    }
    double ddp_total = 0;
    const double peer_median = bench::Summarize(seconds[kPeer]).median;
    for (size_t i = 0; i < kRows; ++i) {
      const bench::Stats st = bench::Summarize(seconds[i]);
      const nlohmann::json& j = last[i];
      const double params = j["param_bytes"].get<double>() / 1e6, grads = j["grad_bytes"].get<double>() / 1e6,
                   opt = j["optimizer_bytes"].get<double>() / 1e6, total = params + grads + opt;
      if (i == 0) ddp_total = total;
      const std::string label = i >= kPeer ? peers[i - kPeer].label : "Trainyard " + Setups()[i].label;
      char vs[32] = "";
      if (i != kPeer) std::snprintf(vs, sizeof(vs), "%.2fx", peer_median / st.median);
      char line[700];
      std::snprintf(line, sizeof(line),
                    "| %d | %s | %.2f | %.3f | %.3f | %.3f | %.3f | %.2f | %.2f | %.2f | %.2f | %.3f | %s |\n", world,
                    label.c_str(), static_cast<double>(world) * 4 / st.median, st.min, st.median, st.max, st.cv, params,
                    grads, opt, total, total / ddp_total, vs);
      std::cout << line << std::flush;
    }
  }
  std::cout << "\nmodel: GPT 4 layers, width 256, 4 heads, context 64, vocab 512 (3.3M parameters), batch 4 "
               "sequences per rank, AdamW (lr 1e-3, weight decay 0), 1 thread per rank, Gloo; FSDP wraps each Block "
               "(TRANSFORMER_BASED_WRAP; FSDP2: fully_shard per Block, then the root with its defaults); "
            << steps << " measured steps per setup in " << rounds << " interleaved rounds, " << warmup
            << " warm-up steps per run.\ncommand: " << argv[0] << " --steps " << steps << " --rounds " << rounds
            << " --warmup " << warmup << "\n";
  return 0;
}
