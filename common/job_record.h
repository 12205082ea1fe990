// The coordinator's record of a job, its state-change events and the
// checkpoints it reported: what the JobStore persists and the JobService
// returns (converted in wire_convert).
#ifndef TRAINYARD_COMMON_JOB_RECORD_H_
#define TRAINYARD_COMMON_JOB_RECORD_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/job_state.h"
#include "common/step_metrics.h"

namespace trainyard {

// A job's id: "job-" and 8 lowercase hex digits (JobTable::NewId makes them).
inline constexpr std::string_view kJobIdPrefix = "job-";
inline constexpr size_t kJobIdHexDigits = 8;

// Whether `id` has that form: what a peer names (a worker's hello) is
// checked with it before it is looked up or logged.
inline bool IsJobId(std::string_view id) {
  if (id.size() != kJobIdPrefix.size() + kJobIdHexDigits || id.substr(0, kJobIdPrefix.size()) != kJobIdPrefix) {
    return false;
  }
  for (const char c : id.substr(kJobIdPrefix.size())) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

struct JobRecord {
  std::string id;
  std::string name;
  JobState state = JobState::kQueued;
  std::string reason;     // why the job is in `state`
  std::string spec_json;  // canonical spec (JobSpecToJson)
  int32_t num_processes = 1;
  int64_t max_steps = 0;
  int64_t step = 0;               // last step reported by rank 0
  double loss = 0;                // last loss reported by rank 0
  double first_loss = 0;          // loss of the first reported step
  double samples_per_second = 0;  // last aggregate throughput
  int64_t created_unix_millis = 0;
  int64_t started_unix_millis = 0;
  int64_t ended_unix_millis = 0;
  int32_t attempt = 0;  // 0 until first launched
  int32_t failed_rank = -1;
  std::string worker_token;  // per-attempt secret shared with the workers
  // Who submitted it (the caller's user name; "" on a server without users)
  // and the group it counts against (the owner's first group, or "").
  std::string owner, group;
  // Its priority class's value when it was submitted (0 without classes).
  int64_t priority = 0;
  // The Unix account its processes run as (the owner's `unix_user` when it
  // was submitted); "": the server's own.
  std::string run_as;
  // The sweep whose trial this job is ("": none) and the trial's number.
  std::string sweep_id;
  int32_t sweep_trial = -1;
};

struct JobEvent {
  int64_t unix_millis = 0;
  JobState state = JobState::kQueued;
  std::string reason;
};

// A checkpoint a job's attempt reported.
struct CheckpointRecord {
  int32_t attempt = 0;
  CheckpointEvent checkpoint;
};

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_JOB_RECORD_H_
