// Attempt: one attempt of one job as the coordinator sees it — where its
// ranks meet, which of them are connected, and how each one ended — and the
// one place that reads those ends: exits the launchers report, results the
// ranks report (external ranks' in place of an exit; adopted ranks' to
// explain an exit nobody could read), streams that are lost, ranks that
// never come back. Once every rank has ended, End() says how the attempt
// ended, for the restart policy (server/health/restart_policy.h).
//
// The first failure is the attempt's root cause; a stop the coordinator
// asked for (cancel, coordinator restart) is no failure.
//
// Not thread-safe: the JobManager calls it under its mutex.
#ifndef TRAINYARD_SERVER_JOBS_ATTEMPT_H_
#define TRAINYARD_SERVER_JOBS_ATTEMPT_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/worker_outcome.h"
#include "server/health/rank_supervisor.h"
#include "server/health/restart_policy.h"
#include "server/jobs/job_streams.h"
#include "server/launch/launcher.h"

namespace trainyard {

using SteadyTime = std::chrono::steady_clock::time_point;

// Where an attempt runs: its rendezvous (rank 0's store; an empty address:
// the launcher tells the workers), each rank's node as the rank said when it
// connected, and the id the cluster's scheduler gave the attempt (Slurm's
// job id; "": none).
struct AttemptPlace {
  std::string master_addr;
  int master_port = 0;
  std::map<int32_t, std::string> nodes;
  std::string external_id;
};

// How an attempt failed: its first failure (the root cause), if any.
struct AttemptFailure {
  bool failed = false;
  std::string reason;
  int32_t rank = -1;             // -1: none (the watchdog, a lost group)
  bool usage_error = false;      // a rank ended with a usage error: the next attempt would too
  bool reattach_failed = false;  // lost to a coordinator restart: the coordinator's loss
};

// What the watch over the attempt (AttemptWatch) keeps between its looks.
struct AttemptWatchState {
  SteadyTime reattach_deadline{};  // RECOVERING: when waiting for the ranks to reattach ends
  int64_t hang_diagnosis = 0;      // the hang watchdog's diagnose request while it waits (0: none)
};

class Attempt {
 public:
  // Why the coordinator stops the attempt, if it does.
  enum class Stop {
    kNone,
    kCancel,                 // trainctl cancel: the job ends CANCELLED
    kCancelAfterCheckpoint,  // cancel --checkpoint: rank 0 saves, then every rank stops
    kForRestart,             // --on-shutdown checkpoint: the job resumes after the restart
    kForPriority,            // preempted for another job: checkpoint, stop, queued again
  };

  // What a change did, for the caller to act on.
  struct Update {
    // The attempt failed with this change (its first failure): the caller
    // stops the group and records why (failure(), failed_rank()).
    bool failed_now = false;
    // Something the job's events should say.
    std::string event;
    // Every rank has ended: End() says how.
    bool ended = false;
  };

  // Attempt `number` of a job with `world_size` ranks; `external`: ranks
  // join by themselves and no launcher reports their exits.
  Attempt(int32_t number, int32_t world_size, bool external);

  int32_t number() const { return number_; }
  int32_t world_size() const { return world_size_; }

  // Where it runs (AttemptPlace).
  AttemptPlace& place() { return place_; }
  const AttemptPlace& place() const { return place_; }

  // ---- Connections
  // Whether `rank` may connect now: OK, or why not (out of range, already
  // connected, an external attempt that is stopping).
  absl::Status CheckAttach(const std::string& job_id, int32_t rank) const;
  // An external rank joining while the attempt starts: rank 0 says where
  // its rendezvous store listens (advertise_addr:rendezvous_port, recorded
  // and said in `event`); the other ranks wait for it (Unavailable).
  absl::Status Join(const std::string& job_id, int32_t rank, const std::string& advertise_addr, int rendezvous_port,
                    std::string* event);
  // REQUIRES: CheckAttach(rank).ok().
  void Attach(int32_t rank, std::shared_ptr<WorkerChannel> channel);
  // Whether every rank has connected at least once.
  bool all_attached() const;  // every rank connected at least once, or parked
  int32_t parked() const { return static_cast<int32_t>(parked_.size()); }
  // `rank`'s stream ended (the channel it attached with; another is
  // ignored). An external rank that reported its result has ended: its end
  // is returned, to be taken as a launcher's report is (OnExit, or the
  // fault-tolerance mode's); one without a result is lost and may
  // reconnect within the reattach timeout (LostRanks).
  std::optional<RankExit> Detach(const std::string& job_id, int32_t rank, const std::shared_ptr<WorkerChannel>& channel,
                                 SteadyTime now);
  // The connected rank's channel, or null.
  WorkerChannel* channel(int32_t rank) const;
  const std::map<int32_t, std::shared_ptr<WorkerChannel>>& channels() const { return channels_; }
  // Sends `command` to every connected rank.
  void Broadcast(const WorkerCommand& command) const;
  void CloseChannels() const;

  // ---- How ranks end
  // A rank's own account of its end (`detail`: its error).
  Update OnResult(int32_t rank, WorkerOutcome outcome, const std::string& detail);
  // A rank's process ended (a launcher's exit, or an end decided here).
  // `recovering`: the coordinator restarted and waits for the ranks to
  // reattach; a rank gone without a word then is the coordinator's loss.
  Update OnExit(const RankExit& exit, bool recovering);
  // The attempt failed (the watchdog, a lost group); `rank` -1 for none;
  // `reattach`: lost to a coordinator restart (its workers did not
  // reattach in time). Only the first failure counts, unless it was a rank
  // that lost its peer (connection closed or reset by it) and this one is
  // not: the peer's own failure is the root cause.
  Update Fail(int32_t rank, const std::string& reason, bool reattach = false);

  // External ranks that are not connected and will not come back: all of
  // them once the attempt is stopping; a rank lost without a result once
  // `reattach_timeout` has passed. Feed each to OnExit.
  std::vector<RankExit> LostRanks(const std::string& job_id, SteadyTime now,
                                  std::chrono::duration<double> reattach_timeout) const;

  // Ranks a launcher starts on other hosts (Slurm), whose end it learns
  // late when their node dies (when the cluster marks the node down): a
  // stream lost without a result for `grace` ends the rank here instead
  // (RanksOnLostNodes), its node presumed lost.
  void WatchForLostNodes(std::chrono::duration<double> grace) { node_loss_grace_ = grace; }
  // Under WatchForLostNodes: the launched ranks whose stream was lost
  // without a result, or that were evicted (Evicted), more than the grace
  // ago and whose end no launcher reported, as the launcher would report
  // their ends (WorkerSessions::Exit). An evicted rank whose end does not
  // come was not killed: its node is dead or cut off from the cluster.
  std::vector<RankExit> RanksOnLostNodes(const std::string& job_id, SteadyTime now) const;
  // `rank` was taken out of its group (evicted) and its process asked to
  // die (KillRank) at `now`.
  void Evicted(int32_t rank, SteadyTime now) {
    if (node_loss_grace_ && !exited_.count(rank)) evicted_at_.emplace(rank, now);
  }

  // ---- The fault-tolerance mode's rules for the ranks (server/health/rank_supervisor.h)
  // Mode whole_group's until set.
  void SetSupervisor(std::unique_ptr<RankSupervisor> supervisor) { supervisor_ = std::move(supervisor); }
  RankSupervisor& supervisor() const { return *supervisor_; }
  // The rank whose progress and checkpoints stand for the group: rank 0,
  // or the first member of a replica job's current membership.
  int32_t lead_rank() const { return supervisor_->lead(); }
  // A replacement of `rank` is launched: its previous process's stream,
  // result and end are forgotten, so that the replacement attaches and ends
  // as the rank.
  void Replace(int32_t rank);
  // Rank `rank` does not run on purpose (an elastic job below its full
  // size): it counts as ended, neither well nor badly. Replace runs it again.
  void Park(int32_t rank);
  // Records `rank`'s own account of its end without acting on it (a
  // replica that is replaced when its process ends).
  void NoteResult(int32_t rank, WorkerOutcome outcome) { results_[rank] = outcome; }
  // Whether `rank` reported how it ended.
  bool reported(int32_t rank) const { return results_.count(rank) > 0; }

  // ---- Stops the coordinator asks for
  // `reason`: what a cancel's ranks and the job's end say ("": cancelled by
  // a user).
  void RequestStop(Stop why, std::string reason = "") {
    stop_ = why;
    if (!reason.empty()) stop_reason_ = std::move(reason);
  }
  Stop stop() const { return stop_; }
  // A cancel's reason, as the ranks are told it.
  std::string stop_reason() const { return stop_reason_.empty() ? "cancelled by user" : stop_reason_; }
  // A cancel (either kind) or a coordinator restart: rank ends are no failure.
  bool stop_requested() const { return stop_ != Stop::kNone; }
  bool cancel_requested() const { return stop_ == Stop::kCancel || stop_ == Stop::kCancelAfterCheckpoint; }
  // Failed, preempted or asked to stop: no new work is asked of it.
  bool stopping() const { return failure_.failed || preempted_ || cancel_requested(); }

  bool failed() const { return failure_.failed; }
  const AttemptFailure& failure() const { return failure_; }

  AttemptWatchState& watch() { return watch_; }

  // A rank's note is recorded as an event: the number of notes taken so
  // far with this one, 0 once `limit` was reached.
  int TakeNote(int limit) { return notes_ < limit ? ++notes_ : 0; }

  // How the attempt ended: what the attempt knows (the caller adds the
  // job's restarts and limits). REQUIRES: every rank has ended.
  AttemptEnd End() const;

 private:
  const int32_t number_;
  const int32_t world_size_;
  const bool external_;
  AttemptPlace place_;
  std::set<int32_t> attached_;                                  // connected at least once
  std::set<int32_t> exited_;                                    // ends handled
  std::set<int32_t> parked_;                                    // not running on purpose (in exited_ too)
  std::map<int32_t, std::shared_ptr<WorkerChannel>> channels_;  // connected now
  std::map<int32_t, WorkerOutcome> results_;                    // as the ranks reported them
  std::map<int32_t, SteadyTime> detached_at_;                   // ranks lost without a result
  std::map<int32_t, SteadyTime> evicted_at_;                    // WatchForLostNodes: evicted, not ended yet
  std::optional<std::chrono::duration<double>> node_loss_grace_;
  int notes_ = 0;
  AttemptFailure failure_;
  bool preempted_ = false;
  Stop stop_ = Stop::kNone;
  std::string stop_reason_;
  int32_t succeeded_ = 0;  // ranks that ended having trained to the end
  AttemptWatchState watch_;
  std::unique_ptr<RankSupervisor> supervisor_ = std::make_unique<RankSupervisor>();
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_JOBS_ATTEMPT_H_
