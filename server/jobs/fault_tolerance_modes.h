// The fault-tolerance modes (spec.fault_tolerance.mode) the coordinator
// knows, each a RankSupervisor (server/health/rank_supervisor.h): the one place a
// new mode is added on this side.
#ifndef TRAINYARD_SERVER_JOBS_FAULT_TOLERANCE_MODES_H_
#define TRAINYARD_SERVER_JOBS_FAULT_TOLERANCE_MODES_H_

#include <cstdint>
#include <memory>

#include "common/clock.h"
#include "server/health/rank_supervisor.h"
#include "server/jobs/active_job.h"
#include "server/launch/launcher.h"

namespace trainyard {

// The rules for the ranks of `job`'s current attempt (record.attempt), run
// by a launcher with `traits`. `holds`: the slots or GPUs the scheduler
// found for it (an elastic job starts with that many ranks); `adopting`:
// the attempt is a running group taken on after a coordinator restart.
// `clock` must outlive the supervisor.
std::unique_ptr<RankSupervisor> MakeRankSupervisor(const ActiveJob& job, const Launcher::Traits& traits,
                                                   const TimeSource& clock, int32_t holds, bool adopting);

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_JOBS_FAULT_TOLERANCE_MODES_H_
