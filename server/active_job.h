// ActiveJob: what the coordinator holds for one job that has not ended — its
// record and spec, the state of its current attempt, its cancel request and
// its goodput clock. Plain data: the JobManager changes it under its mutex.
#ifndef TRAINYARD_SERVER_ACTIVE_JOB_H_
#define TRAINYARD_SERVER_ACTIVE_JOB_H_

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/job_record.h"
#include "common/job_spec.h"
#include "common/step_metrics.h"
#include "server/job_streams.h"
#include "server/resource_pool.h"

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
  // In [0, 1]; negative before the job first started.
  // Step time of the current attempt past its last checkpoint: lost if the
  // attempt ends now.
  double Unkept() const { return attempt_ - checkpointed_; }
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

// One attempt's ranks as the coordinator sees them. Starts empty with each
// attempt (StartJob) and is cleared when the attempt ends (Requeue).
struct AttemptState {
  ResourcePool::Held held;  // slots or GPUs of this host (local jobs)
  std::string master_addr;  // the rendezvous; empty: the launcher tells the workers
  int master_port = 0;
  std::set<int32_t> attached;                                  // ranks that connected in this attempt
  std::set<int32_t> exited;                                    // ranks whose end was handled
  std::map<int32_t, std::shared_ptr<WorkerChannel>> channels;  // connected now
  std::map<int32_t, StepMetrics> last_metrics;
  // Each rank's end as it reported it (an exit code of common/worker_outcome.h).
  std::map<int32_t, int> result_codes;
  // External ranks that lost their stream without a result, and when.
  std::map<int32_t, SteadyTime> detached_at;
  int notes = 0;        // ranks' notes recorded as events
  bool failed = false;  // the first failure is the root cause
  std::string failure;
  bool preempted = false;          // a rank stopped after a preemption checkpoint
  bool usage_error = false;        // a rank ended with a usage error (exit code 2)
  bool reattach_failed = false;    // lost while the coordinator restarted
  SteadyTime reattach_deadline{};  // RECOVERING: when waiting for the ranks ends
  int64_t hang_diagnosis = 0;      // the watchdog's diagnose request, while it waits for answers
};

struct ActiveJob {
  JobRecord record;
  JobSpec spec;
  AttemptState run;
  bool cancel_requested = false;
  bool cancel_after_checkpoint = false;  // a cancel --checkpoint is under way
  // The coordinator is stopping with --on-shutdown checkpoint: the group
  // checkpoints (when it runs) and stops, and the job is queued again.
  bool stopped_for_restart = false;
  int restarts = 0;               // whole-group restarts after failures
  int failures_in_a_row = 0;      // failed attempts since one last trained a step
  SteadyTime start_not_before{};  // QUEUED after repeated failures: the restart backoff
  SteadyTime last_progress{};     // rank 0's last step or checkpoint
  SteadyTime last_persist{};      // progress written to the store
  GoodputClock goodput;
  // Recovery: when the failure (or stop) that requeued the job was detected
  // (unix ms; 0: none pending), and rank 0's step then. The next attempt's
  // first step closes it (trainyard_job_recovery_seconds, lost steps).
  int64_t recovery_from_millis = 0;
  int64_t step_at_failure = 0;
  // When the job was launched, not as a recovery (unix ms; 0: none pending):
  // the first step closes the startup time.
  int64_t startup_from_millis = 0;
  std::vector<std::shared_ptr<JobWatch>> watchers;
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_ACTIVE_JOB_H_
