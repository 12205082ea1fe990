// Membership: the replicas of one attempt of a fault_tolerance.mode replica
// job (docs/design/fault-tolerance.md), and the coordinator's decisions on
// who trains together. A replica is `unit` launch ranks (1 for DDP; a shard
// group of an FSDP HYBRID job: ranks [k * unit, (k + 1) * unit)), which are
// members together or not at all: a member lost takes its replica's other
// ranks out with it (told, they end and are replaced too), a replacement
// replica joins once all its ranks said hello, and a membership lists whole
// replicas, each in launch-rank order. Each launch rank is, at any time,
// one of:
//   connected  before the first membership: it said hello, the others are awaited;
//   member     in the current membership (live);
//   lost       taken out of the membership (it died, its stream was lost,
//              or it was evicted); its process is awaited before a
//              replacement starts (healing);
//   healing    a replacement (or, growing, a new rank) was launched and has
//              not joined yet;
//   leaving    left out on purpose (the job shrinks); its process is awaited;
//   parked     not running on purpose (an elastic job below its full size).
// An elastic job runs ranks 0..size-1: it shrinks from the top and grows
// back from the lowest parked rank (so rank r keeps the r-th slot or GPU).
// The decisions:
//   - epoch 1 = every launch rank started, once all of them have said hello;
//   - a member lost (its process ended, its stream stayed lost for
//     kStreamLossGrace, or it was evicted): epoch + 1 = the members left, sent to them, unless
//     fewer than min_replicas are left: then the attempt fails (the
//     whole-group restart of mode whole_group);
//   - a lost rank's process gone: a replacement is launched (same rank),
//     unless its replacements failed kMaxFailedReplacements times in a row
//     before one committed a step (then the attempt fails);
//   - several members lost together (a batch: BeginBatch..EndBatch, e.g.
//     one pass of the watchdog): one epoch for all of them;
//   - a replacement's hello: epoch + 1 = the members and it, sent to all,
//     once every replacement on its way said hello (or kJoinWait after the
//     first did: the others join later);
//   - a member saying hello again (a reconnection) or reporting a broken
//     group of an older epoch: the current membership, to it alone;
//   - Resize(n): ranks from n up leave (members get a membership without
//     them and end; replacements not joined yet are ended) and, once their
//     processes ended, are parked; parked ranks below n are launched and
//     join as replacements do (taking the state of a live peer).
// A group adopted after a coordinator restart (Adopting) is taken on once
// every rank has reattached or is found gone: from the newest membership
// its ranks hold, without the gone ones (replaced), with ranks that hold
// none of it (replacements that had not joined) joining.
// A rank of an older membership never becomes a member again but through a
// hello after it was replaced. Heal time: from a rank's loss to its
// replacement's first committed step (ReplicaReport kCommitted).
//
// Pure logic on the time of the TimeSource it is given. Not thread-safe:
// the JobManager calls it under its mutex.
#ifndef TRAINYARD_SERVER_REPLICAS_MEMBERSHIP_H_
#define TRAINYARD_SERVER_REPLICAS_MEMBERSHIP_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/replica_protocol.h"

namespace trainyard {

class Membership {
 public:
  // Replacements of one rank that may fail in a row (ended before they
  // committed a step) before the attempt fails.
  static constexpr int kMaxFailedReplacements = 3;

  // What the caller does after a change.
  struct Decision {
    // Send `send` to each rank of `to` (a new membership, or the current one again).
    std::optional<MembershipView> send;
    std::vector<int32_t> to;
    // `send` as a change from the membership before it (for the ranks that
    // hold that one), when it is one.
    std::optional<MembershipDelta> delta;
    // The attempt fails (whole-group restart) with this reason.
    bool fail = false;
    std::string failure;
    // Launch these ranks now (replacements, or a grown job's new ranks).
    std::vector<int32_t> launch;
    // End these ranks' processes (launched, but the job shrank below them).
    std::vector<int32_t> kill;
    // A rank that left on purpose ended (-1: none): what it held is free.
    int32_t parked = -1;
    // The rank that healed and how long it took (kCommitted of a replacement).
    int32_t healed_rank = -1;
    double heal_seconds = 0;
    // For the job's events (may be empty).
    std::string event;
  };

  enum class State { kLaunched, kConnected, kMember, kLost, kHealing, kLeaving, kParked };

  // An attempt of `world_size` launch ranks, `unit` per replica (a divisor
  // of world_size), of which the first `started` are launched (0: all; the
  // others are parked; whole replicas); below `min_replicas` live replicas
  // the attempt fails. `clock` must outlive it.
  Membership(int32_t world_size, int32_t min_replicas, const TimeSource* clock, int32_t started = 0, int32_t unit = 1);

  // The job runs ranks 0..n-1 from now on (n rounded down to whole
  // replicas, at least one): `why` goes in the events.
  Decision Resize(int32_t n, const std::string& why);

  // The running group of an attempt adopted after a coordinator restart:
  // its ranks reattach (OnReattach) or are found gone (OnGone).
  static Membership Adopting(int32_t world_size, int32_t min_replicas, const TimeSource* clock, int32_t unit = 1);
  bool adopting() const { return adopting_; }
  // Adopting: `rank` reattached, its store at store_addr:store_port, holding
  // `held` (epoch 0: none). The last of the ranks takes the group on.
  Decision OnReattach(int32_t rank, const std::string& store_addr, int32_t store_port, const MembershipView& held);
  // Adopting: `rank`'s process ended while the coordinator was away (or
  // after it reattached, before the group was taken on).
  Decision OnGone(int32_t rank);

  // `rank` said hello; its store listens at store_addr:store_port.
  Decision OnHello(int32_t rank, const std::string& store_addr, int32_t store_port);
  // `rank` is out of the membership (`why`: "killed by signal 9", "evicted:
  // ..."); its process may still run: the replacement waits for OnExit.
  // Nothing for a rank that is not a member (or before epoch 1).
  Decision OnLost(int32_t rank, const std::string& why);
  // `rank`'s process ended without finishing the job: lost (if it was not
  // yet) and replaced.
  Decision OnExit(int32_t rank, const std::string& why);
  // A member's report.
  Decision OnReport(int32_t rank, const ReplicaReport& report);

  // A batch: what changes between BeginBatch and EndBatch (the losses one
  // pass of the watchdog finds, the exits a launcher reaps together) makes
  // one membership, one epoch, instead of one each, and its reason names
  // the ranks as ranges ("ranks 3-12 lost: ..."). The decisions meanwhile
  // launch, kill and fail as usual but send nothing; EndBatch's sends the
  // membership to its members and tells the ranks that leave with a lost
  // shard-mate (nothing when nothing changed or the attempt failed).
  // Nested batches are one.
  void BeginBatch();
  Decision EndBatch();

  // Replacements that said hello join together: at once when every rank
  // being replaced (or grown) has, else at the first OnPass (the watchdog's
  // pass) kJoinWait after the first of them did.
  static constexpr std::chrono::seconds kJoinWait{1};
  Decision OnPass();
  // A member's stream ended without a result. Its process's end, seen
  // within moments when it died, names the loss better; a member whose
  // stream stays lost for kStreamLossGrace (StreamsLost) is taken out, and
  // one that says hello again in the meantime stays.
  void OnStreamLost(int32_t rank);
  static constexpr std::chrono::seconds kStreamLossGrace{1};
  // Members whose stream has been lost for longer than kStreamLossGrace.
  std::vector<int32_t> StreamsLost() const;

  // Whether the first membership was sent (the group formed): from then
  // on a lost member is replaced instead of failing the attempt.
  bool formed() const { return view_.epoch > 0; }
  int64_t epoch() const { return view_.epoch; }
  const MembershipView& view() const { return view_; }
  State state(int32_t rank) const { return states_.at(rank); }
  // The first member (group rank 0): whose progress and checkpoints the
  // coordinator follows; 0 before epoch 1.
  int32_t lead() const { return view_.ranks.empty() ? 0 : view_.ranks.front(); }
  int live() const { return static_cast<int>(view_.ranks.size()); }
  int32_t unit() const { return unit_; }
  // Live replicas (members / unit) and replicas lost or being replaced.
  int live_replicas() const { return live() / unit_; }
  int healing_replicas() const;
  // Ranks lost or being replaced (not yet members again).
  int healing() const;
  std::vector<int32_t> healing_ranks() const;
  // Ranks left out on purpose whose processes are still ending.
  std::vector<int32_t> leaving_ranks() const;
  int32_t world_size() const { return world_size_; }
  // Ranks the job runs with once the ones leaving and launched are done
  // (the Resize target), and ranks whose processes may run (not parked).
  int32_t size() const;
  int32_t running() const;
  int32_t min_replicas() const { return min_replicas_; }

 private:
  // The next epoch with `ranks` for `reason`, sent to `ranks` and to
  // `told` (ranks that leave by it). In a batch: the members change, the
  // epoch waits for EndBatch.
  Decision Advance(std::vector<int32_t> ranks, const std::string& reason, const std::vector<int32_t>& told = {});
  // Ranks lost for one reason, and their shard-mates that leave with them.
  struct Loss {
    std::string why;
    std::vector<int32_t> ranks, with;
  };
  static std::string LossReason(const std::vector<Loss>& losses);
  // A healing rank said hello: its batch joins when every one has (JoinReady).
  Decision JoinWhenReady();
  // Before epoch 1: the first membership once every rank started has
  // connected (nothing yet otherwise).
  Decision Form();
  std::string Describe(const MembershipView& v) const;
  // The launch ranks of `rank`'s replica.
  std::vector<int32_t> ReplicaOf(int32_t rank) const;
  // Healing ranks whose whole replica said hello: members from now on, in
  // the next membership.
  Decision JoinReady();

  const int32_t world_size_;
  const int32_t unit_;
  const int32_t min_replicas_;
  const TimeSource* const clock_;
  MembershipView view_;
  std::vector<State> states_;
  std::map<int32_t, std::pair<std::string, int32_t>> stores_;  // from the ranks' hellos
  std::map<int32_t, TimeSource::Steady> stream_lost_at_;       // members without a stream
  std::map<int32_t, TimeSource::Steady> lost_at_;              // lost ranks not healed yet
  std::map<int32_t, int> failed_replacements_;                 // in a row, by rank
  std::set<int32_t> growing_;                                  // launched by Resize, not joined yet
  std::set<int32_t> ready_;  // healing ranks that said hello, waiting for the rest of their replica
  // The open batch (BeginBatch): what it changed, for EndBatch.
  struct Batch {
    int depth = 0;
    bool changed = false, failed = false;
    std::vector<Loss> losses;
    std::vector<std::string> other;  // reasons of other changes (joins, leaves)
    std::vector<int32_t> told;
    std::vector<int32_t> base;  // the members before the batch's first change
  };
  Batch batch_;
  bool batching() const { return batch_.depth > 0 && formed(); }
  std::optional<TimeSource::Steady> first_ready_at_;  // the first of the ready_ ranks said hello
  bool adopting_ = false;
  std::map<int32_t, MembershipView> held_;  // adopting: what each reattached rank holds
  std::set<int32_t> gone_;                  // adopting: ranks that ended while the coordinator was away
  Decision TakeOn();
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_REPLICAS_MEMBERSHIP_H_
