// The groups of a replica job (fault_tolerance.mode replica), one membership
// epoch at a time, and the heal that makes the members of an epoch hold the
// same training state.
//
// Every rank serves a store of its own (ReplicaStore) and tells the
// coordinator where (WorkerHello.replica_store_port). A membership's groups
// meet at its first member's store under the prefix "m<epoch>/": the world
// group (Gloo; the member's index in MembershipView::ranks is its group rank),
// and, when its members are all on one host and shared memory is asked
// for, a ShmCollectives for DDP's gradients and the per-step agreement
// (as a whole-group job has); otherwise the agreement gets a Gloo group of
// its own. Groups of an older epoch are never used again; dropping every
// reference to them closes their connections, so peers still waiting in
// one of their collectives fail at once instead of at the timeout (in
// shared memory, a peer whose process ended is seen within a millisecond).
// The world group stays Gloo in every case: the heal's broadcast and the
// checkpoints use it. An FSDP job's epoch also builds FSDP's groups over
// its members (fsdp_unit ranks per replica, the membership listing whole
// replicas in launch-rank order: JobSpec::ranks_per_replica): the shard
// group of this rank's replica and the replicate group of the ranks that
// hold its shard in every replica, over which the heal runs.
#ifndef TRAINYARD_WORKER_REPLICAS_REPLICA_GROUP_H_
#define TRAINYARD_WORKER_REPLICAS_REPLICA_GROUP_H_

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

#include "worker/checkpoint/checkpoint.h"
#include "worker/collectives/dist_context.h"
#include "worker/control/membership.h"

namespace trainyard {

class Collectives;
class FlightRecorder;
class ShmCollectives;

// This rank's own store (a c10d TCPStore server on a free port of `host`,
// the address the rank advertises; of every address of the host when it
// cannot listen there), for the memberships whose first member it is.
class ReplicaStore {
 public:
  explicit ReplicaStore(const std::string& host = "127.0.0.1");
  ~ReplicaStore();
  int port() const;

 private:
  c10::intrusive_ptr<c10d::Store> store_;
  int port_ = 0;
};

class ReplicaGroup {
 public:
  // Joins `m`'s groups as launch rank `launch_rank` (which must be a
  // member). Collective over the members; `timeout` bounds forming them
  // and every later collective on them. Gloo binds to `bind_addr`. While
  // the groups form, `superseded` (when given) is asked every few
  // milliseconds whether a newer membership was offered: then forming
  // stops with GroupSuperseded (worker/abortable_store.h) — a member that
  // died before it joined would otherwise hold the others until `timeout`.
  // With `shared_memory`, the members' gradients and agreement go through
  // shared memory when they are all on this host. `fsdp_unit` > 0: an FSDP
  // job with that many ranks per replica (1: NO_SHARD); throws
  // std::invalid_argument when `m` does not list whole replicas in order.
  // With a `secret`, the epoch's store values are signed with it and
  // checked (worker/signed_store.h): a value another process wrote fails
  // forming the groups with ForgedStoreValue.
  ReplicaGroup(const MembershipView& m, int32_t launch_rank, const std::string& bind_addr,
               std::chrono::milliseconds timeout, bool shared_memory = false, FlightRecorder* recorder = nullptr,
               std::function<bool()> superseded = nullptr, int32_t fsdp_unit = 0, std::string secret = "");
  ~ReplicaGroup();
  ReplicaGroup(const ReplicaGroup&) = delete;
  ReplicaGroup& operator=(const ReplicaGroup&) = delete;

  const MembershipView& membership() const { return membership_; }
  int32_t rank() const { return rank_; }  // the group rank
  int32_t size() const { return static_cast<int32_t>(membership_.ranks.size()); }
  const c10::intrusive_ptr<c10d::ProcessGroup>& world() const { return world_; }
  // The communication the Trainer trains with in this epoch.
  DistContext context() const;
  ShmCollectives* shm() const { return shm_.get(); }  // null: the transport is the process group
  // The group whose members hold the same state as this rank (the world;
  // FSDP: its replicate group), over which Heal runs; and, for its rank `r`
  // (a heal's source), the group rank in world() of the first rank of r's
  // replica: the same on every member, whichever shard it holds.
  c10::intrusive_ptr<c10d::ProcessGroup> heal_group() const;
  int32_t SourceInWorld(int32_t r) const;

 private:
  MembershipView membership_;
  int32_t rank_ = 0;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::ProcessGroup> world_, control_;
  std::unique_ptr<ShmCollectives> shm_;
  int32_t fsdp_unit_ = 0;
  std::unique_ptr<Collectives> shard_, replicate_;  // FSDP's (shard_ null for NO_SHARD)
};

struct HealResult {
  int32_t source = 0;   // the group rank whose state every member now holds
  int64_t step = 0;     // the members' committed step from now on
  int64_t cursor = 0;   // and global cursor (worker/global_cursor.h)
  bool healed = false;  // this rank took state it did not have
  int64_t bytes = 0;    // what the broadcast carried (0 when nobody needed it)
};

// What Heal throws when the members' claims cannot all be true.
class HealRefused : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Collective over `pg` (ReplicaGroup::heal_group of a new epoch): every member tells its
// committed step (a rank that never trained: -1) and global cursor; when
// they differ, the first member at the highest step broadcasts its whole
// training state (BroadcastTrainingState, checked against the source's
// digest) to every member. Members that trained (step >= 0) must be within
// one step of the highest (the step in flight when their group broke):
// otherwise no state moves and every member throws HealRefused naming the
// two claims. Returns what the members agreed; the caller sets its step
// and cursor from it. `state` must carry the registered state
// (Checkpointer::Current).
HealResult Heal(const TrainingState& state, const c10::intrusive_ptr<c10d::ProcessGroup>& pg, int64_t committed_step,
                int64_t cursor);

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_REPLICAS_REPLICA_GROUP_H_
