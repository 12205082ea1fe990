// The groups of a replica job (fault_tolerance.mode replica), one membership
// epoch at a time, and the heal that makes the members of an epoch hold the
// same training state.
//
// Every rank serves a store of its own (ReplicaStore) and tells the
// coordinator where (WorkerHello.replica_store_port). A Membership's groups
// meet at its first member's store under the prefix "m<epoch>/": the world
// group (Gloo; the member's index in Membership::ranks is its group rank)
// and the per-step agreement's Gloo group of its own. Groups of an older
// epoch are never used again; dropping every reference to them closes their
// connections, so peers still waiting in one of their collectives fail at
// once instead of at the timeout.
#ifndef TRAINYARD_WORKER_REPLICA_GROUP_H_
#define TRAINYARD_WORKER_REPLICA_GROUP_H_

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "worker/checkpoint.h"
#include "worker/dist_context.h"
#include "worker/membership.h"

namespace trainyard {

class FlightRecorder;

// This rank's own store (a c10d TCPStore server on a free port of every
// address of the host), for the memberships whose first member it is.
class ReplicaStore {
 public:
  ReplicaStore();
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
  ReplicaGroup(const Membership& m, int32_t launch_rank, const std::string& bind_addr,
               std::chrono::milliseconds timeout, FlightRecorder* recorder = nullptr,
               std::function<bool()> superseded = nullptr);
  ~ReplicaGroup();
  ReplicaGroup(const ReplicaGroup&) = delete;
  ReplicaGroup& operator=(const ReplicaGroup&) = delete;

  const Membership& membership() const { return membership_; }
  int32_t rank() const { return rank_; }  // the group rank
  int32_t size() const { return static_cast<int32_t>(membership_.ranks.size()); }
  const c10::intrusive_ptr<c10d::ProcessGroup>& world() const { return world_; }
  // The communication the Trainer trains with in this epoch (no shared
  // memory: the transport is the process group).
  DistContext context() const;

 private:
  Membership membership_;
  int32_t rank_ = 0;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::ProcessGroup> world_, control_;
};

struct HealResult {
  int32_t source = 0;   // the group rank whose state every member now holds
  int64_t step = 0;     // the members' committed step from now on
  int64_t cursor = 0;   // and global cursor (worker/global_cursor.h)
  bool healed = false;  // this rank took state it did not have
  int64_t bytes = 0;    // what the broadcast carried (0 when nobody needed it)
};

// Collective over `pg` (the group of a new epoch): every member tells its
// committed step (a rank that never trained: -1) and global cursor; when
// they differ, the first member at the highest step broadcasts its whole
// training state (BroadcastTrainingState) to every member. Returns what the
// members agreed; the caller sets its step and cursor from it. `state` must
// carry the registered state (Checkpointer::Current).
HealResult Heal(const TrainingState& state, const c10::intrusive_ptr<c10d::ProcessGroup>& pg, int64_t committed_step,
                int64_t cursor);

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_REPLICA_GROUP_H_
