// What flows out of the coordinator for one job: the updates its watchers
// read (JobWatch) and the commands its connected workers receive
// (WorkerChannel). Both are BlockingQueues; thread-safe.
#ifndef TRAINYARD_SERVER_JOBS_JOB_STREAMS_H_
#define TRAINYARD_SERVER_JOBS_JOB_STREAMS_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "common/job_record.h"
#include "common/step_metrics.h"
#include "common/worker_command.h"
#include "server/jobs/blocking_queue.h"

namespace trainyard {

// One update for a watcher: the job's record after a state change, or one
// metrics sample (rank 0's, with samples_per_second summed over ranks).
struct JobUpdate {
  std::optional<JobRecord> job;
  std::optional<StepMetrics> metrics;
};

// The updates for one watcher, closed after the job's final state. A slow
// watcher loses metrics samples beyond 4096 queued, never a job update.
class JobWatch : public BlockingQueue<JobUpdate> {
 public:
  JobWatch() : BlockingQueue(4096, [](const JobUpdate& u) { return !u.job.has_value(); }) {}
  bool Next(JobUpdate* out, std::chrono::milliseconds timeout) { return Pop(out, timeout); }
};

// Commands flowing down one worker's stream.
using WorkerChannel = BlockingQueue<WorkerCommand>;

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_JOBS_JOB_STREAMS_H_
