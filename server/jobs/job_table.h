// JobTable: the jobs that have not ended, and their durable record — each
// job's state changes and events written through the JobStore (one event
// per change), its watchers told, the count of jobs by state exported, and
// an ended job's streams, series and snapshots let go. It is the only door
// to the JobStore: what the coordinator reads of ended jobs (records,
// events, checkpoints, pages of the list) goes through it too.
//
// Not thread-safe: the JobManager calls it under its mutex.
#ifndef TRAINYARD_SERVER_JOBS_JOB_TABLE_H_
#define TRAINYARD_SERVER_JOBS_JOB_TABLE_H_

#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "common/job_record.h"
#include "common/job_spec.h"
#include "server/jobs/active_job.h"
#include "server/jobs/job_handlers.h"
#include "server/metrics/server_metrics.h"
#include "server/store/job_store.h"

namespace trainyard {

// Whose a submitted job is.
struct Ownership {
  std::string owner, group;
  int64_t priority = 0;
  std::string run_as;    // the Unix account its processes run as ("": the server's)
  std::string sweep_id;  // the sweep whose trial it is ("": none)
  int32_t sweep_trial = -1;
};

class JobTable {
 public:
  // All must outlive the table; `clock` dates the records and events.
  JobTable(JobStore* store, ServerMetrics* metrics, const TimeSource* clock = TimeSource::Real())
      : store_(store), metrics_(metrics), clock_(clock) {}

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
  // The stored record of a job that has ended; else NotFound, or
  // FailedPrecondition "job <id> has not ended (<STATE>)<what_to_do>".
  absl::StatusOr<JobRecord> Ended(const std::string& id, const std::string& what_to_do);
  // The live record, else the stored one.
  absl::StatusOr<JobRecord> Record(const std::string& id);
  std::vector<std::string> ids() const;
  // The jobs out of the queue (starting, running, recovering, stopping):
  // what the periodic look walks, however many wait.
  std::vector<std::string> started_ids() const { return {started_.begin(), started_.end()}; }
  // The rendezvous ports the started jobs' attempts were given.
  std::set<int> RendezvousPortsHeld() const;
  // QUEUED jobs by priority value (kept as jobs come, change state and go).
  const std::map<int64_t, int>& queued_by_priority() const { return queued_by_priority_; }
  // Every job of the store, oldest first (the jobs a restart finds).
  absl::StatusOr<std::vector<JobRecord>> Stored();
  // The stored record (ended jobs; NotFound for an unknown id).
  absl::StatusOr<JobRecord> StoredRecord(const std::string& id);
  absl::StatusOr<std::vector<JobEvent>> Events(const std::string& id);
  // The job's checkpoints, in the order reported (NotFound for an unknown job).
  absl::StatusOr<std::vector<CheckpointRecord>> Checkpoints(const std::string& id);
  // Rank 0's report of a checkpoint of the job's `attempt`.
  void AddCheckpoint(ActiveJob& job, int32_t attempt, const CheckpointEvent& c);
  // One page of the stored jobs in `states` after insertion number `after`,
  // of `owners` or `groups` (both empty: all), live records where held.
  absl::StatusOr<JobPage> Page(const std::vector<JobState>& states, int64_t after, int size,
                               const std::vector<std::string>& owners, const std::vector<std::string>& groups,
                               bool newest_first = false);
  // Removes an ended job (`ended`: its stored record) from the store and
  // the counts of jobs by state; `by` is named in the server log.
  absl::Status Delete(const JobRecord& ended, const std::string& by);
  // A watch of the job: its record now, then every change until it ends
  // (an ended job's watch holds its record and is closed).
  absl::StatusOr<std::shared_ptr<JobWatch>> Watch(const std::string& id);
  // Sends `command` down the stream of every connected rank of the job's
  // attempt `attempt` (nothing when it is not the current one).
  void Broadcast(const std::string& id, int32_t attempt, const WorkerCommand& command);
  // Calls f(ActiveJob&) for every job held.
  template <typename F>
  void ForEach(F&& f) {
    for (auto& [id, job] : jobs_) f(job);
  }

  // Records `state` with `reason` (an event), tells the watchers.
  void Transition(ActiveJob& job, JobState state, const std::string& reason);
  // Records an event in the job's current state.
  void AddEvent(ActiveJob& job, const std::string& reason);
  // `rank` of the job's attempt runs on `node` (its attempt and metrics say so).
  void PlaceRank(ActiveJob& job, int32_t rank, const std::string& node);
  // Records an event of job `id`, held or ended (unknown: nothing).
  void AddEvent(const std::string& id, const std::string& reason);
  // Writes the record's progress (step, loss...) and the history's points
  // since (a tail) at most once a second, and the whole history at most
  // every kHistorySaveInterval.
  static constexpr std::chrono::seconds kHistorySaveInterval{10};
  void PersistProgress(ActiveJob& job, std::chrono::steady_clock::time_point now);
  // Writes the history of every job held that has new samples (shutdown).
  void SaveHistories();
  // The job's series: the live ones of a held job, else the stored ones
  // (empty when none were kept); NotFound for an unknown job.
  absl::StatusOr<JobHistory> History(const std::string& id);
  // Lets an ended job go: its streams and watches close, its series go, and
  // its in-memory snapshots on this host (`local`) are removed.
  void Remove(const std::string& id, bool local);

 private:
  JobStore* const store_;
  ServerMetrics* const metrics_;
  const TimeSource* const clock_;
  std::map<std::string, ActiveJob> jobs_;
  void SaveHistory(ActiveJob& job);
  // The stored history of job `id`: the last whole save and the tails after it.
  absl::StatusOr<JobHistory> StoredHistory(const std::string& id);

  std::map<JobState, int> counts_;
  std::set<std::string> started_;  // ids of the jobs not QUEUED
  std::map<int64_t, int> queued_by_priority_;
  void CountQueued(const JobRecord& r, int delta);
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_JOBS_JOB_TABLE_H_
