// What a stopping coordinator does with the jobs that run
// (trainyard-server --on-shutdown; SIGTERM, as `systemctl restart` sends).
#ifndef TRAINYARD_SERVER_JOBS_SHUTDOWN_MODE_H_
#define TRAINYARD_SERVER_JOBS_SHUTDOWN_MODE_H_

#include "common/enum_table.h"

namespace trainyard {

enum class ShutdownMode {
  // Workers keep training; nothing is stored. The next coordinator finds
  // the jobs as after a crash (RECOVERING) and the workers reattach.
  kDetach,
  // Each running group checkpoints and stops (others just stop); the jobs
  // are queued again and resume from their latest checkpoints when the
  // coordinator starts again.
  kCheckpoint,
  // The workers are stopped (SIGINT, SIGKILL after the grace) and the jobs
  // end FAILED.
  kStop,
};

inline constexpr EnumName<ShutdownMode> kShutdownModeNames[] = {
    {"detach", ShutdownMode::kDetach}, {"checkpoint", ShutdownMode::kCheckpoint}, {"stop", ShutdownMode::kStop}};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_JOBS_SHUTDOWN_MODE_H_
