// JobTable: the jobs that have not ended, and their durable record — each
// job's state changes and events written through the JobStore (one event
// per change), its watchers told, the count of jobs by state exported, and
// an ended job's streams, series and snapshots let go.
//
// Not thread-safe: the JobManager calls it under its mutex.
#ifndef TRAINYARD_SERVER_JOB_TABLE_H_
#define TRAINYARD_SERVER_JOB_TABLE_H_

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/job_record.h"
#include "common/job_spec.h"
#include "server/active_job.h"
#include "server/job_store.h"
#include "server/server_metrics.h"

namespace trainyard {

// Whose a submitted job is.
struct Ownership {
  std::string owner, group;
  int64_t priority = 0;
};

class JobTable {
 public:
  // Both must outlive the table.
  JobTable(JobStore* store, ServerMetrics* metrics) : store_(store), metrics_(metrics) {}

  // A fresh job id: in neither the table nor the store.
  std::string NewId() const;
  // Stores a submitted job (QUEUED, with the event "submitted" and one per
  // note) and holds it.
  absl::StatusOr<ActiveJob*> Submit(const std::string& id, const JobSpec& spec, const std::vector<std::string>& notes,
                                    const Ownership& ownership = {});
  // Holds a job the store already has (loaded after a restart, or resumed).
  ActiveJob& Hold(const JobRecord& record, const JobSpec& spec);
  // Counts a job of the store that has ended (loaded after a restart).
  void CountEnded(JobState state);

  ActiveJob* Find(const std::string& id);
  // The job when `attempt` is its current attempt, else null.
  ActiveJob* FindAttempt(const std::string& id, int32_t attempt);
  // The job if it has not ended; else NotFound, or FailedPrecondition
  // "job <id> has ended (<STATE>)<why_it_matters>".
  absl::StatusOr<ActiveJob*> FindActive(const std::string& id, const std::string& why_it_matters);
  // The live record, else the stored one.
  absl::StatusOr<JobRecord> Record(const std::string& id);
  std::vector<std::string> ids() const;
  // Calls f(ActiveJob&) for every job held.
  template <typename F>
  void ForEach(F&& f) {
    for (auto& [id, job] : jobs_) f(job);
  }

  // Records `state` with `reason` (an event), tells the watchers.
  void Transition(ActiveJob& job, JobState state, const std::string& reason);
  // Records an event in the job's current state.
  void AddEvent(ActiveJob& job, const std::string& reason);
  // Writes the record's progress (step, loss...) at most once a second.
  void PersistProgress(ActiveJob& job, std::chrono::steady_clock::time_point now);
  // Lets an ended job go: its streams and watches close, its series go, and
  // its in-memory snapshots on this host (`local`) are removed.
  void Remove(const std::string& id, bool local);

 private:
  JobStore* const store_;
  ServerMetrics* const metrics_;
  std::map<std::string, ActiveJob> jobs_;
  std::map<JobState, int> counts_;
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_JOB_TABLE_H_
