// The one representation of a checkpoint's type (Accelerate's
// fsdp_state_dict_type: FULL_STATE_DICT / SHARDED_STATE_DICT), shared by the
// spec, the worker's checkpoints, the coordinator and the wire (as
// trainyard.v1.CheckpointType, converted in wire_convert only).
#ifndef TRAINYARD_COMMON_CHECKPOINT_TYPE_H_
#define TRAINYARD_COMMON_CHECKPOINT_TYPE_H_

#include "common/enum_table.h"

namespace trainyard {

// kAuto: the job's own type (its fsdp_state_dict_type under FSDP, else
// full); a saved checkpoint is always kFull or kSharded.
enum class CheckpointType { kAuto, kFull, kSharded };

inline constexpr EnumName<CheckpointType> kCheckpointTypeNames[] = {
    {"auto", CheckpointType::kAuto}, {"full", CheckpointType::kFull}, {"sharded", CheckpointType::kSharded}};

constexpr const char* CheckpointTypeName(CheckpointType type) { return NameOf(kCheckpointTypeNames, type); }

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_CHECKPOINT_TYPE_H_
