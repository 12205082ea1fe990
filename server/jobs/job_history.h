// JobHistory: a job's per-step series (loss, eval loss, samples/s, step
// time, learning rate, grad norm, memory, MFU, world size, and the numbers a
// script names itself), kept for the
// whole run in bounded space, so that a chart of a 100,000-step job costs
// what one of 2,000 steps does.
//
// Each series keeps at most kMaxPoints points: its first and its latest
// sample exactly, and between them, for each bucket of consecutive samples,
// the bucket's lowest and highest value (the curve's shape: its minimum and
// every spike stay). When the buckets fill, neighbours merge in pairs (the
// bucket width doubles). Buckets follow the order samples arrive, not their
// step numbers: a job that restarts from a checkpoint reports steps again.
//
// Plain data, torch- and gRPC-free; not thread-safe (the JobManager holds
// it under its mutex). Encode/Decode: the state store's form of it.
#ifndef TRAINYARD_SERVER_JOBS_JOB_HISTORY_H_
#define TRAINYARD_SERVER_JOBS_JOB_HISTORY_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/step_metrics.h"

namespace trainyard {

struct HistoryPoint {
  int64_t step = 0;
  int64_t unix_millis = 0;
  double value = 0;
  bool operator==(const HistoryPoint&) const = default;
};

// One series, downsampled as the header says.
class SeriesHistory {
 public:
  static constexpr int kMaxPoints = 2000;

  // `max_points` >= 4 (even): the bound on points().
  explicit SeriesHistory(int max_points = kMaxPoints);

  void Add(const HistoryPoint& p);
  // In arrival order: the first sample, each bucket's low and high (in the
  // order they came), the latest sample.
  std::vector<HistoryPoint> points() const;
  // Samples added since the series began.
  int64_t added() const { return added_; }

  // The state store's form (Decode(Encode()) keeps every sample and goes on
  // downsampling the same way).
  void EncodeTo(std::string* out) const;
  // Reads one series at `*pos` of `in`, advancing it; InvalidArgument for
  // bytes that are not one.
  static absl::StatusOr<SeriesHistory> DecodeFrom(const std::string& in, size_t* pos);

 private:
  struct Bucket {
    int64_t lo_seq = 0, hi_seq = 0;  // arrival numbers of lo and hi
    HistoryPoint lo, hi;
  };
  void Merge();

  int max_buckets_;
  int64_t width_ = 1;  // samples per bucket
  int64_t added_ = 0;
  HistoryPoint first_, last_;
  // Bucket i holds samples 1 + i*width_ .. (i+1)*width_ (sample 0 is first_).
  std::vector<Bucket> buckets_;
};

// The series of one job, by name.
class JobHistory {
 public:
  // The series every job may have, in the order they are shown.
  static const std::vector<std::string>& SeriesNames();
  // Beside them, the named numbers a script reports with a step
  // (trainyard.report(step, accuracy=...): StepMetrics::values), each a
  // series of its own name: at most kMaxValueSeries names a job, each of at
  // most kMaxValueNameBytes; a name of SeriesNames() stays the built-in one.
  static constexpr size_t kMaxValueSeries = 16;
  static constexpr size_t kMaxValueNameBytes = 64;

  // The lead rank's sample of a step as watchers see it (samples/s summed
  // over the ranks), and how many ranks trained it. Series whose number
  // the sample lacks (eval loss between evaluations, grad norm without
  // clipping, MFU without a peak) get no point.
  void Add(const StepMetrics& lead, int world_size);
  const std::map<std::string, SeriesHistory>& series() const { return series_; }
  // Whether samples came since the last MarkPersisted.
  bool dirty() const { return dirty_; }
  // The whole history was saved (Encode): the tail is in it too.
  void MarkPersisted() {
    dirty_ = false;
    tail_.clear();
  }

  std::string Encode() const;
  // InvalidArgument naming what is wrong with `bytes`.
  static absl::StatusOr<JobHistory> Decode(const std::string& bytes);

  // The points added since the last TakeTail or MarkPersisted, in a form
  // of their own ("" when none): what the store appends between two saves
  // of the whole history, so that a coordinator killed between them loses
  // at most the points since the last append.
  std::string TakeTail();
  // Adds a tail's points as they came (after Decode of the save before
  // it); InvalidArgument naming what is wrong with `bytes`.
  absl::Status AddTail(const std::string& bytes);

 private:
  std::map<std::string, SeriesHistory> series_;
  std::vector<std::pair<std::string, HistoryPoint>> tail_;  // series name, point
  bool dirty_ = false;
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_JOBS_JOB_HISTORY_H_
