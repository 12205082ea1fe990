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

  // The rendezvous (rank 0's store); an empty address: the launcher tells
  // the workers.
  void SetRendezvous(std::string addr, int port);
  const std::string& master_addr() const { return master_addr_; }
  int master_port() const { return master_port_; }

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
  // ignored). An external rank that reported its result has ended; one
  // without a result is lost and may reconnect within the reattach timeout
  // (LostRanks).
  Update Detach(const std::string& job_id, int32_t rank, const std::shared_ptr<WorkerChannel>& channel, SteadyTime now);
  // Where `rank` runs, as it said when it connected (its node's name).
  void SetNode(int32_t rank, std::string node) { nodes_[rank] = std::move(node); }
  const std::map<int32_t, std::string>& nodes() const { return nodes_; }
  // The id the cluster's scheduler gave the attempt (Slurm's job id; "":
  // none).
  void SetExternalId(std::string id) { external_id_ = std::move(id); }
  const std::string& external_id() const { return external_id_; }
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
  // The attempt failed (the watchdog, a lost group); `rank` -1 for none.
  // Only the first failure counts, unless it was a rank that lost its peer
  // (connection closed or reset by it) and this one is not: the peer's own
  // failure is the root cause.
  Update Fail(int32_t rank, const std::string& reason);
  // Marks the attempt lost to a coordinator restart (its workers did not
  // reattach in time) and fails it.
  Update FailReattach(const std::string& reason);

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
  void RequestStop(Stop why) { stop_ = why; }
  Stop stop() const { return stop_; }
  // A cancel (either kind) or a coordinator restart: rank ends are no failure.
  bool stop_requested() const { return stop_ != Stop::kNone; }
  bool cancel_requested() const { return stop_ == Stop::kCancel || stop_ == Stop::kCancelAfterCheckpoint; }
  // Failed, preempted or asked to stop: no new work is asked of it.
  bool stopping() const { return failed_ || preempted_ || cancel_requested(); }

  bool failed() const { return failed_; }
  const std::string& failure() const { return failure_; }
  int32_t failed_rank() const { return failed_rank_; }
  bool preempted() const { return preempted_; }

  // RECOVERING: when waiting for the ranks to reattach ends.
  void set_reattach_deadline(SteadyTime t) { reattach_deadline_ = t; }
  SteadyTime reattach_deadline() const { return reattach_deadline_; }

  // The watchdog's diagnose request while it waits for answers (0: none).
  int64_t hang_diagnosis() const { return hang_diagnosis_; }
  void set_hang_diagnosis(int64_t id) { hang_diagnosis_ = id; }

  // Ranks' notes recorded as events so far; false once `limit` is reached.
  bool TakeNote(int limit) { return notes_ < limit ? (++notes_, true) : false; }
  int notes() const { return notes_; }

  // How the attempt ended: what the attempt knows (the caller adds the
  // job's restarts and limits). REQUIRES: every rank has ended.
  AttemptEnd End() const;

 private:
  const int32_t number_;
  const int32_t world_size_;
  const bool external_;
  std::string master_addr_;
  int master_port_ = 0;
  std::map<int32_t, std::string> nodes_;
  std::string external_id_;
  std::set<int32_t> attached_;                                  // connected at least once
  std::set<int32_t> exited_;                                    // ends handled
  std::set<int32_t> parked_;                                    // not running on purpose (in exited_ too)
  std::map<int32_t, std::shared_ptr<WorkerChannel>> channels_;  // connected now
  std::map<int32_t, WorkerOutcome> results_;                    // as the ranks reported them
  std::map<int32_t, SteadyTime> detached_at_;                   // ranks lost without a result
  std::map<int32_t, SteadyTime> evicted_at_;                    // WatchForLostNodes: evicted, not ended yet
  std::optional<std::chrono::duration<double>> node_loss_grace_;
  int notes_ = 0;
  bool failed_ = false;
  std::string failure_;
  int32_t failed_rank_ = -1;
  bool preempted_ = false;
  bool usage_error_ = false;
  bool reattach_failed_ = false;
  Stop stop_ = Stop::kNone;
  int32_t succeeded_ = 0;  // ranks that ended having trained to the end
  SteadyTime reattach_deadline_{};
  int64_t hang_diagnosis_ = 0;
  std::unique_ptr<RankSupervisor> supervisor_ = std::make_unique<RankSupervisor>();
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_JOBS_ATTEMPT_H_
