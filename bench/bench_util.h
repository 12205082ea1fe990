// Helpers shared by the benchmark programs: statistics over steps, the
// environment both sides of a comparison run under, running ranks as child
// processes, and a rank's step times.
#ifndef TRAINYARD_BENCH_BENCH_UTIL_H_
#define TRAINYARD_BENCH_BENCH_UTIL_H_

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "common/step_metrics.h"

namespace trainyard::bench {

struct Stats {
  double mean = 0, median = 0, p90 = 0, std = 0, cv = 0, min = 0, max = 0;
  size_t count = 0;
};
Stats Summarize(std::vector<double> values);

// What a benchmarked process runs with, beyond its command line: the
// threads of each process (OMP_NUM_THREADS; each side also sets its intra-op
// threads to the same number; each flushes denormal floats to zero, as
// trainyard-worker does) and glibc's allocator thresholds. Trainyard's
// ranks set the worker's thresholds themselves (common/allocator_tuning.h),
// as trainyard-worker does: a peer gets them through the environment when
// `tuned_allocator` is set, or runs with glibc's defaults, as a user runs it.
struct RunEnvironment {
  int threads = 1;
  bool tuned_allocator = true;
  // The variables a process of this environment is started with.
  std::vector<std::pair<std::string, std::string>> Variables() const;
  // For the line above a table.
  std::string Describe() const;
};
// `env` as a prefix of a shell command ("env -u ... NAME=value ... "): for
// a peer started through std::system.
std::string ShellPrefix(const RunEnvironment& env);
// The environment of every side of a comparison: Trainyard's settings.
RunEnvironment OurSettings();
// A peer as a user runs it: the same threads, glibc's default allocator.
RunEnvironment PeerDefaults();
// The line a benchmark prints above its table: what both sides ran with.
std::string DescribeConditions();

// Runs one process per argv in `argvs` (rank r gets argvs[r], with RANK,
// WORLD_SIZE, MASTER_ADDR=`master_addr`, MASTER_PORT and the variables of
// `env` in its environment), waits for all, and returns rank 0's last stdout
// line that parses as a JSON object. Throws when a rank fails. Both sides
// of every comparison are started here.
nlohmann::json RunRanks(const std::vector<std::vector<std::string>>& argvs, const RunEnvironment& env,
                        const std::string& master_addr = "127.0.0.1");
// The same, with `argv` for each of `world` ranks.
nlohmann::json RunRanks(int world, const std::vector<std::string>& argv, const RunEnvironment& env,
                        const std::string& master_addr = "127.0.0.1");

// A rank's steps as both sides are measured: the compute time (the step
// less its wait for data) of each step after the first `warmup`, and the
// last step's numbers.
class StepTimes final : public MetricsSink {
 public:
  explicit StepTimes(int warmup) : warmup_(warmup) {}
  void OnStep(const StepMetrics& m) override {
    if (m.step > warmup_) seconds.push_back(m.step_seconds - m.data_seconds);
    last = m;
  }
  std::vector<double> seconds;
  StepMetrics last;

 private:
  int warmup_;
};

}  // namespace trainyard::bench

// bench/ in the checkout (its Python peers and scripts), written by CMake into
// one generated file of this library rather than onto each benchmark's
// command line, so that the benchmarks compile alike in every clone.
namespace trainyard::bench {
extern const char* const kBenchDir;
}  // namespace trainyard::bench
#define TRAINYARD_BENCH_DIR (::trainyard::bench::kBenchDir)

#endif  // TRAINYARD_BENCH_BENCH_UTIL_H_
