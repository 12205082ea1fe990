// ReplicaMembership: the training thread's side of a replica job's
// memberships (fault_tolerance.mode replica) — which epoch's groups it
// trains in, taking a newer membership (the first one, one agreed at a step
// boundary, or one after its group broke), leaving when a membership leaves
// it out, and telling the coordinator (ReplicaReporter): GROUP_BROKEN,
// COMMITTED once per epoch, LEFT. With env TRAINYARD_REPLICA_HASH=1 every
// committed step is logged as "replica rank R epoch E step S cursor G hash
// H" (H: FNV-1a over every parameter's bytes) for tests that compare the
// replicas; with TRAINYARD_REPLICA_HASH=commits the same line without the
// hash (costs nothing: for timing commits, as bench/faults does). Used by
// the Trainer (worker/trainer.h) on its thread only.
#ifndef TRAINYARD_WORKER_REPLICAS_REPLICA_MEMBERSHIP_H_
#define TRAINYARD_WORKER_REPLICAS_REPLICA_MEMBERSHIP_H_

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "worker/base/tensor_hash.h"
#include "worker/control/membership.h"
#include "worker/replicas/replica_group.h"

namespace trainyard {

class FlightRecorder;

struct ReplicaOptions {
  int32_t launch_rank = 0;
  std::string bind_addr = "127.0.0.1";  // where this rank's Gloo transport binds
  // Bounds forming an epoch's groups and each collective on them.
  std::chrono::milliseconds group_timeout{std::chrono::seconds(60)};
  // How long a rank waits for a membership (the first one, or a newer one
  // after its group broke) before it gives up.
  std::chrono::milliseconds membership_timeout{std::chrono::minutes(10)};
  ReplicaReporter* reporter = nullptr;  // may be null; must outlive the trainer
  bool log_hashes = false;              // TRAINYARD_REPLICA_HASH=1 (ReplicaOptionsFromEnvironment)
  bool log_commits = false;             // TRAINYARD_REPLICA_HASH=1 or commits
  // Each epoch's gradients and step agreement through shared memory when
  // its members are all on this host (the Trainer sets it from the spec:
  // SharedMemoryAllowed of worker/dist_setup.h).
  bool shared_memory = false;
  // FSDP: ranks per replica (JobSpec::ranks_per_replica; 1 for NO_SHARD):
  // each epoch builds FSDP's shard and replicate groups. 0: DDP.
  int32_t fsdp_unit = 0;
  // The attempt's secret (RendezvousSecret): each epoch's store values are
  // signed with it and checked on reading (worker/signed_store.h).
  std::string secret;
};

// log_hashes and log_commits from the environment; the rest defaults.
ReplicaOptions ReplicaOptionsFromEnvironment(int32_t launch_rank);

// Whether `e` is what a collective of a broken group raises (a peer died
// or left: Gloo's closed or reset connections, timeouts, c10d's DistError,
// ShmAborted), or what forming a superseded epoch's groups raises
// (GroupSuperseded).
bool IsGroupFailure(const std::exception& e);

class ReplicaMembership {
 public:
  // `mailbox` (the TrainerControl's) and `recorder` (may be null) must
  // outlive this.
  ReplicaMembership(ReplicaOptions options, MembershipMailbox* mailbox, FlightRecorder* recorder);
  ~ReplicaMembership();

  // Waits for the first membership offered and joins its groups. Throws
  // std::runtime_error when none comes within membership_timeout, or when
  // it leaves this rank out.
  const ReplicaGroup& JoinFirst();
  // After a failed collective: reports GROUP_BROKEN with `detail`, waits for
  // a membership newer than the current one and joins it. Null when that
  // membership leaves this rank out (LEFT reported). Throws when none comes.
  const ReplicaGroup* JoinNewer(const std::string& detail, int64_t step);
  // At a step boundary all members agreed on `epoch`: whether it is newer
  // than the current one.
  bool Pending(int64_t epoch) const { return epoch > this->epoch(); }
  // Joins the groups of exactly `epoch` (waiting for its offer). Null when it
  // leaves this rank out (LEFT reported).
  const ReplicaGroup* JoinAgreed(int64_t epoch, int64_t step);
  // Drops the current groups (every reference the caller held must be gone
  // too for their connections to close).
  void Drop();

  // The heal of the current epoch (COMMITTED says whether this rank healed).
  void Healed(const HealResult& heal);
  // A step committed: COMMITTED for the first one of the epoch, the hash
  // line and OnCommit when asked for.
  void Committed(int64_t step, int64_t cursor, const std::vector<int64_t>& positions,
                 const std::vector<at::Tensor>& parameters);
  // A step the members of `epoch` committed, applied here only when the
  // next membership formed (FSDP's two-phase commit): its hash line and
  // OnCommit under the epoch that committed it, no COMMITTED event.
  void CommittedEarlier(int64_t epoch, int64_t step, int64_t cursor, const std::vector<int64_t>& positions,
                        const std::vector<at::Tensor>& parameters);

  int64_t epoch() const;  // 0 before the first membership
  const ReplicaGroup* group() const { return group_.get(); }
  int32_t launch_rank() const { return options_.launch_rank; }

 private:
  // The hash line and OnCommit of a committed step, when asked for.
  void Record(int64_t epoch, int64_t step, int64_t cursor, const std::vector<int64_t>& positions,
              const std::vector<at::Tensor>& parameters);
  // Joins `m` (null when it leaves this rank out: LEFT reported).
  const ReplicaGroup* Join(const MembershipView& m, int64_t step);
  void Report(const ReplicaReport& event);

  ReplicaOptions options_;
  MembershipMailbox* mailbox_;
  FlightRecorder* recorder_;
  std::unique_ptr<ReplicaGroup> group_;
  int64_t epoch_ = 0;
  std::chrono::steady_clock::time_point taken_at_;
  bool committed_in_epoch_ = false;
  HealResult heal_;
};

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_REPLICAS_REPLICA_MEMBERSHIP_H_
