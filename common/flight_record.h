// FlightRecord: what one rank tells the coordinator when asked why its job
// is stuck — its last collectives (per group, numbered in call order) and
// what its training thread was doing. Plain data; the worker's
// FlightRecorder fills it, the coordinator's hang diagnosis reads it.
#ifndef TRAINYARD_COMMON_FLIGHT_RECORD_H_
#define TRAINYARD_COMMON_FLIGHT_RECORD_H_

#include <cstdint>
#include <string>
#include <vector>

namespace trainyard {

struct CollectiveRecord {
  int64_t seq = 0;    // 1, 2, ... within its group on this rank; every rank numbers alike
  std::string group;  // "world", "shard/<node>", "replicate/<local rank>", "shm"
  std::string op;     // "allreduce", "allgather", "alltoall", "broadcast", ...
  int64_t bytes = 0;  // this rank's input
  int64_t start_unix_micros = 0;
  int64_t end_unix_micros = 0;  // 0: not finished (on NCCL: not yet enqueued)
};

// A script rank's step before its script reports one (trainyard.report on
// this rank, or script.progress on rank 0's output): not a step 0.
inline constexpr int64_t kStepUnknown = -1;

struct FlightRecord {
  int32_t rank = 0;
  int64_t step = 0;                           // steps this rank has completed; kStepUnknown: not known
  std::string phase;                          // "data", "forward", "backward", "optimizer", ...
  int64_t phase_since_unix_micros = 0;        // when it entered `phase`
  int64_t captured_unix_micros = 0;           // when this record was taken
  std::vector<CollectiveRecord> collectives;  // oldest first
  // A script job's rank: its script's Python stack (py-spy dump), or why
  // there is none; empty for native jobs.
  std::string python_stack;
};

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_FLIGHT_RECORD_H_
