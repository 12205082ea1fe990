// Replica fault tolerance (fault_tolerance.mode replica): who trains
// together. The coordinator sends a Membership whenever the live ranks
// change; the control stream's thread offers it to a MembershipMailbox, and
// the training thread takes it at a step boundary (worker/replica_set.h).
// A ReplicaReporter carries a rank's side back (GROUP_BROKEN, COMMITTED,
// LEFT). No torch here.
#ifndef TRAINYARD_WORKER_MEMBERSHIP_H_
#define TRAINYARD_WORKER_MEMBERSHIP_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace trainyard {

// One epoch of a replica job: its members' launch ranks in group order (a
// member's group rank is its index), and where the epoch's groups meet (the
// first member's own store, under the key prefix "m<epoch>/").
struct Membership {
  int64_t epoch = 0;
  std::vector<int32_t> ranks;
  std::string store_addr;
  int32_t store_port = 0;
  std::string reason;

  // `rank`'s index in ranks, or -1 when it is not a member.
  int32_t IndexOf(int32_t rank) const;
  // The key prefix of this epoch's groups: "m<epoch>/".
  std::string StorePrefix() const;
  // "epoch 3: ranks [0, 1, 2] (rank 2 joined)", for logs.
  std::string Describe() const;
};

// The memberships offered to one rank, by epoch. Thread-safe: the control
// stream's thread offers, the training thread reads and waits.
class MembershipMailbox {
 public:
  // Keeps `m` unless an offer of the same or a higher epoch was taken
  // already (Forget); a later offer of the same epoch replaces it.
  void Offer(Membership m);
  // The highest epoch offered so far (0: none).
  int64_t latest_epoch() const;
  // The newest membership offered, if any (not yet taken).
  std::optional<Membership> Latest() const;
  // The newest membership ever offered, taken or not (none before the
  // first): what a reconnecting rank tells a coordinator that restarted.
  std::optional<Membership> Newest() const;
  // The membership of exactly `epoch`, waiting for it until `deadline`;
  // nullopt when it did not come.
  std::optional<Membership> WaitFor(int64_t epoch, std::chrono::steady_clock::time_point deadline);
  // The newest membership with an epoch above `epoch`, waiting for one until
  // `deadline`; nullopt when none came.
  std::optional<Membership> WaitNewer(int64_t epoch, std::chrono::steady_clock::time_point deadline);
  // Drops the offers of epochs up to `epoch` (taken or overtaken).
  void Forget(int64_t epoch);

 private:
  mutable absl::Mutex mu_;
  std::map<int64_t, Membership> offers_ ABSL_GUARDED_BY(mu_);
  std::optional<Membership> newest_ ABSL_GUARDED_BY(mu_);
  int64_t latest_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t forgotten_ ABSL_GUARDED_BY(mu_) = 0;
};

// A rank's side of a membership, for the coordinator (ReplicaReport of the
// protocol).
struct ReplicaEvent {
  enum class Kind { kGroupBroken, kCommitted, kLeft };
  Kind kind = Kind::kGroupBroken;
  int64_t epoch = 0;
  int64_t step = 0;    // the rank's committed step
  std::string detail;  // kGroupBroken: what the collective raised
  double seconds = 0;  // kCommitted: from taking the membership to the first commit in it
  bool healed = false;
  int64_t heal_bytes = 0;
};

// A step a replica committed, as tests check them (ReplicaReporter::OnCommit).
struct ReplicaCommit {
  int32_t rank = 0;  // launch rank
  int64_t epoch = 0;
  int64_t step = 0;                // committed step
  int64_t cursor = 0;              // global cursor after the step
  int32_t members = 0;             // who trained it
  std::vector<int64_t> positions;  // the global positions this rank trained in it
  uint64_t hash = 0;               // FNV-1a of every parameter's bytes after the step
};

// Where the training thread sends its ReplicaEvents (the ControlClient in the
// worker; tests record them). Called from the training thread.
class ReplicaReporter {
 public:
  virtual ~ReplicaReporter() = default;
  virtual void OnReplica(const ReplicaEvent& event) = 0;
  // Every committed step, when WantsCommits() (the hash costs a pass over
  // the parameters).
  virtual bool WantsCommits() const { return false; }
  virtual void OnCommit(const ReplicaCommit& /*commit*/) {}
};

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_MEMBERSHIP_H_
