// Whether the GPU tests must run here. A test that needs GPUs skips (exit
// 77 for ctest) only where the machine has none; set TRAINYARD_REQUIRE_GPU
// to the number of GPUs a machine has (1 on one H100) and every skip for
// want of up to that many GPUs is a failure instead. A machine whose NVIDIA
// driver shows GPUs that CUDA cannot use fails too, required or not: that
// is a broken CUDA setup, not a machine without GPUs.
#ifndef TRAINYARD_TESTS_GPU_PRESENCE_H_
#define TRAINYARD_TESTS_GPU_PRESENCE_H_

#include <cstdlib>
#include <filesystem>
#include <regex>
#include <string>

namespace trainyard {

// NVIDIA GPUs the kernel driver shows, whatever CUDA can do with them.
inline int NvidiaGpusPresent() {
  std::error_code ec;
  int count = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/driver/nvidia/gpus", ec)) {
    (void)e;
    ++count;
  }
  if (count > 0) return count;
  static const std::regex kDevice("nvidia[0-9]+");
  for (const auto& e : std::filesystem::directory_iterator("/dev", ec)) {
    if (std::regex_match(e.path().filename().string(), kDevice)) ++count;
  }
  return count;
}

// TRAINYARD_REQUIRE_GPU: 0 when unset or empty; -1 when not a number >= 0.
inline int RequiredGpus() {
  const char* v = std::getenv("TRAINYARD_REQUIRE_GPU");
  if (v == nullptr || *v == '\0') return 0;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  return *end == '\0' && n >= 0 && n < 1024 ? static_cast<int>(n) : -1;
}

}  // namespace trainyard

#endif  // TRAINYARD_TESTS_GPU_PRESENCE_H_
