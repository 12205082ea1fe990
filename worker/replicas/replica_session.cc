#include "worker/replicas/replica_session.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "common/log.h"
#include "worker/base/flight_recorder.h"
#include "worker/collectives/dist_setup.h"
#include "worker/train/trainer_parts.h"

namespace trainyard {
namespace {

ReplicaOptions ForSpec(const JobSpec& spec, ReplicaOptions options) {
  const bool fsdp = spec.distributed_type == DistributedType::kFsdp;
  if (!spec.replicas() || (spec.distributed_type != DistributedType::kDdp && !fsdp)) {
    throw std::invalid_argument("a replica trainer needs fault_tolerance.mode replica and DDP or FSDP");
  }
  options.shared_memory = SharedMemoryAllowed(spec);
  options.fsdp_unit = fsdp ? spec.ranks_per_replica() : 0;
  return options;
}

std::string Detail(const std::exception& e) {
  const auto* ce = dynamic_cast<const c10::Error*>(&e);
  return ce != nullptr ? ce->what_without_backtrace() : e.what();
}

}  // namespace

ReplicaSession::ReplicaSession(const JobSpec& spec, ReplicaOptions options, MembershipMailbox* mailbox,
                               DistContext dist)
    : spec_(spec),
      given_(std::move(dist)),
      mailbox_(mailbox),
      membership_(ForSpec(spec, std::move(options)), mailbox, given_.flight_recorder) {
  if (mailbox == nullptr) throw std::invalid_argument("a replica trainer needs a mailbox for its memberships");
}

ReplicaSession::~ReplicaSession() = default;

TrainerSeat ReplicaSession::Seat() {
  const ReplicaGroup& g = membership_.JoinFirst();
  TrainerSeat seat;
  seat.dist = g.context();
  seat.dist.device = given_.device;
  seat.dist.snapshot_dir = given_.snapshot_dir;
  seat.dist.flight_recorder = given_.flight_recorder;
  seat.rank = g.rank();
  seat.world_size = g.size();
  // A replica's held-out share is its launch rank's; its training batches
  // the global cursor's.
  seat.data_rank = membership_.launch_rank();
  seat.data_world = spec_.num_processes;
  // Epoch 1 starts the job on every rank; a later one joins running members.
  fresh_replacement_ = g.membership().epoch > 1;
  return seat;
}

void ReplicaSession::Start(TrainerParts* parts) {
  parts_ = parts;
  parts_->data.train->UseGlobalCursor(spec_.max_steps * SamplesPerStep());
  parts_->data.train->SetMembers(parts_->rank, parts_->world_size);
  if (!fresh_replacement_) parts_->step = parts_->checkpoints->AgreeAndRestore();
  Heal();
}

int64_t ReplicaSession::SamplesPerStep() const {
  return int64_t{spec_.num_processes} * spec_.data.batch_size * spec_.gradient_accumulation_steps;
}

int64_t ReplicaSession::Position() const { return parts_->data.train->cursor() / SamplesPerStep(); }

int64_t ReplicaSession::Proposal() const { return mailbox_->latest_epoch(); }

bool ReplicaSession::Next() {
  if (!left_ && membership_.Pending(agreed_epoch_)) {
    // Every member switches after the same step: the agreed epoch.
    try {
      Unbind();
      Enter(membership_.JoinAgreed(agreed_epoch_, parts_->step));
    } catch (const std::exception& e) {
      if (!IsGroupFailure(e)) throw;
      OnGroupBroken(Detail(e));
    }
  }
  return !left_ && Position() < spec_.max_steps;
}

void ReplicaSession::BeforeApply(double lr, bool finite) {
  if (parts_->model->fsdp() != nullptr) {
    // The two-phase commit: applied once every member says its
    // synchronization succeeded.
    pending_ = Pending{lr, finite, membership_.epoch()};
    SetPhase(parts_->flight, "all synchronized", parts_->step);
    at::Tensor done = at::ones({1}, at::kFloat);
    std::vector<at::Tensor> v = {done};
    parts_->pg->allreduce(v)->wait();
    pending_.reset();
  }
  applied_ = true;
}

void ReplicaSession::Commit(int64_t agreed) {
  agreed_epoch_ = agreed;
  applied_ = false;
  TrainerParts& p = *parts_;
  p.data.train->CommitReads();
  membership_.Committed(p.step, p.data.train->cursor(), p.data.train->committed_positions(), p.model->Parameters());
}

bool ReplicaSession::Recover(const std::exception& e) {
  if (!IsGroupFailure(e)) return false;
  OnGroupBroken(Detail(e));
  return true;
}

void ReplicaSession::Bind(const ReplicaGroup& g) {
  parts_->Rebind(g.context(), g.rank(), g.size());
  // The loader's members change in Heal, once a pending step is settled
  // (SetMembers drops the reads of a step not committed).
}

void ReplicaSession::Settle() {
  TrainerParts& p = *parts_;
  if (p.model->fsdp() == nullptr) return;
  const int32_t size = p.pg->getSize();
  at::Tensor mine = at::tensor({fresh_replacement_ ? int64_t{-1} : p.step}, at::kLong);
  std::vector<at::Tensor> all(static_cast<size_t>(size));
  for (at::Tensor& t : all) t = at::empty({1}, at::kLong);
  std::vector<std::vector<at::Tensor>> out = {all};
  std::vector<at::Tensor> in = {mine};
  p.pg->allgather(out, in)->wait();
  if (!pending_) return;
  int64_t highest = -1;
  for (const at::Tensor& t : out[0]) highest = std::max(highest, t.item<int64_t>());
  const Pending pending = *pending_;
  pending_.reset();
  if (highest == p.step + 1) {
    // A member applied it: every member's gradients were complete.
    p.Apply(pending.lr, pending.finite, nullptr);
    ++p.step;
    p.data.train->CommitReads();
    membership_.CommittedEarlier(pending.epoch, p.step, p.data.train->cursor(), p.data.train->committed_positions(),
                                 p.model->Parameters());
    log::Info("rank {}: applied step {}, whose agreement it missed: a member committed it", membership_.launch_rank(),
              p.step);
  } else {
    p.data.train->RollbackReads();
    p.model->ReleaseGradients();
  }
}

void ReplicaSession::Heal() {
  TrainerParts& p = *parts_;
  SetPhase(p.flight, "heal", p.step);
  Settle();
  p.data.train->SetMembers(p.rank, p.world_size);
  // Over the ranks that hold this rank's state (FSDP: its shard in every
  // replica); they all agree on the same step and cursor, since a replica's
  // ranks come and go together.
  const ReplicaGroup& g = *membership_.group();
  const HealResult r = trainyard::Heal(p.checkpoints->Current(), g.heal_group(), fresh_replacement_ ? -1 : p.step,
                                       p.data.train->cursor());
  fresh_replacement_ = false;
  p.checkpoints->AdoptNumbering(g.SourceInWorld(r.source));
  p.step = r.step;
  p.data.train->SetCursor(r.cursor);
  membership_.Healed(r);
}

void ReplicaSession::Unbind() {
  parts_->Unbind();
  membership_.Drop();
}

void ReplicaSession::Enter(const ReplicaGroup* g) {
  while (g != nullptr) {
    try {
      Bind(*g);
      Heal();
      return;
    } catch (const std::exception& e) {
      if (!IsGroupFailure(e)) throw;
      Unbind();
      g = membership_.JoinNewer(e.what(), parts_->step);
    }
  }
  left_ = true;
}

void ReplicaSession::OnGroupBroken(const std::string& detail) {
  TrainerParts& p = *parts_;
  // A step whose optimizer step was applied had its gradients from every
  // member: it is committed. Otherwise it never happened here.
  if (applied_) {
    ++p.step;
    Commit(agreed_epoch_);
  }
  if (!pending_) {  // a pending step is settled by the next membership
    p.data.train->RollbackReads();
    p.model->ReleaseGradients();
  }
  Unbind();
  // JoinNewer forms the next membership's groups, and the one after when
  // those break while forming.
  Enter(membership_.JoinNewer(detail, p.step));
}

void ReplicaSession::Finish() {
  if (left_) return;
  // Nobody tears down the group under a member still finishing; a member
  // lost now loses nothing.
  try {
    parts_->pg->barrier()->wait();
  } catch (const std::exception& e) {
    if (!IsGroupFailure(e)) throw;
  }
}

}  // namespace trainyard
