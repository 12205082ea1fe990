// Replica fault tolerance (fault_tolerance.mode replica), the rank's side:
// the coordinator sends a MembershipView (common/replica_protocol.h)
// whenever the live ranks change; the control stream's thread offers it to
// a MembershipMailbox, and the training thread takes it at a step boundary.
// A ReplicaReporter carries a rank's side back (GROUP_BROKEN, COMMITTED,
// LEFT). No torch here.
#ifndef TRAINYARD_WORKER_CONTROL_MEMBERSHIP_H_
#define TRAINYARD_WORKER_CONTROL_MEMBERSHIP_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/replica_protocol.h"

namespace trainyard {

// The memberships offered to one rank, by epoch. Thread-safe: the control
// stream's thread offers, the training thread reads and waits.
class MembershipMailbox {
 public:
  // Keeps `m` unless an offer of the same or a higher epoch was taken
  // already (Forget); a later offer of the same epoch replaces it.
  void Offer(MembershipView m);
  // The highest epoch offered so far (0: none).
  int64_t latest_epoch() const;
  // The newest membership offered, if any (not yet taken).
  std::optional<MembershipView> Latest() const;
  // The newest membership ever offered, taken or not (none before the
  // first): what a reconnecting rank tells a coordinator that restarted.
  std::optional<MembershipView> Newest() const;
  // The membership of exactly `epoch`, waiting for it until `deadline`;
  // nullopt when it did not come.
  std::optional<MembershipView> WaitFor(int64_t epoch, std::chrono::steady_clock::time_point deadline);
  // The newest membership with an epoch above `epoch`, waiting for one until
  // `deadline`; nullopt when none came.
  std::optional<MembershipView> WaitNewer(int64_t epoch, std::chrono::steady_clock::time_point deadline);
  // Drops the offers of epochs up to `epoch` (taken or overtaken).
  void Forget(int64_t epoch);

 private:
  mutable absl::Mutex mu_;
  std::map<int64_t, MembershipView> offers_ ABSL_GUARDED_BY(mu_);
  std::optional<MembershipView> newest_ ABSL_GUARDED_BY(mu_);
  int64_t latest_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t forgotten_ ABSL_GUARDED_BY(mu_) = 0;
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

// Where the training thread sends its ReplicaReports (the ControlClient in the
// worker; tests record them). Called from the training thread.
class ReplicaReporter {
 public:
  virtual ~ReplicaReporter() = default;
  virtual void OnReplica(const ReplicaReport& event) = 0;
  // Every committed step, when WantsCommits() (the hash costs a pass over
  // the parameters).
  virtual bool WantsCommits() const { return false; }
  virtual void OnCommit(const ReplicaCommit& /*commit*/) {}
};

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_CONTROL_MEMBERSHIP_H_
