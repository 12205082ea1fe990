#include "server/launch/launcher.h"

#include <string.h>
#include <unistd.h>

#include <string_view>

#include "absl/strings/str_cat.h"

namespace trainyard {

RankExit RankExit::Exited(std::string job_id, int32_t attempt, int32_t rank, int code) {
  return {std::move(job_id), attempt, rank, OutcomeOfExitCode(code),
          absl::StrCat("rank ", rank, " exited with code ", code)};
}

RankExit RankExit::Killed(std::string job_id, int32_t attempt, int32_t rank, int signal) {
  return {std::move(job_id), attempt, rank, WorkerOutcome::kFailed,
          absl::StrCat("rank ", rank, " was killed by signal ", signal, " (", strsignal(signal), ")")};
}

RankExit RankExit::Unknown(std::string job_id, int32_t attempt, int32_t rank, std::string description) {
  if (description.empty()) {
    description =
        absl::StrCat("rank ", rank,
                     " ended without reporting a result (started by an earlier coordinator: its exit code is unknown)");
  }
  return {std::move(job_id), attempt, rank, std::nullopt, std::move(description)};
}

RankExit RankExit::Ended(std::string job_id, int32_t attempt, int32_t rank, WorkerOutcome outcome,
                         std::string description) {
  return {std::move(job_id), attempt, rank, outcome, std::move(description)};
}

}  // namespace trainyard
