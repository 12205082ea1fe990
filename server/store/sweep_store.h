// SweepStore: the durable record of hyperparameter sweeps (server/sweeps):
// each sweep as submitted, each of its trials, and the metric values its
// searcher decided on, in order, so that a restarted coordinator resumes a
// sweep where it was (its searcher replays them).
//
// Open() returns the SQLite implementation, on its own connection to the
// job store's database file (WAL; synchronous=FULL). Thread-safe.
#ifndef TRAINYARD_SERVER_STORE_SWEEP_STORE_H_
#define TRAINYARD_SERVER_STORE_SWEEP_STORE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/job_record.h"
#include "common/job_state.h"

namespace trainyard {

struct SweepTrialRecord {
  int32_t number = 0;
  std::string job_id;               // "" when its spec was refused
  std::vector<std::string> values;  // one per parameter, YAML text
  JobState state = JobState::kQueued;
  bool early_stopped = false;  // by the searcher
  int32_t rungs_passed = 0;
  std::optional<double> best_metric;  // as reported (not negated)
  int64_t step = 0;
  double rank_seconds = 0;
  std::string reason;
  // PBT: the trial whose checkpoint (at step from_step) this one resumed;
  // -1 for none.
  int32_t parent = -1;
  int64_t from_step = 0;
  bool operator==(const SweepTrialRecord&) const = default;
};

struct SweepRecord {
  std::string id, name, owner;
  JobState state = JobState::kRunning;
  std::string reason;
  std::string spec_text;  // as submitted
  // Who submitted it, as server/sweeps encodes a Caller: its trials are
  // submitted as that caller after a restart too.
  std::string caller;
  int64_t created_unix_millis = 0, ended_unix_millis = 0;
  std::vector<SweepTrialRecord> trials;  // by number
};

// A metric value the searcher decided on (promote or stop).
struct RungResult {
  int32_t trial = 0;
  int64_t step = 0;
  double value = 0;  // as the searcher was given it
  bool operator==(const RungResult&) const = default;
};

class SweepStore {
 public:
  virtual ~SweepStore() = default;

  static absl::StatusOr<std::unique_ptr<SweepStore>> Open(const std::string& path);

  // The sweep's own row (not its trials): Insert once, Update after.
  virtual absl::Status Insert(const SweepRecord& sweep) = 0;
  virtual absl::Status Update(const SweepRecord& sweep) = 0;
  // Inserts or replaces trial `trial.number` of `sweep_id`.
  virtual absl::Status SaveTrial(const std::string& sweep_id, const SweepTrialRecord& trial) = 0;
  virtual absl::Status AddRungResult(const std::string& sweep_id, const RungResult& r) = 0;
  // Every sweep with its trials, oldest first.
  virtual absl::StatusOr<std::vector<SweepRecord>> List() = 0;
  virtual absl::StatusOr<std::vector<RungResult>> RungResults(const std::string& sweep_id) = 0;
  // What happened to the sweep (a trial submitted, stopped or exploited,
  // a webhook's delivery, its end), as a job's events are kept; the newest
  // kMaxEvents of a sweep are kept, oldest first.
  static constexpr int kMaxEvents = 2000;
  virtual absl::Status AddEvent(const std::string& sweep_id, const JobEvent& event) = 0;
  virtual absl::StatusOr<std::vector<JobEvent>> Events(const std::string& sweep_id) = 0;
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_STORE_SWEEP_STORE_H_
