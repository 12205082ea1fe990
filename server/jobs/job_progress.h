// JobProgress: what one job's steps and checkpoints say about its progress,
// across its attempts — rank 0's last step or checkpoint (the clock of the
// hang watchdog), goodput, badput by cause, the recovery time and lost steps
// after a restart, failures in a row without a step (the restart backoff) —
// and the fields of the job's record that follow from its steps (step,
// losses, samples/s summed over ranks). Publishes to ServerMetrics.
//
// Not thread-safe: the JobManager calls it under its mutex.
#ifndef TRAINYARD_SERVER_JOBS_JOB_PROGRESS_H_
#define TRAINYARD_SERVER_JOBS_JOB_PROGRESS_H_

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/job_record.h"
#include "common/step_metrics.h"
#include "server/health/straggler_watch.h"
#include "server/metrics/server_metrics.h"

namespace trainyard {

using SteadyTime = std::chrono::steady_clock::time_point;

// Goodput: the share of wall time since the job first started that went
// into steps it kept — rank 0's step time in the current attempt, plus, of
// each earlier attempt, the steps up to its last checkpoint.
class GoodputClock {
 public:
  void StartOnce(SteadyTime now) {
    if (first_start_ == SteadyTime{}) first_start_ = now;
  }
  void AddStep(int64_t step, double seconds) {
    attempt_ += seconds;
    upto_.push_back({step, attempt_});
    if (upto_.size() > kHistory) upto_.pop_front();
  }
  // A checkpoint of the current attempt taken at `step` was committed (an
  // asynchronous one some steps later): the steps up to it are kept.
  void Checkpointed(int64_t step) {
    while (!upto_.empty() && upto_.front().first <= step) {
      checkpointed_ = upto_.front().second;
      upto_.pop_front();
    }
  }
  // The attempt ended and the job goes on: what it checkpointed is kept.
  void AttemptEnded() {
    kept_ += checkpointed_;
    attempt_ = checkpointed_ = 0;
    upto_.clear();
  }
  // Step time of the current attempt past its last checkpoint: lost if the
  // attempt ends now.
  double Unkept() const { return attempt_ - checkpointed_; }
  // In [0, 1]; negative before the job first started.
  double Ratio(SteadyTime now) const {
    if (first_start_ == SteadyTime{}) return -1;
    const double wall = std::chrono::duration<double>(now - first_start_).count();
    return wall <= 0 ? -1 : std::min(1.0, (kept_ + attempt_) / wall);
  }

 private:
  static constexpr size_t kHistory = 100000;
  SteadyTime first_start_{};
  double attempt_ = 0, checkpointed_ = 0, kept_ = 0;
  std::deque<std::pair<int64_t, double>> upto_;  // step → attempt_ after it, past the last checkpoint
};

class JobProgress {
 public:
  // `metrics` and `clock` (the wall clock of recovery and badput) must outlive this.
  JobProgress(std::string job_id, ServerMetrics* metrics, const TimeSource* clock = TimeSource::Real())
      : job_id_(std::move(job_id)), metrics_(metrics), clock_(clock) {}

  // An attempt of `ranks` ranks was launched at `now`; the time until its
  // first step is startup badput, unless a recovery is under way (that is
  // restart badput).
  void Launched(SteadyTime now, int32_t ranks);
  // An attempt of `ranks` ranks started by an earlier coordinator was found running.
  void Adopted(SteadyTime now, int32_t ranks);
  // A failure or stop was detected while rank 0 was at `step`: the recovery
  // clock starts (once; the next attempt's first step stops it).
  void FailureDetected(int64_t step);
  // The samples the ranks of the current attempt reported, in order:
  // exported, and folded into `record`. Returns what watchers see: rank 0's
  // samples with samples_per_second summed over the ranks.
  // `lead`: the rank whose samples stand for the group (rank 0, or the
  // first member of a replica job's membership).
  std::vector<StepMetrics> OnSamples(const std::vector<StepMetrics>& samples, JobRecord* record, SteadyTime now,
                                     int32_t lead = 0);
  // Rank 0 reported a checkpoint (saved or failed); returns the job event
  // that says so.
  std::string OnCheckpoint(const CheckpointEvent& c, SteadyTime now);
  // The attempt ended and the job goes on: its steps past the last
  // checkpoint are lost work.
  void AttemptEnded();

  // The lead rank's last step or checkpoint (or the launch).
  SteadyTime last_progress() const { return last_progress_; }
  void Touch(SteadyTime now) { last_progress_ = now; }
  // Whether the record's progress should be written to the store now (at
  // most once a second).
  bool PersistDue(SteadyTime now);

  // Each rank's last sample in this attempt, by rank (gpu_xid_errors: the
  // attempt's total).
  std::vector<StepMetrics> RankSamples(int32_t first = 0, int32_t count = INT32_MAX) const;

  // Rank 0's seconds per step (an average over its recent steps); 0 until
  // it reported one.
  double step_seconds() const { return step_seconds_; }

  // Which rank's own work is far slower than the others' (every rank's
  // steps of this attempt).
  StragglerWatch& stragglers() { return stragglers_; }

  // Failed attempts since one last trained a step.
  int failures_in_a_row() const { return failures_in_a_row_; }
  void CountFailure() { ++failures_in_a_row_; }

 private:
  const std::string job_id_;
  ServerMetrics* const metrics_;
  const TimeSource* const clock_;
  GoodputClock goodput_;
  SteadyTime last_progress_{};
  SteadyTime last_persist_{};
  int failures_in_a_row_ = 0;
  double step_seconds_ = 0;
  // Each rank's last sample this attempt, its gpu_xid_errors summed over
  // the attempt's samples.
  std::map<int32_t, StepMetrics> last_;
  StragglerWatch stragglers_;
  // Recovery: when the failure (or stop) that requeued the job was detected
  // (unix ms; 0: none pending), and rank 0's step then.
  int64_t recovery_from_millis_ = 0;
  int64_t step_at_failure_ = 0;
  // A launch that is not a recovery (unix ms; 0: none pending).
  int64_t startup_from_millis_ = 0;
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_JOBS_JOB_PROGRESS_H_
