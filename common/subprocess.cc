#include "common/subprocess.h"

#include "absl/strings/str_cat.h"
#include "common/child_process.h"

namespace trainyard {

absl::StatusOr<CapturedRun> RunCaptured(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env,
                                        std::chrono::milliseconds timeout, size_t max_output) {
  if (argv.empty()) return absl::InvalidArgumentError("RunCaptured: no program");
  ChildPlan plan;
  plan.argv = argv;
  plan.environment = extra_env;
  plan.fds = {{0, ChildFd::Null()}, {1, ChildFd::Pipe()}, {2, ChildFd::SameAs(1)}};
  absl::StatusOr<ChildProcess> child = ChildProcess::Start(plan);
  if (!child.ok()) {
    if (child.status().code() != absl::StatusCode::kNotFound &&
        child.status().code() != absl::StatusCode::kFailedPrecondition) {
      return child.status();
    }
    return absl::NotFoundError(child.status().message());
  }
  ChildOutput out = child->Capture(std::chrono::steady_clock::now() + timeout, max_output);
  CapturedRun run;
  run.timed_out = out.timed_out;
  run.exit_code = out.exit.exited() ? out.exit.code : -1;
  run.output = std::move(out.streams[1]);
  return run;
}

}  // namespace trainyard
