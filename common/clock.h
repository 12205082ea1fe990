// Wall-clock time as the project records it: milliseconds since the Unix
// epoch (job records, events, checkpoint manifests, metrics samples), and
// microseconds where collectives are timed.
#ifndef TRAINYARD_COMMON_CLOCK_H_
#define TRAINYARD_COMMON_CLOCK_H_

#include <chrono>
#include <cstdint>

namespace trainyard {

inline int64_t NowMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The same in microseconds (flight records of collectives).
inline int64_t NowMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_CLOCK_H_
