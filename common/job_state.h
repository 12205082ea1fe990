// Job lifecycle states shared by the server, the client and the store.
#ifndef TRAINYARD_COMMON_JOB_STATE_H_
#define TRAINYARD_COMMON_JOB_STATE_H_

#include <optional>
#include <string>
#include <string_view>

#include "common/enum_table.h"

namespace trainyard {

// QUEUED → STARTING → RUNNING → SUCCEEDED | FAILED | CANCELLED; a restart
// (failure, hang, preemption) goes back to QUEUED. RECOVERING: after a
// coordinator restart, until the attempt's workers reattach (→ RUNNING) or
// are given up (→ QUEUED, resuming from the latest checkpoint).
enum class JobState {
  kQueued,
  kStarting,
  kRunning,
  kSucceeded,
  kFailed,
  kCancelled,
  kRecovering,
};

inline constexpr EnumName<JobState> kJobStateNames[] = {
    {"QUEUED", JobState::kQueued},        {"STARTING", JobState::kStarting}, {"RUNNING", JobState::kRunning},
    {"SUCCEEDED", JobState::kSucceeded},  {"FAILED", JobState::kFailed},     {"CANCELLED", JobState::kCancelled},
    {"RECOVERING", JobState::kRecovering}};

inline constexpr JobState kAllJobStates[] = {JobState::kQueued,    JobState::kStarting, JobState::kRunning,
                                             JobState::kSucceeded, JobState::kFailed,   JobState::kCancelled,
                                             JobState::kRecovering};

// "QUEUED", "RUNNING", ...
constexpr const char* JobStateName(JobState state) { return NameOf(kJobStateNames, state); }
// Case-insensitive inverse of JobStateName.
std::optional<JobState> ParseJobState(std::string_view name);
// SUCCEEDED, FAILED and CANCELLED are terminal: nothing leaves them.
bool IsTerminal(JobState state);

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_JOB_STATE_H_
