// What Slurm's commands print, read back: its job states, durations and
// the fields of `scontrol -o show job`. Pure functions.
#ifndef TRAINYARD_SERVER_LAUNCH_SLURM_TEXT_H_
#define TRAINYARD_SERVER_LAUNCH_SLURM_TEXT_H_

#include <cstdint>
#include <string>

namespace trainyard {

// True for a state (squeue's %T) in which a batch job has ended.
bool SlurmStateEnded(const std::string& state);

// What a job's events say when Slurm reports `state` (with squeue's
// `reason` and `nodes`) for batch job `slurm_id`; "" for nothing: pending
// before it ever ran (`ran`), and an end that our own stop caused
// (`stop_sent`).
std::string SlurmStateNote(const std::string& slurm_id, bool ran, bool stop_sent, const std::string& state,
                           const std::string& reason, const std::string& nodes);

// Seconds in Slurm's duration format ([days-]hours:minutes:seconds,
// minutes:seconds, minutes; squeue's %L and %l), or -1 for anything else
// (UNLIMITED, NOT_SET, INVALID, empty).
int64_t ParseSlurmDuration(const std::string& text);

// The value of `key` (e.g. "PreemptTime") in `scontrol -o show job` output
// (space-separated key=value fields); "" when absent.
std::string ScontrolField(const std::string& output, const std::string& key);

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_LAUNCH_SLURM_TEXT_H_
