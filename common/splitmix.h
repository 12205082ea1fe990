// SplitMix64's finalizer: decorrelates seeds derived from a job's seed and a
// counter (per-sample data seeds, PowerSGD's random projections).
#ifndef TRAINYARD_COMMON_SPLITMIX_H_
#define TRAINYARD_COMMON_SPLITMIX_H_

#include <cstdint>

namespace trainyard {

constexpr uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_SPLITMIX_H_
