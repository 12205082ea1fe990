// bench/llama: tokens/s and peak memory of a ~32M-parameter Llama, in one
// process and under FSDP FULL_SHARD on 2 ranks (one unit per decoder
// layer), with and without activation checkpointing, against transformers'
// LlamaForCausalLM of the same config.json trained by a plain PyTorch loop
// and by FSDP2 (`fully_shard` per LlamaDecoderLayer, then the root;
// bench/python_llama.py with the venv's torch and transformers). Every
// process of both sides is started by bench::RunRanks with one environment:
// 1 thread per process and the worker's allocator thresholds; the peer
// also as a user runs it (glibc's defaults). Each setup runs in --rounds
// interleaved rounds whose measured steps are pooled. Memory is the rank-0
// process's peak resident set (ru_maxrss): interpreter and libraries
// included, so compare it within a side (checkpointing on and off).
//
//   llama [--steps N] [--rounds R] [--warmup W] [--python PATH]
#include <sys/resource.h>
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "bench/bench_util.h"
#include "common/allocator_tuning.h"
#include "common/job_spec.h"
#include "common/llama_config.h"
#include "worker/collectives/dist_setup.h"
#include "worker/models/models.h"
#include "worker/train/trainer.h"

namespace trainyard {
namespace {

constexpr int64_t kContext = 256, kBatch = 4;

// The model both sides train: Llama's shape at 1/16 of the width of 7B.
constexpr char kConfig[] = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 8192, "hidden_size": 512,
  "intermediate_size": 1408, "num_hidden_layers": 8, "num_attention_heads": 8, "num_key_value_heads": 4,
  "hidden_act": "silu", "max_position_embeddings": 512, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
  "tie_word_embeddings": false, "initializer_range": 0.02, "attention_bias": false, "mlp_bias": false
})";

struct Setup {
  std::string label;
  int world;
  bool checkpointing;
};

const std::vector<Setup>& Setups() {
  static const std::vector<Setup> kSetups = {
      {"Trainyard, 1 process", 1, false},
      {"Trainyard, 1 process, activation checkpointing", 1, true},
      {"Trainyard FSDP FULL_SHARD", 2, false},
      {"Trainyard FSDP FULL_SHARD, activation checkpointing", 2, true},
  };
  return kSetups;
}

JobSpec SpecFor(const Setup& setup, const std::string& config_dir, int steps) {
  JobSpec spec;
  spec.model.kind = ModelKind::kLlama;
  spec.model.config = config_dir;
  spec.model.context = kContext;
  spec.data.batch_size = kBatch;
  spec.optimizer.kind = OptimizerKind::kAdamW;
  spec.optimizer.lr = 1e-3;
  spec.optimizer.weight_decay = 0.0;  // as the peer's
  spec.max_steps = steps;
  spec.num_processes = setup.world;
  spec.activation_checkpointing = setup.checkpointing;
  spec.checkpoint.save_final = false;
  spec.backend = Backend::kGloo;
  if (setup.world == 1) {
    spec.distributed_type = DistributedType::kNo;
  } else {
    spec.distributed_type = DistributedType::kFsdp;
    spec.fsdp.sharding_strategy = ShardingStrategy::kFullShard;
    spec.fsdp.auto_wrap_policy = WrapPolicy::kTransformerBased;
    spec.fsdp.transformer_layer_cls_to_wrap = {"LlamaDecoderLayer"};
  }
  return spec;
}

int RunRank(int setup_index, const std::string& config_dir, int steps, int warmup) {
  TuneAllocator();  // as trainyard-worker does
  at::set_num_threads(1);
  const int rank = std::stoi(getenv("RANK"));
  const int world = std::stoi(getenv("WORLD_SIZE"));
  JobSpec spec = SpecFor(Setups().at(setup_index), config_dir, warmup + steps);
  DistSetup dist;
  if (world > 1) {
    RendezvousOptions ro;
    ro.master_port = std::stoi(getenv("MASTER_PORT"));
    ro.rank = rank;
    ro.world_size = world;
    ro.timeout = std::chrono::minutes(5);
    dist = SetUpDistributed(spec, ro);
  }
  bench::StepTimes sink(warmup);
  int64_t parameters = 0;
  {
    Trainer trainer(spec, rank, world, dist.context(), &sink, nullptr);
    for (const at::Tensor& p : trainer.model().parameters()) parameters += p.numel();
    trainer.Run();
  }
  if (dist.world) dist.world->barrier()->wait();
  if (rank == 0) {
    struct rusage usage {};
    getrusage(RUSAGE_SELF, &usage);
    std::cout << nlohmann::json{{"seconds", sink.seconds},
                                {"peak_rss_bytes", static_cast<int64_t>(usage.ru_maxrss) * 1024},
                                {"parameters", parameters}}
                     .dump()
              << std::endl;
  }
  return 0;
}

}  // namespace
}  // namespace trainyard

int main(int argc, char** argv) {
  using namespace trainyard;
  CLI::App app{"Trainyard's llama model: tokens/s and peak memory against transformers + PyTorch / FSDP2"};
  int steps = 10, warmup = 2, setup = 0, rounds = 2;
  std::string role = "orchestrate", config_dir;
  std::string python = TRAINYARD_PYTHON;
  app.add_option("--steps", steps, "Measured steps per setup (over all rounds)")->capture_default_str();
  app.add_option("--rounds", rounds, "Interleaved rounds, each with steps/rounds measured steps")
      ->capture_default_str()
      ->check(CLI::Range(1, 100));
  app.add_option("--warmup", warmup, "Unmeasured first steps of every run")->capture_default_str();
  app.add_option("--python", python, "Python with torch and transformers for the peer")->capture_default_str();
  app.add_option("--role", role, "internal");
  app.add_option("--setup", setup, "internal");
  app.add_option("--config", config_dir, "internal");
  CLI11_PARSE(app, argc, argv);
  if (role == "rank") return RunRank(setup, config_dir, steps, warmup);

  // The config both sides read.
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("trainyard-bench-llama-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << kConfig;
  const auto config = ReadLlamaConfig(dir.string());
  if (!config.ok()) {
    std::cerr << config.status() << "\n";
    return 1;
  }
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string peer = std::filesystem::path(TRAINYARD_BENCH_DIR) / "python_llama.py";
  const int per_round = std::max(1, steps / rounds);
  struct Row {
    std::string label;
    int world;
    bench::RunEnvironment env;
    std::vector<std::string> argv;  // one rank's command line
    int peer_of = -1;               // the Trainyard row this peer is compared with (-1: a Trainyard row)
  };
  std::vector<Row> rows;
  for (size_t i = 0; i < Setups().size(); ++i) {
    const Setup& s = Setups()[i];
    rows.push_back({s.label,
                    s.world,
                    bench::OurSettings(),
                    {self, "--role", "rank", "--setup", std::to_string(i), "--config", dir.string(), "--steps",
                     std::to_string(per_round), "--warmup", std::to_string(warmup)}});
  }
  auto peer_argv = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = {python,
                                  peer,
                                  dir.string(),
                                  "--steps",
                                  std::to_string(per_round),
                                  "--warmup",
                                  std::to_string(warmup),
                                  "--context",
                                  std::to_string(kContext),
                                  "--batch",
                                  std::to_string(kBatch)};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  const size_t trainyard_rows = rows.size();
  rows.push_back({"transformers + PyTorch loop, our settings", 1, bench::OurSettings(), peer_argv({}), 0});
  rows.push_back({"transformers + PyTorch loop, defaults", 1, bench::PeerDefaults(), peer_argv({}), 0});
  rows.push_back({"transformers + PyTorch loop, gradient checkpointing, our settings", 1, bench::OurSettings(),
                  peer_argv({"--checkpointing"}), 1});
  rows.push_back(
      {"transformers + FSDP2 fully_shard per layer, our settings", 2, bench::OurSettings(), peer_argv({"--fsdp"}), 2});
  rows.push_back(
      {"transformers + FSDP2 fully_shard per layer, defaults", 2, bench::PeerDefaults(), peer_argv({"--fsdp"}), 2});
  rows.push_back({"transformers + FSDP2, gradient checkpointing, our settings", 2, bench::OurSettings(),
                  peer_argv({"--fsdp", "--checkpointing"}), 3});

  std::vector<std::vector<double>> seconds(rows.size());
  std::vector<nlohmann::json> last(rows.size());
  for (int round = 0; round < rounds; ++round) {
    for (size_t i = 0; i < rows.size(); ++i) {
      auto j = bench::RunRanks(rows[i].world, rows[i].argv, rows[i].env);
      for (double x : j["seconds"].get<std::vector<double>>()) seconds[i].push_back(x);
      last[i] = j;
    }
  }
  std::cout << bench::DescribeConditions() << "\n\n"
            << "| N | implementation / setup | tokens/s (all ranks, median step) | step s min | median | max | CV | "
               "peak RSS MB (rank 0) | Trainyard vs peer (our settings) |\n"
               "|---|---|---|---|---|---|---|---|---|\n";
  // Each Trainyard row against the peer row of the same setup, our settings.
  std::vector<double> peer_median(trainyard_rows, 0);
  for (size_t i = trainyard_rows; i < rows.size(); ++i) {
    if (rows[i].env.tuned_allocator && peer_median[rows[i].peer_of] == 0) {
      peer_median[rows[i].peer_of] = bench::Summarize(seconds[i]).median;
    }
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    const bench::Stats st = bench::Summarize(seconds[i]);
    char vs[32] = "";
    if (i < trainyard_rows && peer_median[i] > 0) std::snprintf(vs, sizeof(vs), "%.2fx", peer_median[i] / st.median);
    char line[700];
    std::snprintf(line, sizeof(line), "| %d | %s | %.1f | %.3f | %.3f | %.3f | %.3f | %.0f | %s |\n", rows[i].world,
                  rows[i].label.c_str(), static_cast<double>(rows[i].world * kBatch * kContext) / st.median, st.min,
                  st.median, st.max, st.cv, last[i]["peak_rss_bytes"].get<double>() / 1e6, vs);
    std::cout << line << std::flush;
  }
  std::cout << "\nmodel: Llama, 8 layers, hidden 512, 8 heads sharing 4 K/V heads, MLP 1408, vocab 8192 ("
            << config->NumParameters() << " parameters; transformers counts " << last.back()["parameters"]
            << "), context " << kContext << ", batch " << kBatch
            << " sequences per rank, AdamW (lr 1e-3, weight decay 0; the peer's default per-parameter loop), SDPA "
               "attention on both sides, 1 thread per rank, Gloo; "
            << steps << " measured steps per setup in " << rounds << " interleaved rounds, " << warmup
            << " warm-up steps per run.\ncommand: " << argv[0] << " --steps " << steps << " --rounds " << rounds
            << " --warmup " << warmup << "\n";
  std::filesystem::remove_all(dir);
  return 0;
}
