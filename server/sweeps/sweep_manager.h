// SweepManager: runs hyperparameter sweeps (common/spec/sweep_spec.h) over
// the job manager. A sweep's trials are ordinary jobs of its owner — queued,
// counted against their quota and run at their priority like any other —
// submitted through the same JobRequestHandler as people's jobs, so the
// core knows nothing of sweeps.
//
// Every tick (kTick) it reads each live trial's job and history: the
// sweep's metric goes to the searcher, which may stop the trial (ASHA: not
// among the best at a rung; the job is cancelled and its slots are free at
// once), and while fewer than `concurrency` trials are live it submits the
// searcher's next. What a stopped trial frees goes first to the running
// elastic jobs below their size — the sweep's survivors among them — as
// the scheduler grows those before it starts a waiting job, then to the
// next trial. A sweep ends when its searcher has no trial left and
// none is live: SUCCEEDED with its best trial, or FAILED when no trial
// reported the metric.
//
// Everything is kept in the SweepStore as it happens: a restarted
// coordinator (Recover) resumes each sweep where it was — the searcher
// replays the decisions it made, trials already submitted are not
// submitted again, and live trials are followed as their jobs reattach.
//
// A budget (max_rank_hours) spent stops the live trials and starts no
// more. Webhooks (sweep.notify) announce its end and each new best trial.
// What it decides and what happens to its trials are its events.
//
// Thread-safe. Its lock is taken before the job manager's, never after.
#ifndef TRAINYARD_SERVER_SWEEPS_SWEEP_MANAGER_H_
#define TRAINYARD_SERVER_SWEEPS_SWEEP_MANAGER_H_

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "common/spec/sweep_spec.h"
#include "server/auth/caller.h"
#include "server/jobs/job_handlers.h"
#include "server/notify/notifier.h"
#include "server/store/sweep_store.h"
#include "server/sweeps/searcher.h"
#include "server/sweeps/trial_spec.h"

namespace trainyard {

// A sweep as callers see it: its record and what its spec says.
struct SweepStatus {
  SweepRecord record;
  SweepSpec spec;
  std::vector<int64_t> rungs;    // ASHA's (steps)
  int best_trial = -1;           // -1 until a trial reported the metric
  std::vector<JobEvent> events;  // Get only: what happened to it, oldest first
};

class SweepManager {
 public:
  static constexpr std::chrono::milliseconds kTick{250};

  // `jobs`, `store` and `notifier` (null: sweeps call no webhook) must
  // outlive the manager.
  SweepManager(JobRequestHandler* jobs, SweepStore* store, Notifier* notifier = nullptr,
               const TimeSource* clock = TimeSource::Real());
  ~SweepManager();

  // Loads every sweep from the store; those still running resume. Call
  // once, after the job manager's Recover, before Start.
  absl::Status Recover();
  // Ticks on a thread of its own until Stop (or destruction).
  void Start();
  void Stop();

  // InvalidArgument naming the field for a spec that is not a sweep, or
  // whose first trial's spec is not a valid job spec; the sweep is
  // RUNNING, its first trials submitted, when this returns.
  absl::StatusOr<SweepStatus> Submit(const std::string& spec_text, const Caller& by);
  // NotFound for a sweep `by` may not see (not theirs, and not an admin).
  absl::StatusOr<SweepStatus> Get(const std::string& id, const Caller& by);
  // Oldest first: `by`'s own, or everyone's (`all_users`, admins only);
  // at most `page_size` (1 … 1000) after the page `page_token` ends ("":
  // the first), and the token of the next page in `next` ("": none).
  // InvalidArgument for a token this manager did not make.
  static constexpr int kDefaultPageSize = 100;
  static constexpr int kMaxPageSize = 1000;
  absl::StatusOr<std::vector<SweepStatus>> List(const Caller& by, bool all_users, int page_size = kDefaultPageSize,
                                                const std::string& page_token = "", std::string* next = nullptr);
  // Cancels every trial still queued or running (all but the best so far
  // with `keep_best`); the sweep is CANCELLED and starts no more trials.
  absl::StatusOr<SweepStatus> Cancel(const std::string& id, bool keep_best, const Caller& by);

  // One look at every live sweep (the thread calls it every kTick; tests
  // may call it directly).
  void Tick();

  // At most this many trials are submitted in one look at a sweep (the
  // rest at the next looks), so that no sweep holds the lock for long.
  static constexpr int kMaxSubmissionsPerLook = 32;
  // A sweep whose last this many trials were refused (their specs or their
  // owner's rights, not a full queue) ends FAILED, naming the last refusal.
  static constexpr int kMaxRefusedInARow = 3;
  // Running sweeps one user may have at once (admins: no limit).
  static constexpr int kMaxRunningPerUser = 20;

  // The rights a sweep's trials are submitted with: its owner's as they are
  // now (the server's identities), looked up at every submission from the
  // caller stored with the sweep. An error (the owner was removed, the
  // admin token is gone) stops the sweep with that reason. Unset: the
  // stored caller as it is (a server without identities). Set before
  // Recover.
  using CallerLookup = std::function<absl::StatusOr<Caller>(const Caller& stored)>;
  void set_caller_lookup(CallerLookup lookup) { caller_lookup_ = std::move(lookup); }

  // Where events about a trial's job go (a PBT exploit, on both trials);
  // set before Start.
  using JobNote = std::function<void(const std::string& job_id, const std::string& text)>;
  void set_job_note(JobNote note) { note_ = std::move(note); }
  // An event of sweep `id` from outside (its webhooks' deliveries).
  void Note(const std::string& id, const std::string& text) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Live;  // a sweep and its searcher
  SweepStatus StatusOf(const Live& s) const;
  absl::StatusOr<Live*> Find(const std::string& id, const Caller& by) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Follow(Live& s, SweepTrialRecord& t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartTrials(Live& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The owner's rights now, or the sweep stopped (FAILED) with the reason.
  std::optional<Caller> CurrentCaller(Live& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends a sweep that can go on no more: its live trials cancelled, FAILED
  // with `reason`.
  void Fail(Live& s, const std::string& reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // PBT: a poor trial whose source's checkpoint is committed is replaced
  // by a new trial resuming from it (see pbt.h).
  void FinishExploits(Live& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MaybeEnd(Live& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Past sweep.max_rank_hours: its live trials stopped; whether it is.
  bool SpendBudget(Live& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The sweep's webhooks for `event` (SUCCEEDED, ..., BEST), when it asks.
  void Notify(Live& s, const std::string& event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Save(const Live& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One of the sweep's events (kept in the store, and logged).
  void Event(const Live& s, const std::string& text) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SaveTrial(const Live& s, const SweepTrialRecord& t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Cancels trial `t`'s job, which then says "stopped by sweep <id>" and
  // `detail` (": why" or " (why)"), and takes its state.
  void StopJob(const Live& s, SweepTrialRecord& t, const std::string& detail) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  JobRequestHandler* const jobs_;
  SweepStore* const store_;
  Notifier* const notifier_;
  const TimeSource* const clock_;
  JobNote note_ = [](const std::string&, const std::string&) {};
  CallerLookup caller_lookup_;

  absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<Live>> sweeps_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> order_ ABSL_GUARDED_BY(mu_);  // ids, oldest first
  // Each sweep's state as last saved, for Note (taken after mu_, never before).
  absl::Mutex states_mu_;
  std::map<std::string, JobState> states_ ABSL_GUARDED_BY(states_mu_);

  absl::Mutex thread_mu_;
  bool stop_ ABSL_GUARDED_BY(thread_mu_) = false;
  std::thread thread_;
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_SWEEPS_SWEEP_MANAGER_H_
