// JobStore: durable record of jobs and their state-change events.
//
// Open() returns the SQLite implementation (WAL journal, synchronous=FULL so
// a committed transition survives power loss; the file's PRAGMA user_version
// is its schema's version, 1 now, and a newer one is refused);
// server/store/stores.h opens it or the PostgreSQL one (pg_stores.h), which
// behaves alike. All methods are safe to call concurrently from several
// threads; the SQLite store serializes them internally, the PostgreSQL one
// runs them on a few connections.
#ifndef TRAINYARD_SERVER_STORE_JOB_STORE_H_
#define TRAINYARD_SERVER_STORE_JOB_STORE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/job_record.h"

namespace trainyard {

class JobStore {
 public:
  virtual ~JobStore() = default;

  // Opens (creating if needed) the SQLite database at `path`.
  static absl::StatusOr<std::unique_ptr<JobStore>> Open(const std::string& path);

  // Inserts a new job together with its first event, atomically.
  virtual absl::Status Insert(const JobRecord& job, const JobEvent& event) = 0;
  // Overwrites the job's row; with `event`, also appends it, atomically.
  virtual absl::Status Update(const JobRecord& job, const JobEvent* event) = 0;
  // Appends `event` to the job's events alone (its row as it is): what
  // happens outside the job manager (a webhook's delivery).
  virtual absl::Status AddEvent(const std::string& id, const JobEvent& event) = 0;
  virtual absl::StatusOr<JobRecord> Get(const std::string& id) = 0;
  // Jobs in creation order, oldest first; at most `limit` (the newest ones).
  virtual absl::StatusOr<std::vector<JobRecord>> List(int limit) = 0;
  // One page of the jobs in `states` (all when empty), in creation order,
  // after the job with insertion number `after` (0: from the first); with
  // `newest_first`, newest first, before the job numbered `after` (0: from
  // the newest).
  struct Page {
    std::vector<JobRecord> jobs;
    int64_t last = 0;              // insertion number of the page's last job
    bool more = false;             // jobs in `states` follow
    std::vector<int64_t> numbers;  // each job's insertion number (a copy keeps them: InsertCopy)
  };
  // `owners`: only jobs of these owners (or of these groups, `groups`);
  // both empty: every job.
  virtual absl::StatusOr<Page> ListPage(const std::vector<JobState>& states, int64_t after, int limit,
                                        const std::vector<std::string>& owners = {},
                                        const std::vector<std::string>& groups = {}, bool newest_first = false) = 0;
  // Removes the job's row with its events, checkpoints and history, atomically
  // (NotFound for an unknown id). Files the job wrote stay where they are;
  // whether the job may go (it has ended) is the caller's to check.
  virtual absl::Status Delete(const std::string& id) = 0;
  // Copying a store (server/store/migrate_store.h): inserts `job` as
  // insertion number `number` with `events` in order, atomically, so that
  // listings and page tokens read as in the store it came from; jobs
  // inserted later are numbered after it. Unimplemented by wrappers.
  virtual absl::Status InsertCopy(int64_t number, const JobRecord& job, const std::vector<JobEvent>& events) {
    return absl::UnimplementedError("this job store cannot take a copy");
  }
  virtual absl::StatusOr<std::vector<JobEvent>> Events(const std::string& id) = 0;
  virtual absl::Status AddCheckpoint(const std::string& id, const CheckpointRecord& c) = 0;
  // In the order reported.
  virtual absl::StatusOr<std::vector<CheckpointRecord>> Checkpoints(const std::string& id) = 0;
  // The job's series (server/jobs/job_history.h's Encode), replacing what was
  // saved and the tails appended since; History: "" when none was.
  virtual absl::Status SaveHistory(const std::string& id, const std::string& data) = 0;
  virtual absl::StatusOr<std::string> History(const std::string& id) = 0;
  // The points that came after the last SaveHistory (JobHistory::TakeTail),
  // appended one tail at a time; HistoryTails: those appended since the last
  // SaveHistory, in order.
  virtual absl::Status AppendHistory(const std::string& id, const std::string& tail) = 0;
  virtual absl::StatusOr<std::vector<std::string>> HistoryTails(const std::string& id) = 0;
};

// The page token of a listing that goes on after insertion number `last`
// (`newest_first`: before it), and back; a malformed token, or one of the
// other order, is InvalidArgument.
std::string JobPageToken(int64_t last, bool newest_first = false);
absl::StatusOr<int64_t> JobPageAfter(const std::string& page_token, bool newest_first = false);

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_STORE_JOB_STORE_H_
