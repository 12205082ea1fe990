#include "common/allocator_tuning.h"

#include <malloc.h>

namespace trainyard {

void TuneAllocator() {
  mallopt(M_MMAP_THRESHOLD, static_cast<int>(kMmapThresholdBytes));
  mallopt(M_TRIM_THRESHOLD, static_cast<int>(kTrimThresholdBytes));
}

std::vector<std::string> TunedAllocatorEnvironment() {
  return {"MALLOC_MMAP_THRESHOLD_=" + std::to_string(kMmapThresholdBytes),
          "MALLOC_TRIM_THRESHOLD_=" + std::to_string(kTrimThresholdBytes)};
}

std::string DescribeTunedAllocator() {
  return "glibc M_MMAP_THRESHOLD " + std::to_string(kMmapThresholdBytes >> 20) + " MiB, M_TRIM_THRESHOLD " +
         std::to_string(kTrimThresholdBytes >> 20) + " MiB";
}

}  // namespace trainyard
