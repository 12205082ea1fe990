// GlobalCursorSampler: the sample order of a replica job
// (fault_tolerance.mode replica), where the members training together change
// while the job runs. Every sample the job trains has a global position G
// (samples trained so far, across epochs): epoch G / N, place G % N of that
// epoch's order (shuffled with seed + epoch as DistributedSampler does, N the
// dataset's size). A step with W members and a per-member batch of b trains
// positions [G, G + W*b): member r takes G + r + j*W (j < b). While W stays
// the same this is exactly DistributedSampler's order for rank r when W
// divides N (DistributedSampler pads the epoch otherwise; here an epoch is N
// positions and a batch may reach into the next one).
#ifndef TRAINYARD_WORKER_DATA_GLOBAL_CURSOR_H_
#define TRAINYARD_WORKER_DATA_GLOBAL_CURSOR_H_

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

namespace trainyard {

class GlobalCursorSampler {
 public:
  GlobalCursorSampler(int64_t dataset_size, bool shuffle, uint64_t seed);

  int64_t dataset_size() const { return dataset_size_; }
  // The global positions member `member` of `members` trains in a batch of
  // `batch` samples per member starting at `cursor`.
  static std::vector<int64_t> Positions(int64_t cursor, int32_t member, int32_t members, int64_t batch);
  // The sample (dataset index) at global position `position`, and its epoch.
  int64_t IndexAt(int64_t position) const;
  static int64_t EpochOf(int64_t position, int64_t dataset_size) { return position / dataset_size; }

 private:
  // The epoch's order (the newest two are kept).
  const std::vector<int64_t>& Order(int64_t epoch) const;

  int64_t dataset_size_;
  bool shuffle_;
  uint64_t seed_;
  mutable std::map<int64_t, std::shared_ptr<const std::vector<int64_t>>> orders_;
};

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_DATA_GLOBAL_CURSOR_H_
