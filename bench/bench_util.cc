#include "bench/bench_util.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>
#include <sstream>
#include <stdexcept>

#include "common/allocator_tuning.h"
#include "common/child_process.h"
#include "common/placement.h"

namespace trainyard::bench {

Stats Summarize(std::vector<double> v) {
  Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  const double n = static_cast<double>(v.size());
  s.mean = std::accumulate(v.begin(), v.end(), 0.0) / n;
  s.median = v[v.size() / 2];
  s.min = v.front();
  s.max = v.back();
  s.count = v.size();
  s.p90 = v[std::min(v.size() - 1, static_cast<size_t>(std::ceil(0.9 * n)) - 1)];
  double var = 0;
  for (double x : v) var += (x - s.mean) * (x - s.mean);
  s.std = std::sqrt(var / n);
  s.cv = s.mean != 0 ? s.std / s.mean : 0;
  return s;
}

std::vector<std::pair<std::string, std::string>> RunEnvironment::Variables() const {
  std::vector<std::pair<std::string, std::string>> v = {{"OMP_NUM_THREADS", std::to_string(threads)}};
  if (tuned_allocator) {
    for (const std::string& kv : TunedAllocatorEnvironment()) {
      v.emplace_back(kv.substr(0, kv.find('=')), kv.substr(kv.find('=') + 1));
    }
  }
  return v;
}

std::string RunEnvironment::Describe() const {
  return std::to_string(threads) + " thread(s) per process (OMP_NUM_THREADS, set_num_threads), " +
         (tuned_allocator ? DescribeTunedAllocator() : std::string("glibc's default malloc thresholds"));
}

std::string ShellPrefix(const RunEnvironment& env) {
  std::string prefix = "env -u MALLOC_MMAP_THRESHOLD_ -u MALLOC_TRIM_THRESHOLD_";
  for (const auto& [name, value] : env.Variables()) prefix += " " + name + "=" + value;
  return prefix + " ";
}

RunEnvironment OurSettings() { return RunEnvironment{1, true}; }
RunEnvironment PeerDefaults() { return RunEnvironment{1, false}; }

std::string DescribeConditions() {
  return "Conditions: Trainyard and the peer rows marked \"our settings\" ran with " + OurSettings().Describe() +
         " (the peer through MALLOC_MMAP_THRESHOLD_ and MALLOC_TRIM_THRESHOLD_); rows marked \"defaults\" with " +
         PeerDefaults().Describe() + ". Every \"vs\" ratio is against the peer with our settings.";
}

nlohmann::json RunRanks(const std::vector<std::vector<std::string>>& argvs, const RunEnvironment& env,
                        const std::string& master_addr) {
  const int world = static_cast<int>(argvs.size());
  const int port = PickFreePortOn("127.0.0.1");
  if (port == 0) throw std::runtime_error("no free port on 127.0.0.1");
  std::vector<ChildProcess> ranks;
  for (int r = 0; r < world; ++r) {
    ChildPlan plan;
    plan.argv = argvs[r];
    plan.environment = {"RANK=" + std::to_string(r), "WORLD_SIZE=" + std::to_string(world),
                        "MASTER_ADDR=" + master_addr, "MASTER_PORT=" + std::to_string(port)};
    // The variables of this environment, and no tuning inherited from ours.
    plan.unset = {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"};
    for (const auto& [name, value] : env.Variables()) plan.environment.push_back(name + "=" + value);
    if (r == 0) plan.fds[1] = ChildFd::Pipe();
    absl::StatusOr<ChildProcess> rank = ChildProcess::Start(plan);
    if (!rank.ok()) throw std::runtime_error(std::string(rank.status().message()));
    ranks.push_back(std::move(*rank));
  }
  // Rank 0's output to its end; the ranks still running when another
  // fails are killed (and reaped) with `ranks`.
  const std::string out =
      ranks[0].Capture(std::chrono::steady_clock::time_point::max(), std::numeric_limits<size_t>::max()).streams[1];
  bool failed = false;
  for (ChildProcess& rank : ranks) {
    const ChildExit e = rank.Wait();
    failed |= !e.exited() || e.code != 0;
  }
  if (failed) throw std::runtime_error("a rank of " + argvs[0][0] + " failed");
  std::istringstream lines(out);
  std::string line, last;
  while (std::getline(lines, line)) {
    if (!line.empty() && line.front() == '{') last = line;
  }
  if (last.empty()) throw std::runtime_error("no JSON result from " + argvs[0][0]);
  return nlohmann::json::parse(last);
}

nlohmann::json RunRanks(int world, const std::vector<std::string>& argv, const RunEnvironment& env,
                        const std::string& master_addr) {
  return RunRanks(std::vector<std::vector<std::string>>(static_cast<size_t>(world), argv), env, master_addr);
}

}  // namespace trainyard::bench
