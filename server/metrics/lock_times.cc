#include "server/metrics/lock_times.h"

#include <algorithm>

namespace trainyard {

void LockTimes::Record(double waited_seconds, double held_seconds) {
  Add(waited_, waited_seconds);
  Add(held_, held_seconds);
}

void LockTimes::Add(Counts& c, double seconds) {
  const size_t bucket =
      static_cast<size_t>(std::lower_bound(kBuckets.begin(), kBuckets.end(), seconds) - kBuckets.begin());
  c.buckets[bucket].fetch_add(1, std::memory_order_relaxed);
  c.sum_ns.fetch_add(static_cast<uint64_t>(std::max(0.0, seconds) * 1e9), std::memory_order_relaxed);
}

LockTimes::Histogram LockTimes::Read(const Counts& c) {
  Histogram h;
  uint64_t total = 0;
  for (const auto& b : c.buckets) {
    total += b.load(std::memory_order_relaxed);
    h.cumulative.push_back(total);
  }
  h.sum = static_cast<double>(c.sum_ns.load(std::memory_order_relaxed)) / 1e9;
  return h;
}

LockTimes& CoordinatorLockTimes() {
  static LockTimes* times = new LockTimes();  // never destroyed: locks may be taken until exit
  return *times;
}

}  // namespace trainyard
