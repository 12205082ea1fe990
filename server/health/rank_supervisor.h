// RankSupervisor: a fault-tolerance mode's rules for the ranks of one
// attempt (spec.fault_tolerance.mode): what follows a rank's hello, its
// reports, its lost stream and its end; which ranks may be taken out
// (evicted) instead of failing the group; and how the attempt changes size.
// Like RestartPolicy it only decides: it returns RankActions, which the
// JobLifecycle applies (JobLifecycle::Act), and reads the time from the
// TimeSource it is given.
//
// This base class is mode whole_group: every rank's end is the attempt's
// (Attempt's own rules: its first failure fails the group), nothing is
// evicted, the size is fixed. Other modes derive from it
// (server/replicas/replica_supervisor.h) and are made by
// MakeRankSupervisor (server/jobs/fault_tolerance_modes.h).
//
// Not thread-safe: the JobManager calls it under its mutex.
#ifndef TRAINYARD_SERVER_HEALTH_RANK_SUPERVISOR_H_
#define TRAINYARD_SERVER_HEALTH_RANK_SUPERVISOR_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/replica_protocol.h"
#include "common/worker_command.h"

namespace trainyard {

class ServerMetrics;

// What the JobLifecycle does after a decision, in this order.
struct RankActions {
  std::string event;  // for the job's events (may be empty)
  // The attempt fails (as its first failure) with this reason.
  bool fail = false;
  std::string failure;
  // Send `command` to each rank of `to`.
  std::optional<WorkerCommand> command;
  std::vector<int32_t> to;
  // The rank that healed and how long it took (a metric).
  int32_t healed_rank = -1;
  double heal_seconds = 0;
  // End these ranks' processes; launch these ranks (replacements, or a
  // grown job's new ranks).
  std::vector<int32_t> kill;
  std::vector<int32_t> launch;
  // A rank that left on purpose ended (-1: none): it is parked, and what it
  // held is free for waiting jobs.
  int32_t parked = -1;

  // Nothing to do.
  bool empty() const {
    return event.empty() && !fail && !command && healed_rank < 0 && kill.empty() && launch.empty() && parked < 0;
  }
};

// How a rank's end is taken (RankSupervisor::OnExit).
struct ExitDecision {
  RankActions actions;
  // The rank ended while the coordinator was away: it counts as ended
  // (parked) before the actions, and the attempt may now run.
  bool ended_while_away = false;
  // The end is the mode's alone, whatever the actions did; otherwise an
  // attempt that failed by them also takes the end by its own rules.
  bool taken = false;
};

// Where the attempt stands when a rank ends.
struct AttemptCondition {
  bool live = false;            // running, not stopping, the coordinator not shutting down
  bool stopping = false;        // failed, preempted or cancelled (Attempt::stopping)
  bool stop_requested = false;  // a stop was asked of it (Attempt::stop_requested)
};

class RankSupervisor {
 public:
  virtual ~RankSupervisor() = default;

  // Rank `rank` said hello: its own store listens at store_addr:store_port
  // (0: none), and it holds `held` (epoch 0: nothing), what an earlier
  // coordinator sent it.
  virtual RankActions OnHello(int32_t rank, const std::string& store_addr, int32_t store_port,
                              const MembershipView& held);
  // A rank's report on its group.
  virtual RankActions OnReport(int32_t rank, const ReplicaReport& report);
  // While the attempt runs (`live`: running, not stopping, the coordinator
  // not shutting down):
  //   `rank` reported that it failed or stopped; true when the mode
  //   replaces it (its result then fails nothing);
  virtual bool Absorbs(int32_t rank, bool live) const;
  //   and whether it left on purpose (its end is no news).
  virtual bool LeftOnPurpose(int32_t rank) const;
  //   its stream ended without a result.
  virtual void OnStreamLost(int32_t rank, bool live);
  // `rank`'s process ended (`finished`: it trained to the end; `why` how
  // it ended). Nullopt: the attempt's own rules take the end.
  virtual std::optional<ExitDecision> OnExit(int32_t rank, bool finished, const std::string& why,
                                             const AttemptCondition& attempt);
  // Ranks to take out now (their streams stayed lost).
  virtual std::vector<int32_t> StreamsLost() const;
  // A batch of changes the group takes as one (the losses one pass of the
  // watchdog finds, the exits a launcher reaps together): the calls between
  // BeginBatch and EndBatch decide as usual, but the group's new shape is
  // sent once, by EndBatch's actions. Nested batches are one.
  virtual void BeginBatch();
  virtual RankActions EndBatch();
  // The watchdog's pass over a running attempt: what is due by now (e.g.
  // replacements that waited for the others being replaced).
  virtual RankActions OnPass();
  // Whether `rank` can be taken out of the group and replaced (a hang's
  // culprit, a straggler) instead of failing or naming it; and doing so.
  virtual bool Evictable(int32_t rank) const;
  virtual RankActions Evict(int32_t rank, const std::string& why);
  // The ranks that train together now (empty: not yet known), of
  // `world_size` launch ranks.
  virtual std::vector<int32_t> TrainingRanks(int32_t world_size) const;
  // How many ranks train together now (`world_size` while not yet known):
  // the size of TrainingRanks without building it (every step report asks).
  virtual int32_t training_size(int32_t world_size) const;
  // The rank whose progress and checkpoints stand for the group.
  virtual int32_t lead() const;
  // Whether the attempt's size can change (an elastic job's group).
  virtual bool elastic() const;
  // Elastic jobs: the ranks whose processes may run, and the size the
  // attempt runs at once the ranks leaving and launched are done (of
  // `world_size`); Resize: the attempt runs `n` ranks from now on (nullopt:
  // it cannot resize).
  virtual int32_t running(int32_t world_size) const;
  virtual int32_t size(int32_t world_size) const;
  virtual std::optional<RankActions> Resize(int32_t n, const std::string& why);
  // How many whole-group restarts a failed attempt may use, of the spec's
  // max_restarts.
  virtual int max_restarts(int spec_max_restarts) const;
  // What `trainctl get` shows of the group, and the series /metrics
  // exports of it (after every decision).
  virtual std::optional<ReplicaStatus> Status() const;
  virtual void Export(const std::string& job_id, ServerMetrics* metrics) const;
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_HEALTH_RANK_SUPERVISOR_H_
