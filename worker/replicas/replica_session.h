// ReplicaSession: the training loop's side of fault_tolerance.mode replica
// (DDP or FSDP), as a StepGuard (worker/step_guard.h). It waits for the
// first membership the coordinator offers (MembershipMailbox), trains in its
// groups (ReplicaGroup) and takes newer ones as they come
// (ReplicaMembership). A first membership of epoch 1 starts the job
// (restoring from checkpoint.resume_from as every rank does); a later one
// joins running members, which heal it with their state.
//
// The loop runs until the global cursor (samples committed,
// worker/global_cursor.h) reaches max_steps * num_processes * batch_size *
// gradient_accumulation_steps; the learning-rate schedule follows the
// cursor (the step of a fault-free run), and the trainer's step counts the
// steps this replica holds committed. A step whose collective fails is
// dropped (committed when its optimizer step was applied), the rank reports
// GROUP_BROKEN and waits for a newer membership, then heals; a membership
// that leaves the rank out ends the loop as stopped (LEFT). Each step's
// agreement carries the newest epoch offered to any rank: every member
// switches to it after the same step.
//
// FSDP commits in two phases: a rank's gradients complete its shard only (a
// member can finish its synchronization while another fails), so the
// optimizer step waits for a collective over the members that each enters
// only once its own synchronization succeeded: whoever sees it complete
// applies the step. A rank whose collective failed holds its step pending
// (the learning rate and whether the gradients were finite) until the next
// membership tells whether any member applied it (Settle).
#ifndef TRAINYARD_WORKER_REPLICAS_REPLICA_SESSION_H_
#define TRAINYARD_WORKER_REPLICAS_REPLICA_SESSION_H_

#include <memory>
#include <optional>
#include <string>

#include "common/job_spec.h"
#include "worker/replicas/replica_membership.h"
#include "worker/train/step_guard.h"

namespace trainyard {

class ReplicaSession final : public StepGuard {
 public:
  // `mailbox` (the memberships the control stream offers this rank) must
  // outlive the session. `dist` gives only the device, the snapshot
  // directory and the flight recorder. Throws std::invalid_argument unless
  // the spec asks for replicas over DDP or FSDP.
  ReplicaSession(const JobSpec& spec, ReplicaOptions options, MembershipMailbox* mailbox, DistContext dist);
  ~ReplicaSession() override;

  TrainerSeat Seat() override;
  void Start(TrainerParts* parts) override;
  bool Next() override;
  void BeforeApply(double lr, bool finite) override;
  void Commit(int64_t agreed) override;
  bool Recover(const std::exception& e) override;
  int64_t Position() const override;
  int64_t Proposal() const override;
  bool left() const override { return left_; }
  void Finish() override;

 private:
  // Trains in `g`'s groups from now on, and heals with its members
  // (collective).
  void Bind(const ReplicaGroup& g);
  void Heal();
  // Drops every reference to the current groups.
  void Unbind();
  // FSDP, collective over the new epoch's world group: a pending step is
  // applied when a member committed it, else dropped.
  void Settle();
  // A collective failed: the step in flight dropped (or committed, when
  // applied), then the next membership joined and healed.
  void OnGroupBroken(const std::string& detail);
  // Joins `g` (null: left), handling groups that break while forming.
  void Enter(const ReplicaGroup* g);
  int64_t SamplesPerStep() const;

  struct Pending {
    double lr = 0;
    bool finite = true;
    int64_t epoch = 0;  // the membership whose members may have applied it
  };

  const JobSpec spec_;
  DistContext given_;
  MembershipMailbox* mailbox_;
  ReplicaMembership membership_;
  TrainerParts* parts_ = nullptr;
  bool applied_ = false;      // the step in flight applied its optimizer step
  int64_t agreed_epoch_ = 0;  // at the last boundary
  std::optional<Pending> pending_;
  bool fresh_replacement_ = false;  // committed step -1 until healed
  bool left_ = false;
};

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_REPLICAS_REPLICA_SESSION_H_
