// bench/llama: tokens/s and peak memory of a ~32M-parameter Llama, in one
// process and under FSDP FULL_SHARD on 2 ranks (one unit per decoder
// layer), with and without activation checkpointing, against transformers'
// LlamaForCausalLM of the same config.json trained by a plain PyTorch loop
// (AdamW as PyTorch runs it by default on the CPU, a parameter at a time,
// and its foreach and fused forms) and by FSDP2 (`fully_shard` per
// LlamaDecoderLayer, then the root; bench/python_llama.py with the venv's
// torch and transformers). The one-process row runs the fused path (the
// job's `fused` section at its defaults); one row turns all of it off and
// one row each turns one piece off. Every process of both sides is started
// by bench::RunRanks with one environment: 1 thread per process and the
// worker's allocator thresholds; the peer also as a user runs it (glibc's
// defaults). Each setup runs in --rounds interleaved rounds whose measured
// steps are pooled. Model FLOP/s are counted both ways (bench/llama_flops.h:
// 6N, and with attention); MFU needs the device's peak (--peak-tflops).
// Memory is the rank-0 process's peak resident set (ru_maxrss): interpreter
// and libraries included, so compare it within a side.
//
//   llama [--steps N] [--rounds R] [--warmup W] [--python PATH] [--peak-tflops T] [--only-one-process]
#include <sys/resource.h>
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "bench/bench_util.h"
#include "bench/llama_flops.h"
#include "common/allocator_tuning.h"
#include "common/job_spec.h"
#include "common/llama_config.h"
#include "worker/collectives/dist_setup.h"
#include "worker/models/attention_backend.h"
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
  FusedSpec fused;
};

FusedSpec Without(void (*off)(FusedSpec*)) {
  FusedSpec f;
  off(&f);
  return f;
}

const std::vector<Setup>& Setups() {
  static const std::vector<Setup> kSetups = {
      {"Trainyard, 1 process (fused path)", 1, false, FusedSpec{}},
      {"Trainyard, 1 process, unfused (every fused piece off)", 1, false, Without([](FusedSpec* f) {
         f->optimizer = f->rms_norm = f->chunked_loss = false;
         f->attention = AttentionBackend::kMath;
       })},
      {"Trainyard, 1 process, fused.optimizer off", 1, false, Without([](FusedSpec* f) { f->optimizer = false; })},
      {"Trainyard, 1 process, fused.rms_norm off", 1, false, Without([](FusedSpec* f) { f->rms_norm = false; })},
      {"Trainyard, 1 process, fused.chunked_loss off", 1, false,
       Without([](FusedSpec* f) { f->chunked_loss = false; })},
      {"Trainyard, 1 process, fused.attention math", 1, false,
       Without([](FusedSpec* f) { f->attention = AttentionBackend::kMath; })},
      {"Trainyard, 1 process, activation checkpointing", 1, true, FusedSpec{}},
      {"Trainyard FSDP FULL_SHARD", 2, false, FusedSpec{}},
      {"Trainyard FSDP FULL_SHARD, activation checkpointing", 2, true, FusedSpec{}},
  };
  return kSetups;
}
constexpr size_t kOneProcessSetups = 7;  // the first ones

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
  spec.fused = setup.fused;
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
                                {"parameters", parameters},
                                {"attention", SdpaBackendName(sink.last.attention_backend)}}
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
  double peak_tflops = 0;
  bool one_process = false;
  std::string role = "orchestrate", config_dir;
  std::string python = TRAINYARD_PYTHON;
  app.add_option("--steps", steps, "Measured steps per setup (over all rounds)")->capture_default_str();
  app.add_option("--rounds", rounds, "Interleaved rounds, each with steps/rounds measured steps")
      ->capture_default_str()
      ->check(CLI::Range(1, 100));
  app.add_option("--warmup", warmup, "Unmeasured first steps of every run")->capture_default_str();
  app.add_option("--python", python, "Python with torch and transformers for the peer")->capture_default_str();
  app.add_option("--peak-tflops", peak_tflops, "The device's peak TFLOP/s per process, for an MFU column");
  app.add_flag("--only-one-process", one_process, "Only the one-process rows (the fused path and its ablations)");
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
  const bench::LlamaTrainingFlops flops = bench::LlamaFlopsPerToken(*config, kContext);
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
  const size_t setups = one_process ? kOneProcessSetups : Setups().size();
  for (size_t i = 0; i < setups; ++i) {
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
  const int checkpointing_row = 6, fsdp_row = 7, fsdp_checkpointing_row = 8;
  rows.push_back({"transformers + PyTorch loop, AdamW (its CPU default), our settings", 1, bench::OurSettings(),
                  peer_argv({}), 0});
  rows.push_back({"transformers + PyTorch loop, AdamW foreach, our settings", 1, bench::OurSettings(),
                  peer_argv({"--foreach"}), 0});
  rows.push_back(
      {"transformers + PyTorch loop, AdamW fused, our settings", 1, bench::OurSettings(), peer_argv({"--fused"}), 0});
  rows.push_back(
      {"transformers + PyTorch loop, AdamW fused, defaults", 1, bench::PeerDefaults(), peer_argv({"--fused"}), 0});
  rows.push_back({"transformers + PyTorch loop, gradient checkpointing, AdamW fused, our settings", 1,
                  bench::OurSettings(), peer_argv({"--fused", "--checkpointing"}), checkpointing_row});
  if (!one_process) {
    rows.push_back({"transformers + FSDP2 fully_shard per layer, our settings", 2, bench::OurSettings(),
                    peer_argv({"--fsdp"}), fsdp_row});
    rows.push_back({"transformers + FSDP2 fully_shard per layer, defaults", 2, bench::PeerDefaults(),
                    peer_argv({"--fsdp"}), fsdp_row});
    rows.push_back({"transformers + FSDP2, gradient checkpointing, our settings", 2, bench::OurSettings(),
                    peer_argv({"--fsdp", "--checkpointing"}), fsdp_checkpointing_row});
  }

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
            << "| N | implementation / setup | micro-batch | tokens/s (all ranks, median step) | step s min | median | "
               "max | CV | GFLOP/s 6N | GFLOP/s with attention | MFU (attention counted) | attention | peak RSS MB "
               "(rank 0) | Trainyard vs the peer's fastest (our settings) |\n"
               "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  // Each Trainyard row against the fastest peer row of its setup, our
  // settings (the one-process ablations against the fused path's).
  std::vector<double> peer_best(trainyard_rows, 0);
  for (size_t i = trainyard_rows; i < rows.size(); ++i) {
    if (!rows[i].env.tuned_allocator) continue;
    const double median = bench::Summarize(seconds[i]).median;
    double& best = peer_best[rows[i].peer_of];
    if (best == 0 || median < best) best = median;
  }
  std::vector<double> medians(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const bench::Stats st = bench::Summarize(seconds[i]);
    medians[i] = st.median;
    const double tps = static_cast<double>(rows[i].world * kBatch * kContext) / st.median;
    const size_t against = i < trainyard_rows && i < kOneProcessSetups - 1 ? 0 : i;
    char vs[32] = "";
    if (i < trainyard_rows && peer_best[against] > 0) {
      std::snprintf(vs, sizeof(vs), "%.2fx", peer_best[against] / st.median);
    }
    char mfu[32] = "-";
    if (peak_tflops > 0) {
      std::snprintf(mfu, sizeof(mfu), "%.1f%%",
                    100 * tps / rows[i].world * flops.with_attention / (peak_tflops * 1e12));
    }
    const std::string attention = last[i].value("attention", std::string("sdpa (transformers)"));
    char line[900];
    std::snprintf(line, sizeof(line),
                  "| %d | %s | %lld | %.1f | %.3f | %.3f | %.3f | %.3f | %.2f | %.2f | %s | %s | %.0f | %s |\n",
                  rows[i].world, rows[i].label.c_str(), static_cast<long long>(kBatch), tps, st.min, st.median, st.max,
                  st.cv, tps * flops.six_n / 1e9, tps * flops.with_attention / 1e9, mfu, attention.c_str(),
                  last[i]["peak_rss_bytes"].get<double>() / 1e6, vs);
    std::cout << line << std::flush;
  }
  // The targets of the fused path.
  std::printf("\nfused path vs its own unfused path: %.2fx; vs the peer's fastest loop: %.2fx\n",
              medians[1] / medians[0], peer_best[0] / medians[0]);
  std::cout << "\nmodel: Llama, 8 layers, hidden 512, 8 heads sharing 4 K/V heads, MLP 1408, vocab 8192 ("
            << config->NumParameters() << " parameters; transformers counts " << last.back()["parameters"]
            << "), context " << kContext << ", batch " << kBatch
            << " sequences per rank, AdamW (lr 1e-3, weight decay 0), SDPA attention on both sides, 1 thread per "
               "rank, Gloo; FLOPs per token: "
            << flops.six_n / 1e6 << " M (6N) and " << flops.with_attention / 1e6 << " M (attention counted); " << steps
            << " measured steps per setup in " << rounds << " interleaved rounds, " << warmup
            << " warm-up steps per run.\ncommand: " << argv[0] << " --steps " << steps << " --rounds " << rounds
            << " --warmup " << warmup << (one_process ? " --only-one-process" : "") << "\n";
  std::filesystem::remove_all(dir);
  return 0;
}
