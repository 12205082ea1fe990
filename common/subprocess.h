// Running a short helper program to read what it prints (no shell, the
// arguments passed as they are), on ChildProcess.
#ifndef TRAINYARD_COMMON_SUBPROCESS_H_
#define TRAINYARD_COMMON_SUBPROCESS_H_

#include <chrono>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace trainyard {

struct CapturedRun {
  int exit_code = -1;  // the program's exit status; -1 when a signal ended it (the timeout's SIGKILL too)
  bool timed_out = false;
  std::string output;  // stdout and stderr together, at most `max_output` bytes
};

// Runs argv[0] (looked up on PATH when it has no '/') with argv, this
// process's environment plus `extra_env` ("NAME=value", replacing a variable
// of that name), stdin from /dev/null. Kills it with SIGKILL after `timeout`.
// An error only when it cannot be started at all (the message names argv[0]).
absl::StatusOr<CapturedRun> RunCaptured(const std::vector<std::string>& argv,
                                        const std::vector<std::string>& extra_env = {},
                                        std::chrono::milliseconds timeout = std::chrono::seconds(60),
                                        size_t max_output = 1 << 20);

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_SUBPROCESS_H_
