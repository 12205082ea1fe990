// bench/gpu (gpu_bench): the benchmarks of the GPU kit (scripts/gpu-kit.sh), for one
// NVIDIA GPU. Every process of both sides is started by bench::RunRanks
// with one environment (bench_util's, with 8 threads per process: both
// sides build their model and batches on the host); each row is a fresh
// process set, printed as soon as it ends, and a row that fails prints its
// error and leaves the others standing.
//
//   llama: a ~1.1B-parameter Llama (hidden 2048, 16 layers, 32 heads
//     sharing 8 K/V heads, MLP 8192, vocab 32000, untied head) at context
//     2048 in bf16 autocast with fp32 weights on one GPU: the fused path
//     (the job's `fused` section) at each of --batches, then unfused and
//     with each fused piece off, and activation checkpointing, against
//     transformers' LlamaForCausalLM of the same config.json with
//     PyTorch's own loop (AdamW foreach, its CUDA default, and fused, its
//     fastest documented path; gradient checkpointing) and FSDP2 on one rank
//     (bench/python_llama.py): tokens/s, MFU three ways over the GPU's
//     data-sheet dense bf16 peak (attention counted, 6N, and the worker's
//     own count; bench/llama_flops.h), the attention kernel, peak device
//     memory (the CUDA allocator's).
//   resnet: the engine's ResNet-18 (CIFAR stem) and ResNet-50 (torchvision's,
//     against torchvision's resnet50) on 3x64x64 images, batch 128 per rank,
//     bf16 autocast: one process, and DDP over 2 ranks that share the GPU
//     (Gloo), against PyTorch (DDP) (bench/python_ddp.py).
//   checkpoint: FULL and SHARDED checkpoints of the 1.1B llama after one
//     step (fp32 weights and AdamW state, from GPU memory): seconds and
//     GB/s, with the disk's own rate (the same bytes written and fsynced).
//
//   gpu_bench [--only llama|resnet|checkpoint] [--steps N] [--warmup W]
//       [--batches B1,B2] [--quick] [--python PATH] [--peer-dir DIR] [--dir DIR]
#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "absl/strings/str_join.h"
#include "bench/bench_util.h"
#include "bench/llama_flops.h"
#include "common/allocator_tuning.h"
#include "common/checkpoint_type.h"
#include "common/job_spec.h"
#include "common/llama_config.h"
#include "worker/base/crash_report.h"
#include "worker/base/device.h"
#include "worker/collectives/dist_setup.h"
#include "worker/models/attention_backend.h"
#include "worker/models/models.h"
#include "worker/train/trainer.h"

namespace trainyard {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kContext = 2048;
constexpr int64_t kImage = 64, kImageBatch = 128;

// Llama 3.2 1B's layout with Llama 2's vocabulary and an untied head.
constexpr char kConfig[] = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 32000, "hidden_size": 2048,
  "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
  "hidden_act": "silu", "max_position_embeddings": 2048, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
  "tie_word_embeddings": false, "initializer_range": 0.02, "attention_bias": false, "mlp_bias": false
})";

// The fused path with `without` turned off: "" (none), "all", "optimizer",
// "rms_norm", "chunked_loss", "attention" (the math kernel) or
// "cuda_graph" (the step not captured).
FusedSpec FusedWithout(const std::string& without) {
  FusedSpec f;
  const bool all = without == "all";
  if (all || without == "optimizer") f.optimizer = false;
  if (all || without == "rms_norm") f.rms_norm = false;
  if (all || without == "chunked_loss") f.chunked_loss = false;
  if (all || without == "attention") f.attention = AttentionBackend::kMath;
  if (all || without == "cuda_graph") f.cuda_graph = StepCapture::kOff;
  return f;
}

JobSpec LlamaSpec(const std::string& config_dir, int64_t batch, bool checkpointing, int steps,
                  const std::string& without = "") {
  JobSpec spec;
  spec.fused = FusedWithout(without);
  spec.model.kind = ModelKind::kLlama;
  spec.model.config = config_dir;
  spec.model.context = kContext;
  spec.data.batch_size = batch;
  spec.optimizer.kind = OptimizerKind::kAdamW;
  spec.optimizer.lr = 1e-4;
  spec.optimizer.weight_decay = 0.0;  // as the peer's
  spec.max_steps = steps;
  spec.num_processes = 1;
  spec.device = Device::kCuda;
  spec.mixed_precision = MixedPrecision::kBf16;
  spec.distributed_type = DistributedType::kNo;
  spec.activation_checkpointing = checkpointing;
  spec.checkpoint.save_final = false;
  return spec;
}

// The image models of the resnet table: the engine's model kind and the
// peer's --model of the same architecture.
struct ImageModel {
  ModelKind kind;
  const char* title;
};
constexpr ImageModel kImageModels[] = {{ModelKind::kResNet, "ResNet-18 (CIFAR stem)"},
                                       {ModelKind::kResNet50, "ResNet-50 (torchvision)"}};

JobSpec ResNetSpec(ModelKind kind, int world, int steps) {
  JobSpec spec;
  spec.model.kind = kind;
  spec.model.channels = 64;  // resnet only
  spec.model.image_size = kImage;
  spec.data.batch_size = kImageBatch;
  spec.optimizer.kind = OptimizerKind::kAdamW;
  spec.optimizer.lr = 1e-3;
  spec.optimizer.weight_decay = 0.01;  // as the peer's
  spec.max_steps = steps;
  spec.num_processes = world;
  spec.device = Device::kCuda;
  spec.mixed_precision = MixedPrecision::kBf16;
  spec.distributed_type = world > 1 ? DistributedType::kDdp : DistributedType::kNo;
  spec.backend = Backend::kGloo;  // two ranks on one GPU: NCCL refuses a shared device
  spec.checkpoint.save_final = false;
  return spec;
}

DistSetup Rendezvous(const JobSpec& spec, int rank, int world) {
  if (world == 1) return {};
  RendezvousOptions ro;
  ro.master_port = std::stoi(getenv("MASTER_PORT"));
  ro.rank = rank;
  ro.world_size = world;
  ro.timeout = std::chrono::minutes(5);
  return SetUpDistributed(spec, ro);
}

// One rank of a Trainyard row: trains, then rank 0 prints its JSON line.
int RunTrainRank(const JobSpec& spec, int warmup) {
  TuneAllocator();  // as trainyard-worker does
  const int rank = std::stoi(getenv("RANK"));
  const int world = std::stoi(getenv("WORLD_SIZE"));
  const c10::Device device = RankDevice(spec.device);
  UseDevice(device);
  DistSetup dist = Rendezvous(spec, rank, world);
  bench::StepTimes sink(warmup);
  int64_t parameters = 0;
  {
    Trainer trainer(spec, rank, world, dist.context(), &sink, nullptr);
    for (const at::Tensor& p : trainer.model().parameters()) parameters += p.numel();
    trainer.Run();
  }
  if (dist.world) dist.world->barrier()->wait();
  if (rank == 0) {
    const auto memory = ReadDeviceMemory(device);
    std::cout << nlohmann::json{{"seconds", sink.seconds},
                                {"model_flops", sink.last.model_flops},
                                {"peak_flops", sink.last.peak_flops},
                                {"device", DeviceName(device)},
                                {"device_peak_bytes", memory ? memory->peak_allocated : 0},
                                {"attention", SdpaBackendName(sink.last.attention_backend)},
                                {"parameters", parameters}}
                     .dump()
              << std::endl;
  }
  return 0;
}

// Writes `bytes` to a file in `dir` in 64 MiB pieces and fsyncs it: the
// disk's rate for a checkpoint's size. Returns seconds.
double DiskWrite(const std::string& dir, int64_t bytes) {
  const std::string path = dir + "/disk-rate.bin";
  std::vector<char> block(64 << 20, 1);
  const auto t0 = std::chrono::steady_clock::now();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw std::runtime_error("cannot write " + path);
  for (int64_t left = bytes; left > 0;) {
    const ssize_t n = ::write(fd, block.data(), static_cast<size_t>(std::min<int64_t>(left, block.size())));
    if (n <= 0) throw std::runtime_error("write to " + path + " failed");
    left -= n;
  }
  ::fsync(fd);
  ::close(fd);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fs::remove(path);
  return s;
}

// The checkpoint rank: one step, then a FULL and a SHARDED save.
int RunCheckpointRank(const std::string& config_dir, const std::string& dir) {
  TuneAllocator();
  JobSpec spec = LlamaSpec(config_dir, 1, false, 1);
  spec.checkpoint.project_dir = dir;
  const c10::Device device = RankDevice(spec.device);
  UseDevice(device);
  Trainer trainer(spec, 0, 1, {}, nullptr, nullptr);
  trainer.Step();
  nlohmann::json out = nlohmann::json::object();
  for (CheckpointType type : {CheckpointType::kFull, CheckpointType::kSharded}) {
    const CheckpointEvent ev = trainer.Checkpoint(type);
    if (!ev.ok) throw std::runtime_error("checkpoint failed: " + ev.error);
    const std::string name = CheckpointTypeName(type);
    out[name] = {{"seconds", ev.seconds}, {"bytes", ev.bytes}, {"disk_seconds", DiskWrite(dir, ev.bytes)}};
    fs::remove_all(ev.path);
  }
  std::cout << out.dump() << std::endl;
  return 0;
}

struct Row {
  std::string label;
  int world;
  bench::RunEnvironment env;
  std::vector<std::string> argv;  // one rank's command line
  bool ours;
};

bench::RunEnvironment GpuSettings() {
  bench::RunEnvironment env = bench::OurSettings();
  env.threads = 8;
  return env;
}

// Runs one row: its result, or {"error": ...} when a rank failed.
nlohmann::json RunRow(const Row& r) {
  const auto t0 = std::chrono::steady_clock::now();
  nlohmann::json result;
  try {
    result = bench::RunRanks(r.world, r.argv, r.env);
  } catch (const std::exception& e) {
    result = nlohmann::json{{"error", e.what()}};
  }
  std::cerr << "gpu_bench: row \"" << r.label << "\" "
            << (result.contains("error") ? "failed: " + result["error"].get<std::string>() : std::string("done"))
            << " in " << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() << " s"
            << std::endl;
  return result;
}

// A result's per-step seconds (ours: "seconds"; python_ddp.py: "train_seconds").
std::vector<double> StepSeconds(const nlohmann::json& result) {
  for (const char* key : {"seconds", "train_seconds"}) {
    if (result.contains(key)) return result[key].get<std::vector<double>>();
  }
  return {};
}

void PrintFailed(const Row& row, const nlohmann::json& result) {
  std::cout << "| " << row.label << " | failed: " << result.value("error", std::string("no step times")) << " |"
            << std::endl;
}

void LlamaTable(const std::string& self, const std::string& python, const std::string& peer_dir,
                const std::string& config_dir, int steps, int warmup, const std::vector<int64_t>& batches, bool quick) {
  const auto config = ReadLlamaConfig(config_dir);
  if (!config.ok()) throw std::runtime_error(std::string(config.status().message()));
  const bench::LlamaTrainingFlops formula = bench::LlamaFlopsPerToken(*config, kContext);
  auto ours = [&](int64_t batch, bool ac, const std::string& without) {
    return std::vector<std::string>{self,
                                    "--role",
                                    "llama-rank",
                                    "--config",
                                    config_dir,
                                    "--steps",
                                    std::to_string(steps),
                                    "--warmup",
                                    std::to_string(warmup),
                                    "--batch",
                                    std::to_string(batch),
                                    ac ? "--checkpointing" : "--no-checkpointing",
                                    "--without",
                                    without.empty() ? "none" : without};
  };
  auto peer = [&](int64_t batch, std::vector<std::string> extra) {
    std::vector<std::string> a = {python,
                                  peer_dir + "/python_llama.py",
                                  config_dir,
                                  "--steps",
                                  std::to_string(steps),
                                  "--warmup",
                                  std::to_string(warmup),
                                  "--context",
                                  std::to_string(kContext),
                                  "--batch",
                                  std::to_string(batch),
                                  "--device",
                                  "cuda",
                                  "--bf16"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  const bench::RunEnvironment env = GpuSettings();
  struct LlamaRow {
    Row row;
    int64_t batch;
  };
  // Ours first: their FLOP count gives every row's MFU. The fused path at
  // each batch (the best one is the target's), then without it and without
  // each piece, then checkpointing; --quick: the rows the targets need.
  const int64_t first = batches.front();
  std::vector<LlamaRow> rows;
  for (int64_t b : batches) {
    rows.push_back({{"Trainyard, 1 GPU (fused path)", 1, env, ours(b, false, ""), true}, b});
  }
  rows.push_back(
      {{"Trainyard, 1 GPU, unfused (every fused piece off)", 1, env, ours(first, false, "all"), true}, first});
  if (!quick) {
    for (const char* piece : {"optimizer", "rms_norm", "chunked_loss", "attention", "cuda_graph"}) {
      const std::string label =
          std::string("Trainyard, 1 GPU, fused.") + piece + (std::string(piece) == "attention" ? " math" : " off");
      rows.push_back({{label, 1, env, ours(first, false, piece), true}, first});
    }
  }
  rows.push_back({{"Trainyard, 1 GPU, activation checkpointing", 1, env, ours(first, true, ""), true}, first});
  rows.push_back({{"transformers + PyTorch loop, AdamW fused", 1, env, peer(first, {"--fused"}), false}, first});
  rows.push_back(
      {{"transformers + torch.compile, AdamW fused", 1, env, peer(first, {"--fused", "--compile"}), false}, first});
  rows.push_back({{"transformers + PyTorch loop, gradient checkpointing, AdamW fused", 1, env,
                   peer(first, {"--fused", "--checkpointing"}), false},
                  first});
  if (!quick) {
    rows.push_back(
        {{"transformers + PyTorch loop, AdamW foreach (default)", 1, env, peer(first, {"--foreach"}), false}, first});
    rows.push_back({{"transformers + FSDP2 fully_shard per layer, 1 rank, AdamW fused", 1, env,
                     peer(first, {"--fsdp", "--fused"}), false},
                    first});
  }
  std::cout << "\n### Llama ~1.1B (" << config->NumParameters() << " parameters), bf16, context " << kContext
            << ", one GPU\n\n"
            << "| implementation / setup | micro-batch | tokens/s (median step) | step s min | median | max | MFU "
               "(attention counted) | MFU (6N) | MFU (the worker's count) | attention | peak device memory GB |\n"
               "|---|---|---|---|---|---|---|---|---|---|---|"
            << std::endl;
  double counted_per_token = 0, peak = 0;
  std::string device = "?";
  double ours_tps[2] = {0, 0}, peer_tps[2] = {0, 0};  // [checkpointing]
  double fused_tps = 0, unfused_tps = 0;
  for (const LlamaRow& lr : rows) {
    const Row& row = lr.row;
    const nlohmann::json r = RunRow(row);
    const std::vector<double> seconds = StepSeconds(r);
    if (seconds.empty()) {
      PrintFailed(row, r);
      continue;
    }
    if (row.ours && counted_per_token == 0 && r.value("model_flops", 0.0) > 0) {
      counted_per_token = r["model_flops"].get<double>() / static_cast<double>(lr.batch * kContext);
      peak = r.value("peak_flops", 0.0);
      device = r.value("device", std::string("?"));
    }
    const bench::Stats st = bench::Summarize(seconds);
    const double tps = static_cast<double>(lr.batch * kContext) / st.median;
    const int ac = row.label.find("checkpointing") != std::string::npos ? 1 : 0;
    double& best = row.ours ? ours_tps[ac] : peer_tps[ac];
    if (row.ours || lr.batch == first) best = std::max(best, tps);
    if (row.label == "Trainyard, 1 GPU (fused path)") fused_tps = std::max(fused_tps, tps);
    if (row.label.find("unfused") != std::string::npos) unfused_tps = tps;
    auto mfu = [&](double per_token) {
      char out[32] = "?";
      if (per_token > 0 && peak > 0) std::snprintf(out, sizeof(out), "%.1f%%", 100 * tps * per_token / peak);
      return std::string(out);
    };
    char line[800];
    std::snprintf(line, sizeof(line), "| %s | %lld | %.0f | %.3f | %.3f | %.3f | %s | %s | %s | %s | %.1f |",
                  row.label.c_str(), static_cast<long long>(lr.batch), tps, st.min, st.median, st.max,
                  mfu(formula.with_attention).c_str(), mfu(formula.six_n).c_str(), mfu(counted_per_token).c_str(),
                  r.value("attention", std::string("sdpa (transformers)")).c_str(),
                  r.value("device_peak_bytes", 0.0) / 1e9);
    std::cout << line << std::endl;
  }
  std::cout << "\ndevice: " << device << "; " << steps << " measured steps after " << warmup
            << " warm-up steps per row; MFU = tokens/s x FLOPs per token / " << peak / 1e12
            << " TFLOP/s (dense bf16 data-sheet peak); FLOPs per token: " << formula.with_attention / 1e9
            << " G with attention (nanochat's and llm-foundry's count), " << formula.six_n / 1e9 << " G (6N), "
            << counted_per_token / 1e9 << " G (the worker's: 3x the forward as the profiler counts it)\n";
  if (fused_tps > 0 && unfused_tps > 0) std::cout << "fused path vs unfused: " << fused_tps / unfused_tps << "x\n";
  for (int ac : {0, 1}) {
    if (ours_tps[ac] > 0 && peer_tps[ac] > 0) {
      std::cout << "Trainyard vs the peer's fastest row, checkpointing " << (ac ? "on" : "off") << ": "
                << ours_tps[ac] / peer_tps[ac] << "x\n";
    }
  }
  std::cout << std::flush;
}

void ResNetTable(const ImageModel& model, const std::string& self, const std::string& python,
                 const std::string& peer_dir, int steps, int warmup) {
  const std::string kind = ModelKindName(model.kind);
  auto ours = [&](int world) {
    return std::vector<std::string>{self,
                                    "--role",
                                    "resnet-rank",
                                    "--model",
                                    kind,
                                    "--world",
                                    std::to_string(world),
                                    "--steps",
                                    std::to_string(steps),
                                    "--warmup",
                                    std::to_string(warmup)};
  };
  auto peer = [&]() {
    return std::vector<std::string>{python,         peer_dir + "/python_ddp.py",
                                    "--model",      kind,
                                    "--channels",   "64",
                                    "--image-size", std::to_string(kImage),
                                    "--batch",      std::to_string(kImageBatch),
                                    "--steps",      std::to_string(steps),
                                    "--warmup",     std::to_string(warmup),
                                    "--device",     "cuda",
                                    "--bf16",       "--fused"};
  };
  const bench::RunEnvironment env = GpuSettings();
  // Each Trainyard row is followed by its peer.
  const std::vector<Row> rows = {
      {"Trainyard, 1 process", 1, env, ours(1), true},
      {"PyTorch, 1 process, AdamW fused", 1, env, peer(), false},
      {"Trainyard DDP, 2 ranks on the GPU (Gloo)", 2, env, ours(2), true},
      {"PyTorch DDP, 2 ranks on the GPU (Gloo), AdamW fused", 2, env, peer(), false},
  };
  std::cout << "\n### " << model.title << ", 3x" << kImage << "x" << kImage << ", batch " << kImageBatch
            << " per rank, bf16, one GPU\n\n"
            << "| implementation / setup | images/s per rank (median) | step s min | median | max | Trainyard vs "
               "PyTorch |\n|---|---|---|---|---|---|"
            << std::endl;
  double ours_median = 0;
  for (const Row& row : rows) {
    const nlohmann::json r = RunRow(row);
    const std::vector<double> seconds = StepSeconds(r);
    if (seconds.empty()) {
      PrintFailed(row, r);
      if (row.ours) ours_median = 0;
      continue;
    }
    const bench::Stats st = bench::Summarize(seconds);
    char vs[32] = "";
    if (row.ours) {
      ours_median = st.median;
    } else if (ours_median > 0) {
      std::snprintf(vs, sizeof(vs), "%.2fx", st.median / ours_median);
    }
    char line[400];
    std::snprintf(line, sizeof(line), "| %s | %.0f | %.4f | %.4f | %.4f | %s |", row.label.c_str(),
                  kImageBatch / st.median, st.min, st.median, st.max, vs);
    std::cout << line << std::endl;
  }
  std::cout << "\n" << steps << " measured steps after " << warmup << " warm-up steps per row" << std::endl;
}

void CheckpointTable(const std::string& self, const std::string& config_dir, const std::string& dir) {
  const Row row = {
      "checkpoint", 1, GpuSettings(), {self, "--role", "checkpoint-rank", "--config", config_dir, "--dir", dir}, true};
  const nlohmann::json r = RunRow(row);
  std::cout << "\n### Checkpoints of the ~1.1B llama (weights and AdamW state, from GPU memory) to " << dir
            << "\n\n| type | bytes | seconds | GB/s | the disk's GB/s (same bytes, fsync) |\n|---|---|---|---|---|\n";
  for (const char* type : {"full", "sharded"}) {
    if (!r.contains(type)) {
      std::cout << "| " << type << " | failed: " << r.value("error", std::string("no result")) << " |" << std::endl;
      continue;
    }
    const auto& t = r[type];
    const double bytes = t["bytes"].get<double>();
    char line[300];
    std::snprintf(line, sizeof(line), "| %s | %.0f | %.2f | %.2f | %.2f |\n", type, bytes, t["seconds"].get<double>(),
                  bytes / 1e9 / t["seconds"].get<double>(), bytes / 1e9 / t["disk_seconds"].get<double>());
    std::cout << line << std::flush;
  }
}

}  // namespace
}  // namespace trainyard

int main(int argc, char** argv) {
  using namespace trainyard;
  InstallCrashReport("gpu_bench");
  CLI::App app{"The GPU kit's benchmarks: Llama ~1B bf16, ResNet DDP and checkpoints on one GPU"};
  // 4 warm-up steps: the captured step's 3 eager ones and its capture;
  // torch.compile's compilation.
  int steps = 10, warmup = 4, world = 1;
  int64_t batch = 4;
  std::vector<int64_t> batches = {4, 8};
  std::string without = "none";
  bool checkpointing = false, quick = false;
  std::string role = "orchestrate", only, config_dir, python = TRAINYARD_PYTHON, peer_dir = TRAINYARD_BENCH_DIR;
  std::string image_model = "resnet";
  std::string dir = fs::temp_directory_path().string();
  app.add_option("--only", only, "One table: llama, resnet or checkpoint")
      ->check(CLI::IsMember({"llama", "resnet", "checkpoint"}));
  app.add_option("--steps", steps, "Measured steps per row")->capture_default_str();
  app.add_option("--warmup", warmup, "Unmeasured first steps of every row")->capture_default_str();
  app.add_option("--batch", batch, "internal: llama-rank's sequences per step");
  app.add_option("--batches", batches, "llama: the fused path's micro-batches (sequences per step)")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--without", without, "internal: llama-rank's fused piece turned off (none, all, or one)");
  app.add_option("--python", python, "Python with torch and transformers for the peer")->capture_default_str();
  app.add_option("--peer-dir", peer_dir, "Directory of the peer scripts (python_llama.py, python_ddp.py)")
      ->capture_default_str();
  app.add_flag("--quick", quick, "llama: only the rows the targets need (no ablation, fewer peers)");
  app.add_option("--dir", dir, "checkpoint: where checkpoints are written")->capture_default_str();
  app.add_option("--role", role, "internal");
  app.add_option("--config", config_dir, "internal");
  app.add_option("--world", world, "internal");
  app.add_option("--model", image_model, "internal: resnet-rank's model kind")
      ->check(CLI::IsMember({"resnet", "resnet50"}));
  app.add_flag("--checkpointing,!--no-checkpointing", checkpointing, "internal");
  CLI11_PARSE(app, argc, argv);
  try {
    if (role == "llama-rank") {
      return RunTrainRank(LlamaSpec(config_dir, batch, checkpointing, warmup + steps, without == "none" ? "" : without),
                          warmup);
    }
    if (role == "resnet-rank") {
      const ModelKind kind = image_model == "resnet50" ? ModelKind::kResNet50 : ModelKind::kResNet;
      return RunTrainRank(ResNetSpec(kind, world, warmup + steps), warmup);
    }
    if (role == "checkpoint-rank") return RunCheckpointRank(config_dir, dir);

    // The driver's list, not CUDA: this process only starts the ranks and
    // never initializes CUDA itself.
    std::error_code ec;
    if (fs::is_empty("/proc/driver/nvidia/gpus", ec) || ec) {
      std::cerr << "gpu_bench: no GPU: the NVIDIA driver shows none (/proc/driver/nvidia/gpus)\n";
      return 1;
    }
    const fs::path config = fs::temp_directory_path() / ("trainyard-bench-gpu-" + std::to_string(::getpid()));
    fs::create_directories(config);
    std::ofstream(config / "config.json") << kConfig;
    const std::string self = fs::read_symlink("/proc/self/exe").string();
    std::cout << "Conditions: both sides of every row ran with " << GpuSettings().Describe() << std::endl;
    if (only.empty() || only == "llama")
      LlamaTable(self, python, peer_dir, config.string(), steps, warmup, batches, quick);
    if (only.empty() || only == "resnet") {
      for (const ImageModel& m : kImageModels) ResNetTable(m, self, python, peer_dir, steps * 3, warmup);
    }
    if (only.empty() || only == "checkpoint") {
      const fs::path ckpt = fs::path(dir) / ("trainyard-bench-gpu-ckpt-" + std::to_string(::getpid()));
      fs::create_directories(ckpt);
      CheckpointTable(self, config.string(), ckpt.string());
      fs::remove_all(ckpt);
    }
    std::cout << "\ncommand: " << argv[0] << (only.empty() ? "" : " --only " + only) << " --steps " << steps
              << " --warmup " << warmup << " --batches " << absl::StrJoin(batches, ",") << (quick ? " --quick" : "")
              << std::endl;
    fs::remove_all(config);
  } catch (const std::exception& e) {
    std::cerr << "gpu: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
