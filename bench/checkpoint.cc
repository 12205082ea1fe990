// bench/checkpoint: save and load rates of SHARDED and FULL checkpoints of a
// GPT under FSDP FULL_SHARD at N = 2 ranks (processes), against `dd ...
// conv=fsync` writing the same number of bytes to the same directory in the
// same run; and rank 0's peak extra resident memory during a FULL save
// (VmHWM after resetting it through /proc/self/clear_refs, minus VmRSS
// before) relative to the model's largest tensor.
//
//   checkpoint [--dir DIR] [--layers L] [--width W] [--vocab V] [--repeats R]
#include <malloc.h>
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "bench/bench_util.h"
#include "common/allocator_tuning.h"
#include "common/checkpoint_dir.h"
#include "common/job_spec.h"
#include "worker/collectives/dist_setup.h"
#include "worker/collectives/process_group.h"
#include "worker/models/models.h"
#include "worker/parallel/fsdp.h"
#include "worker/train/trainer.h"
#include "worker/worker_main.h"

namespace trainyard {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

JobSpec Spec(const std::string& dir, int layers, int width, int vocab) {
  JobSpec spec;
  spec.model.kind = ModelKind::kGpt;
  spec.model.layers = layers;
  spec.model.width = width;
  spec.model.heads = 8;
  spec.model.context = 64;
  spec.model.vocab = vocab;
  spec.data.batch_size = 2;
  spec.optimizer.kind = OptimizerKind::kAdamW;
  spec.num_processes = 2;
  spec.distributed_type = DistributedType::kFsdp;
  spec.fsdp.sharding_strategy = ShardingStrategy::kFullShard;
  spec.fsdp.auto_wrap_policy = WrapPolicy::kTransformerBased;
  spec.fsdp.transformer_layer_cls_to_wrap = {"Block"};
  spec.checkpoint.project_dir = dir;
  spec.checkpoint.save_final = false;
  return spec;
}

// kB from /proc/self/status.
int64_t StatusKb(const std::string& key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) == 0) return std::stoll(line.substr(key.size() + 1));
  }
  return -1;
}

double MaxOverRanks(const c10::intrusive_ptr<c10d::ProcessGroup>& pg, double v) {
  at::Tensor t = at::full({1}, v, at::kDouble);
  std::vector<at::Tensor> ts = {t};
  c10d::AllreduceOptions o;
  o.reduceOp = c10d::ReduceOp::MAX;
  pg->allreduce(ts, o)->wait();
  return t.item<double>();
}

// Seconds dd takes to write `bytes` with conv=fsync.
double Dd(const std::string& dir, int64_t bytes) {
  const std::string file = dir + "/dd.bin";
  const int64_t mb = std::max<int64_t>(1, bytes >> 20);
  const std::string cmd =
      "dd if=/dev/zero of=" + file + " bs=1M count=" + std::to_string(mb) + " conv=fsync status=none";
  const auto t0 = Clock::now();
  if (std::system(cmd.c_str()) != 0) throw std::runtime_error("dd failed: " + cmd);
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  fs::remove(file);
  return s * static_cast<double>(bytes) / static_cast<double>(mb << 20);
}

int RunRank(const std::string& dir, int layers, int width, int vocab, int repeats) {
  TuneAllocator();  // as trainyard-worker does
  at::set_num_threads(1);
  // Large blocks straight from mmap and back on free, so resident memory
  // follows live allocations (glibc would otherwise reuse retained heap).
  mallopt(M_MMAP_THRESHOLD, 64 << 10);
  const int rank = std::stoi(getenv("RANK"));
  const int world = std::stoi(getenv("WORLD_SIZE"));
  JobSpec spec = Spec(dir, layers, width, vocab);
  RendezvousOptions ro;
  ro.master_port = std::stoi(getenv("MASTER_PORT"));
  ro.rank = rank;
  ro.world_size = world;
  ro.timeout = std::chrono::minutes(10);
  spec.backend = Backend::kGloo;
  const DistSetup dist = SetUpDistributed(spec, ro);
  Trainer trainer(spec, rank, world, dist.context(), nullptr, nullptr);
  trainer.Step();  // optimizer state exists
  int64_t largest = 0, params = 0;
  for (const at::Tensor& p : trainer.model().parameters()) {
    largest = std::max<int64_t>(largest, p.numel() * 4);
    params += p.numel();
  }
  nlohmann::json out = {{"largest_tensor_bytes", largest}, {"parameters", params}};
  for (const char* kind : {"sharded", "full"}) {
    const CheckpointType type = std::string(kind) == "sharded" ? CheckpointType::kSharded : CheckpointType::kFull;
    std::vector<double> save_s, load_s, extra, dd_s;
    int64_t bytes = 0;
    for (int i = -1; i < repeats; ++i) {  // i = -1: unmeasured, learns the size
      // dd writes the same bytes right before each save, same conditions.
      if (rank == 0 && i >= 0) dd_s.push_back(Dd(dir, bytes));
      dist.world->barrier()->wait();
      int64_t rss_before = 0;
      if (rank == 0 && type == CheckpointType::kFull) {
        malloc_trim(0);
        rss_before = StatusKb("VmRSS");
        std::ofstream("/proc/self/clear_refs") << "5";  // VmHWM := VmRSS
      }
      CheckpointEvent ev = trainer.Checkpoint(type);
      if (!ev.ok) throw std::runtime_error(ev.error);
      bytes = ev.bytes;
      if (i < 0) {
        if (rank == 0) fs::remove_all(CheckpointDir(dir).root() + "/checkpoint_" + std::to_string(ev.index));
        continue;
      }
      if (rank == 0 && type == CheckpointType::kFull) extra.push_back((StatusKb("VmHWM") - rss_before) * 1024.0);
      save_s.push_back(ev.seconds);
      // Loads read from the page cache unless it is dropped; say which.
      dist.world->barrier()->wait();
      const auto t0 = Clock::now();
      trainer.Resume(CheckpointDir(dir).root() + "/checkpoint_" + std::to_string(ev.index));
      load_s.push_back(MaxOverRanks(dist.world, std::chrono::duration<double>(Clock::now() - t0).count()));
      if (rank == 0) {
        std::error_code ec;
        fs::remove_all(CheckpointDir(dir).root() + "/checkpoint_" + std::to_string(ev.index), ec);
      }
    }
    out[kind] = {{"bytes", bytes}, {"save_seconds", save_s}, {"load_seconds", load_s}};
    if (rank == 0) out[kind]["dd_seconds"] = dd_s;
    if (!extra.empty()) out[kind]["peak_extra_bytes"] = *std::max_element(extra.begin(), extra.end());
  }
  dist.world->barrier()->wait();
  if (rank == 0) std::cout << out.dump() << std::endl;
  return 0;
}

}  // namespace
}  // namespace trainyard

int main(int argc, char** argv) {
  using namespace trainyard;
  CLI::App app{"Trainyard checkpoints: save/load rates vs dd, FULL save peak memory"};
  std::string dir = (fs::temp_directory_path() / "trainyard-bench-checkpoint").string();
  int layers = 8, width = 512, vocab = 8192, repeats = 20;
  std::string role = "orchestrate";
  app.add_option("--dir", dir, "Directory to write checkpoints to (removed afterwards)")->capture_default_str();
  app.add_option("--layers", layers)->capture_default_str();
  app.add_option("--width", width)->capture_default_str();
  app.add_option("--vocab", vocab)->capture_default_str();
  app.add_option("--repeats", repeats, "Measured saves, loads and dd runs per layout, alternating dd and save")
      ->capture_default_str();
  app.add_option("--role", role, "internal");
  CLI11_PARSE(app, argc, argv);
  if (role == "rank") return RunRank(dir, layers, width, vocab, repeats);

  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  std::vector<std::string> a = {self,
                                "--role",
                                "rank",
                                "--dir",
                                dir,
                                "--layers",
                                std::to_string(layers),
                                "--width",
                                std::to_string(width),
                                "--vocab",
                                std::to_string(vocab),
                                "--repeats",
                                std::to_string(repeats)};
  auto j = bench::RunRanks(2, a, bench::OurSettings());
  std::cout << "| layout | bytes (MB) | save s min | median | max | save MB/s (median) | dd conv=fsync MB/s "
               "(same bytes, alternating; median) | save / dd | load s min | median | max | load MB/s (median) |\n"
               "|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const char* kind : {"sharded", "full"}) {
    const auto& k = j[kind];
    const double mb = k["bytes"].get<double>() / 1e6;
    const bench::Stats save = bench::Summarize(k["save_seconds"].get<std::vector<double>>());
    const bench::Stats load = bench::Summarize(k["load_seconds"].get<std::vector<double>>());
    const double dd = bench::Summarize(k["dd_seconds"].get<std::vector<double>>()).median;
    char line[512];
    std::snprintf(line, sizeof(line),
                  "| %s | %.1f | %.3f | %.3f | %.3f | %.0f | %.0f | %.2f | %.3f | %.3f | %.3f | %.0f |\n", kind, mb,
                  save.min, save.median, save.max, mb / save.median, mb / dd, dd / save.median, load.min, load.median,
                  load.max, mb / load.median);
    std::cout << line;
  }
  const double largest = j["largest_tensor_bytes"].get<double>();
  const double extra = j["full"]["peak_extra_bytes"].get<double>();
  std::printf("\nFULL save, rank 0 peak extra resident memory: %.1f MB = %.2fx the largest tensor (%.1f MB)\n",
              extra / 1e6, extra / largest, largest / 1e6);
  std::cout << "model: GPT " << layers << " layers, width " << width << ", vocab " << vocab << " ("
            << j["parameters"].get<int64_t>() / 1000000.0 << "M parameters), AdamW state, FSDP FULL_SHARD at N=2 "
            << "(processes); loads read through the page cache (the files were just written).\ncommand: " << argv[0]
            << " --dir " << dir << " --layers " << layers << " --width " << width << " --vocab " << vocab
            << " --repeats " << repeats << "\n";
  fs::remove_all(dir);
  return 0;
}
