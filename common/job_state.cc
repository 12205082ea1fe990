#include "common/job_state.h"

#include <cctype>

namespace trainyard {

std::optional<JobState> ParseJobState(std::string_view name) {
  std::string upper(name);
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return ValueOf(kJobStateNames, upper);
}

bool IsTerminal(JobState state) {
  return state == JobState::kSucceeded || state == JobState::kFailed || state == JobState::kCancelled;
}

}  // namespace trainyard
