#include "worker/train/step_control.h"

#include <vector>

#include "worker/collectives/direct_collectives.h"

namespace trainyard {
namespace {

// Slots of the control word; kCheckpointSlot holds 0 none, 1 full, 2 sharded.
// kSaveSlot: a rank's background checkpoint write (Encode): 2 *
// world_size while it writes, world_size - rank when it failed (the MAX is
// then the lowest such rank), else 0.
enum ControlSlot : int64_t {
  kStopSlot = 0,
  kCheckpointSlot,
  kRequestSlot,
  kStopAfterSlot,
  kPreemptSlot,
  kSaveSlot,
  kProposalSlot,
  kSlots
};

int64_t Encode(SaveProgress p, int32_t rank, int32_t world) {
  if (p == SaveProgress::kWriting) return 2 * int64_t{world};
  if (p == SaveProgress::kFailed) return world - rank;
  return 0;
}

SaveAgreement Decode(int64_t v, int32_t world) {
  SaveAgreement a;
  a.written = v < 2 * int64_t{world};
  if (a.written && v > 0) a.failed_rank = static_cast<int32_t>(world - v);
  return a;
}

}  // namespace

StepControl::StepControl(c10::intrusive_ptr<c10d::ProcessGroup> pg, DirectCollectives* shm, TrainerControl* control)
    : pg_(std::move(pg)), shm_(shm), control_(control) {
  if (pg_) {
    rank_ = pg_->getRank();
    world_size_ = pg_->getSize();
  }
}

void StepControl::Start(CheckpointType periodic, SaveProgress save, int64_t proposal) {
  std::vector<int64_t> word(kSlots, 0);
  word[kSaveSlot] = Encode(save, rank_, world_size_);
  word[kProposalSlot] = proposal;
  if (control_ != nullptr) {
    word[kStopSlot] = control_->stop_requested() ? 1 : 0;
    word[kPreemptSlot] = control_->preemption_requested() ? 1 : 0;
    if (std::optional<CheckpointRequest> r = control_->TakeCheckpoint()) {
      const CheckpointType t = r->type == CheckpointType::kAuto ? periodic : r->type;
      word[kCheckpointSlot] = t == CheckpointType::kSharded ? 2 : 1;
      word[kRequestSlot] = r->request_id;
      word[kStopAfterSlot] = r->stop_after ? 1 : 0;
    }
  }
  word_ = at::tensor(word, at::kLong);
  // With shared memory the exchange is a barrier at the step's end (no
  // Gloo round trip and its threads' wake-ups on every step).
  if (!pg_ || shm_ != nullptr) return;
  std::vector<at::Tensor> t = {word_};
  c10d::AllreduceOptions opts;
  opts.reduceOp = c10d::ReduceOp::MAX;
  work_ = pg_->allreduce(t, opts);
}

StepAgreement StepControl::Finish() {
  if (shm_ != nullptr) {
    shm_->AllreduceMax(word_.data_ptr<int64_t>(), kSlots);
  } else if (work_) {
    work_->wait();
    work_.reset();
  }
  const int64_t* w = word_.data_ptr<int64_t>();
  StepAgreement a;
  a.stop = w[kStopSlot] != 0;
  a.preempt = w[kPreemptSlot] != 0;
  if (w[kCheckpointSlot] != 0)
    a.checkpoint = w[kCheckpointSlot] == 2 ? CheckpointType::kSharded : CheckpointType::kFull;
  a.request_id = w[kRequestSlot];
  a.stop_after = w[kStopAfterSlot] != 0;
  a.save = Decode(w[kSaveSlot], world_size_);
  a.proposal = w[kProposalSlot];
  return a;
}

}  // namespace trainyard
