// bench/image_loader: is the step fed from image files? Two parts.
//
// Decode: images/s of one thread decoding and transforming image files
// (Trainyard's image_folder reader: libjpeg-turbo/libpng, Resize, RandomCrop,
// flip, Normalize) against one worker of PyTorch's DataLoader doing the same
// with PIL (bench/python_image_loader.py), on the same files.
//
// Step: 2 ranks (processes) of DDP training ResNet-18 on the image folder
// with data.num_workers 1 (and 0), against the same job on samples already
// decoded (a safetensors file in the page cache, read without decoding).
// Median whole-step time (data wait included) of rank 0. Interleaved rounds.
//
//   image_loader [--steps N] [--rounds R] [--warmup W] [--python PATH]
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "bench/bench_util.h"
#include "common/allocator_tuning.h"
#include "common/job_spec.h"
#include "worker/base/safetensors.h"
#include "worker/collectives/dist_setup.h"
#include "worker/data/data_loader.h"
#include "worker/data/image_folder.h"
#include "worker/train/trainer.h"

namespace trainyard {
namespace {

struct Config {
  const char* name;   // a + b: the two cases of the target
  const char* files;  // python_image_loader.py make's kind
  int images;
  int64_t side, resize, channels, batch;
};

const Config kConfigs[] = {
    {"ResNet-18 (16 channels) 3x32x32 from 32x32 PNGs", "png32", 1024, 32, 32, 16, 32},
    {"ResNet-18 (4 channels) 3x224x224 from 256x256 JPEGs", "jpeg256", 256, 224, 256, 4, 8},
};

ImageTransform TransformFor(const Config& c) {
  ImageTransform t;
  t.resize = c.resize;
  t.crop = c.side;
  t.random_crop = true;
  t.random_flip = true;
  t.mean = {0.5, 0.5, 0.5};
  t.std = {0.25, 0.25, 0.25};
  return t;
}

JobSpec SpecFor(const Config& c, const std::string& data, int workers, const std::string& dir, int steps) {
  JobSpec spec;
  spec.model.kind = ModelKind::kResNet;
  spec.model.channels = c.channels;
  spec.model.image_size = c.side;
  spec.model.num_classes = 4;
  spec.data.batch_size = c.batch;
  spec.data.num_workers = workers;
  spec.data.prefetch_batches = 2;
  spec.optimizer.kind = OptimizerKind::kSgd;
  spec.optimizer.lr = 0.01;
  spec.max_steps = steps;
  spec.num_processes = 2;
  spec.distributed_type = DistributedType::kDdp;
  spec.backend = Backend::kGloo;
  if (data == "images") {
    spec.data.kind = DataKind::kImageFolder;
    spec.data.path = dir + "/" + c.files;
    spec.data.resize = c.resize;
    spec.data.crop_size = c.side;
    spec.data.random_crop = spec.data.random_flip = true;
    spec.data.mean = {0.5, 0.5, 0.5};
    spec.data.std = {0.25, 0.25, 0.25};
  } else {
    spec.data.kind = DataKind::kTensors;
    spec.data.path = dir + "/" + c.files + ".safetensors";
  }
  return spec;
}

class Sink final : public MetricsSink {
 public:
  explicit Sink(int warmup) : warmup_(warmup) {}
  void OnStep(const StepMetrics& m) override {
    if (m.step > warmup_) {
      seconds.push_back(m.step_seconds);
      wait.push_back(m.data_seconds);
    }
  }
  std::vector<double> seconds, wait;

 private:
  int warmup_;
};

int RunRank(int config, const std::string& data, int workers, const std::string& dir, int steps, int warmup) {
  TuneAllocator();  // as trainyard-worker does
  at::set_num_threads(1);
  const int rank = std::stoi(getenv("RANK"));
  JobSpec spec = SpecFor(kConfigs[config], data, workers, dir, warmup + steps);
  RendezvousOptions ro;
  ro.master_port = std::stoi(getenv("MASTER_PORT"));
  ro.rank = rank;
  ro.world_size = 2;
  ro.timeout = std::chrono::minutes(5);
  const DistSetup dist = SetUpDistributed(spec, ro);
  Sink sink(warmup);
  Trainer trainer(spec, rank, 2, dist.context(), &sink, nullptr);
  trainer.Run();
  dist.world->barrier()->wait();
  if (rank == 0) std::cout << nlohmann::json{{"seconds", sink.seconds}, {"wait", sink.wait}}.dump() << std::endl;
  return 0;
}

// The folder's images decoded and transformed once, as the in-memory baseline's samples.
void WriteDecoded(const Config& c, const std::string& dir) {
  ImageFolderDataset images(ScanImageFolder(dir + "/" + c.files, nullptr), TransformFor(c), /*train=*/false, 1);
  std::vector<int64_t> all(static_cast<size_t>(images.size()));
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
  const Batch b = images.Get(all);
  WriteSafetensors(dir + "/" + c.files + ".safetensors",
                   {{"inputs", at::kFloat, b.inputs.sizes().vec()}, {"targets", at::kLong, b.targets.sizes().vec()}},
                   [&](size_t i) { return i == 0 ? b.inputs : b.targets; });
}

// Images/s of one thread reading `batches` batches of 32 after a first one.
double DecodeRate(const Config& c, const std::string& dir, int batches) {
  at::set_num_threads(1);
  ImageFolderDataset images(ScanImageFolder(dir + "/" + c.files, nullptr), TransformFor(c), /*train=*/true, 1);
  auto batch = [&](int k) {
    std::vector<int64_t> idx;
    for (int i = 0; i < 32; ++i) idx.push_back((k * 32 + i) % images.size());
    return images.GetForEpoch(idx, k).inputs.size(0);
  };
  batch(0);
  const auto start = std::chrono::steady_clock::now();
  int64_t n = 0;
  for (int k = 1; k <= batches; ++k) n += batch(k);
  return static_cast<double>(n) / std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int Run(const std::string& python, int steps, int rounds, int warmup, char** argv) {
  TuneAllocator();  // this process decodes Trainyard's side, as trainyard-worker would
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string helper = std::filesystem::path(TRAINYARD_BENCH_DIR) / "python_image_loader.py";
  char tmpl[] = "/tmp/trainyard-image-bench-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  for (const Config& c : kConfigs) {
    const std::string cmd =
        python + " " + helper + " make " + dir + "/" + c.files + " " + c.files + " " + std::to_string(c.images);
    if (std::system(cmd.c_str()) != 0) throw std::runtime_error("failed: " + cmd);
    WriteDecoded(c, dir);
  }

  std::cout << bench::DescribeConditions() << "\n\n"
            << "| files | Trainyard images/s, 1 thread | PyTorch DataLoader images/s, 1 worker, our settings | "
               "defaults | ratio (vs our settings) |\n"
               "|---|---|---|---|---|\n";
  for (const Config& c : kConfigs) {
    const int batches = c.side > 100 ? 15 : 60;
    const double ours = DecodeRate(c, dir, batches);
    auto peer = [&](const bench::RunEnvironment& env) {
      const std::string cmd = bench::ShellPrefix(env) + python + " " + helper + " decode " + dir + "/" + c.files +
                              " --size " + std::to_string(c.side) + " --resize " + std::to_string(c.resize) +
                              " --batches " + std::to_string(batches) + " > " + dir + "/peer.json";
      if (std::system(cmd.c_str()) != 0) throw std::runtime_error("failed: " + cmd);
      std::ifstream in(dir + "/peer.json");
      return nlohmann::json::parse(in)["images_per_second"].get<double>();
    };
    const double tuned = peer(bench::OurSettings()), defaults = peer(bench::PeerDefaults());
    std::printf("| %s (%d) | %.0f | %.0f | %.0f | %.2f |\n", c.files, c.images, ours, tuned, defaults, ours / tuned);
  }

  std::cout << "\n| model and data | setup | step s min | median | max | data wait median s | vs decoded |\n"
               "|---|---|---|---|---|---|---|\n";
  struct Setup {
    const char* label;
    const char* data;
    int workers;
  };
  const Setup setups[] = {{"decoded samples (safetensors, page cache)", "decoded", 0},
                          {"image files, num_workers 1", "images", 1},
                          {"image files, num_workers 0", "images", 0}};
  const int per_round = std::max(1, steps / rounds);
  for (int ci = 0; ci < 2; ++ci) {
    std::vector<std::vector<double>> seconds(3), wait(3);
    for (int round = 0; round < rounds; ++round) {
      for (int s = 0; s < 3; ++s) {
        const std::vector<std::string> a = {self,
                                            "--role",
                                            "rank",
                                            "--config",
                                            std::to_string(ci),
                                            "--data",
                                            setups[s].data,
                                            "--workers",
                                            std::to_string(setups[s].workers),
                                            "--dir",
                                            dir,
                                            "--steps",
                                            std::to_string(per_round),
                                            "--warmup",
                                            std::to_string(warmup)};
        auto j = bench::RunRanks(2, a, bench::OurSettings());
        for (double x : j["seconds"].get<std::vector<double>>()) seconds[s].push_back(x);
        for (double x : j["wait"].get<std::vector<double>>()) wait[s].push_back(x);
      }
    }
    const double base = bench::Summarize(seconds[0]).median;
    for (int s = 0; s < 3; ++s) {
      const bench::Stats st = bench::Summarize(seconds[s]);
      std::printf("| %s, batch %lld/rank | %s | %.4f | %.4f | %.4f | %.4f | %.3f |\n", kConfigs[ci].name,
                  static_cast<long long>(kConfigs[ci].batch), setups[s].label, st.min, st.median, st.max,
                  bench::Summarize(wait[s]).median, st.median / base);
    }
  }
  std::cout << "\nDDP, 2 ranks (processes), 1 compute thread each, Gloo, SGD; transforms Resize, RandomCrop, "
               "RandomHorizontalFlip, Normalize; "
            << steps << " measured steps per setup in " << rounds << " interleaved rounds, " << warmup
            << " warm-up steps per run.\ncommand: " << argv[0] << " --steps " << steps << " --rounds " << rounds
            << " --warmup " << warmup << "\n";
  std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace
}  // namespace trainyard

int main(int argc, char** argv) {
  using namespace trainyard;
  CLI::App app{
      "Trainyard image loader: decode rate per thread against PyTorch's DataLoader; step time fed from "
      "files against decoded samples"};
  int steps = 60, warmup = 3, rounds = 2, config = 0, workers = 0;
  std::string role = "orchestrate", data, dir;
  std::string python = TRAINYARD_PYTHON;
  app.add_option("--steps", steps, "Measured steps per setup (over all rounds)")->capture_default_str();
  app.add_option("--rounds", rounds, "Interleaved rounds")->capture_default_str()->check(CLI::Range(1, 100));
  app.add_option("--warmup", warmup, "Unmeasured first steps of every run")->capture_default_str();
  app.add_option("--python", python, "Python with torch and Pillow for the peer")->capture_default_str();
  app.add_option("--role", role, "internal");
  app.add_option("--config", config, "internal");
  app.add_option("--data", data, "internal");
  app.add_option("--workers", workers, "internal");
  app.add_option("--dir", dir, "internal");
  CLI11_PARSE(app, argc, argv);
  if (role == "rank") return RunRank(config, data, workers, dir, steps, warmup);
  return Run(python, steps, rounds, warmup, argv);
}
