// The glibc malloc settings trainyard-worker runs with, in one place: the
// worker sets them at start (TuneAllocator), and benchmarks give a peer the
// same settings (TunedAllocatorEnvironment) so that a comparison never
// rests on a setting only one side has.
//
// Why: glibc's default mmap threshold adapts up to 32 MiB and its trim
// threshold follows it; a training step allocates and frees the same large
// activation and gradient buffers every step, and without higher thresholds
// it maps and unmaps them and pays the page faults again each step.
#ifndef TRAINYARD_COMMON_ALLOCATOR_TUNING_H_
#define TRAINYARD_COMMON_ALLOCATOR_TUNING_H_

#include <cstddef>
#include <string>
#include <vector>

namespace trainyard {

// Allocations from this size up are mmapped (M_MMAP_THRESHOLD).
inline constexpr size_t kMmapThresholdBytes = size_t{256} << 20;
// Free memory at the top of the heap beyond this is given back (M_TRIM_THRESHOLD).
inline constexpr size_t kTrimThresholdBytes = size_t{512} << 20;

// Sets both in this process (mallopt). Call once, first thing.
void TuneAllocator();
// The same settings as the variables glibc reads when a process starts
// ("MALLOC_MMAP_THRESHOLD_=...", "MALLOC_TRIM_THRESHOLD_=..."), for another
// program.
std::vector<std::string> TunedAllocatorEnvironment();
// One line for people: what the settings are.
std::string DescribeTunedAllocator();

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_ALLOCATOR_TUNING_H_
