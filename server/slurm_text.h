// What Slurm's commands print, read back: its durations and the fields of
// `scontrol -o show job`. Pure functions.
#ifndef TRAINYARD_SERVER_SLURM_TEXT_H_
#define TRAINYARD_SERVER_SLURM_TEXT_H_

#include <cstdint>
#include <string>

namespace trainyard {

// Seconds in Slurm's duration format ([days-]hours:minutes:seconds,
// minutes:seconds, minutes; squeue's %L and %l), or -1 for anything else
// (UNLIMITED, NOT_SET, INVALID, empty).
int64_t ParseSlurmDuration(const std::string& text);

// The value of `key` (e.g. "PreemptTime") in `scontrol -o show job` output
// (space-separated key=value fields); "" when absent.
std::string ScontrolField(const std::string& output, const std::string& key);

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_SLURM_TEXT_H_
