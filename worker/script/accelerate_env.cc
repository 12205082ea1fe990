#include "worker/script/accelerate_env.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/subprocess.h"

namespace trainyard {

std::string AccelerateEnvCacheDir() {
  if (const char* dir = std::getenv("TRAINYARD_CACHE_DIR"); dir != nullptr && *dir != '\0') return dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    return absl::StrCat(xdg, "/trainyard");
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return absl::StrCat(home, "/.cache/trainyard");
  }
  return "";
}

bool IsAccelerateLaunchVariable(const std::string& name) {
  static const char* const kPrefixes[] = {"ACCELERATE_", "FSDP_", "MEGATRON_LM_", "PARALLELISM_CONFIG_", "KMP_"};
  static const char* const kNames[] = {"MASTER_ADDR",
                                       "MASTER_PORT",
                                       "OMP_NUM_THREADS",
                                       "CUDA_VISIBLE_DEVICES",
                                       "ASCEND_RT_VISIBLE_DEVICES",
                                       "HABANA_VISIBLE_MODULES",
                                       "MLU_VISIBLE_DEVICES",
                                       "MUSA_VISIBLE_DEVICES",
                                       "NEURON_RT_VISIBLE_CORES",
                                       "SDAA_VISIBLE_DEVICES",
                                       "ZE_AFFINITY_MASK"};
  for (const char* p : kPrefixes) {
    if (name.rfind(p, 0) == 0) return true;
  }
  for (const char* n : kNames) {
    if (name == n) return true;
  }
  return false;
}

absl::StatusOr<std::map<std::string, std::string>> AccelerateLaunchEnvironment(const std::string& python,
                                                                               const std::string& accelerate_config,
                                                                               const ScriptRank& w,
                                                                               const std::string& cache_dir) {
  std::map<std::string, std::string> env;
  if (accelerate_config.empty()) return env;
  char path[] = "/tmp/trainyard-accelerate-XXXXXX.yaml";
  const int fd = mkstemps(path, 5);
  if (fd < 0) return absl::InternalError("cannot write the accelerate config to /tmp");
  const bool written =
      write(fd, accelerate_config.data(), accelerate_config.size()) == static_cast<ssize_t>(accelerate_config.size());
  close(fd);
  if (!written) {
    std::remove(path);
    return absl::InternalError(absl::StrCat("cannot write the accelerate config to ", path));
  }
  std::vector<std::string> argv = {python.empty() ? "python3" : python, "-m", "trainyard._launch_env"};
  if (!cache_dir.empty()) argv.insert(argv.end(), {"--cache-dir", cache_dir});
  argv.insert(argv.end(), {"--config_file", path, "--num_processes", std::to_string(w.world_size), "--num_machines",
                           std::to_string(w.num_nodes), "--machine_rank", std::to_string(w.node_rank),
                           "--main_process_ip", w.master_addr, "--main_process_port", std::to_string(w.master_port)});
  auto run = RunCaptured(argv, {"PYTHONPATH=" + w.package_dir}, std::chrono::minutes(2));
  std::remove(path);
  if (!run.ok()) return run.status();
  // The JSON object is the last line; anything before it is the program's talk.
  const size_t brace = run->output.rfind('{');
  auto j = nlohmann::json::parse(run->output.substr(brace == std::string::npos ? 0 : brace), nullptr, false);
  if (run->exit_code != 0 || !j.is_object()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the job's accelerate config: ", run->timed_out ? "trainyard._launch_env ran for 2 minutes: " : "",
                     run->output));
  }
  for (auto& [k, v] : j.items()) {
    // Only what accelerate launch sets: never LD_PRELOAD, PYTHONPATH or the
    // like, whatever a cache held.
    if (!IsAccelerateLaunchVariable(k)) continue;
    env[k] = v.is_string() ? v.get<std::string>() : v.dump();
  }
  return env;
}

}  // namespace trainyard
