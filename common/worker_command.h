// WorkerCommand: what the coordinator tells one connected worker (the
// WorkerService stream's downward messages, before they become protos).
// Plain data.
#ifndef TRAINYARD_COMMON_WORKER_COMMAND_H_
#define TRAINYARD_COMMON_WORKER_COMMAND_H_

#include <cstdint>
#include <memory>
#include <string>

#include "common/checkpoint_type.h"
#include "common/replica_protocol.h"

namespace trainyard {

struct WorkerCommand {
  enum class Kind { kStop, kCheckpoint, kDiagnose, kMembership };
  Kind kind = Kind::kStop;
  std::string reason;
  // kCheckpoint and kDiagnose:
  int64_t request_id = 0;
  // kCheckpoint:
  CheckpointType type = CheckpointType::kAuto;
  bool stop_after = false;
  // kMembership (fault_tolerance.mode replica): who trains together now,
  // shared by the command's copies (one per rank), and the change from the
  // membership before it (null: none), which a stream that sent that one
  // sends instead of the whole list.
  std::shared_ptr<const MembershipView> membership;
  std::shared_ptr<const MembershipDelta> delta;
};

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_WORKER_COMMAND_H_
