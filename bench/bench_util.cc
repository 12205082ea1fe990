#include "bench/bench_util.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>
#include <stdexcept>

#include "common/allocator_tuning.h"
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
  const std::vector<std::pair<std::string, std::string>> variables = env.Variables();
  const int world = static_cast<int>(argvs.size());
  const int port = PickFreePortOn("127.0.0.1");
  if (port == 0) throw std::runtime_error("no free port on 127.0.0.1");
  int pipefd[2];
  if (pipe(pipefd) != 0) throw std::runtime_error("pipe failed");
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      if (r == 0) dup2(pipefd[1], 1);
      close(pipefd[0]);
      close(pipefd[1]);
      setenv("RANK", std::to_string(r).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
      setenv("MASTER_ADDR", master_addr.c_str(), 1);
      setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      // The variables of this environment, and no tuning inherited from ours.
      unsetenv("MALLOC_MMAP_THRESHOLD_");
      unsetenv("MALLOC_TRIM_THRESHOLD_");
      for (const auto& [name, value] : variables) setenv(name.c_str(), value.c_str(), 1);
      std::vector<char*> args;
      for (const auto& a : argvs[r]) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      execvp(args[0], args.data());
      _exit(127);
    }
    pids.push_back(pid);
  }
  close(pipefd[1]);
  std::string out;
  char buf[65536];
  ssize_t n;
  while ((n = read(pipefd[0], buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  close(pipefd[0]);
  bool failed = false;
  for (pid_t p : pids) {
    int status = 0;
    waitpid(p, &status, 0);
    failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
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

}  // namespace trainyard::bench
