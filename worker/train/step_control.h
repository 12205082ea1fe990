// StepControl: the per-step agreement of all ranks. At the start of each
// step a rank puts what it was asked (stop, preemption, a checkpoint
// request from the coordinator, and what the fault-tolerance mode proposes:
// worker/step_guard.h) into a small control word; the ranks
// reduce it with MAX while the step computes, and at the step's end every
// rank reads the same agreement, so a request seen by one rank takes effect
// on every rank after the same step. The exchange runs through shared
// memory when every rank is on one host (DDP's, or its own: a barrier at
// the step's end), else over a Gloo group of its own
// (DistContext::control_group: on the training group it queued with the
// gradients' collectives); with one rank it is local.
#ifndef TRAINYARD_WORKER_TRAIN_STEP_CONTROL_H_
#define TRAINYARD_WORKER_TRAIN_STEP_CONTROL_H_

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <cstdint>
#include <optional>

#include "common/checkpoint_type.h"
#include "worker/checkpoint/background_checkpoint.h"
#include "worker/control/control.h"

namespace trainyard {

class DirectCollectives;

// Where the ranks stand with a background save (AsyncCheckpointer): no rank
// was still writing its files, and the lowest rank whose write failed (-1).
struct SaveAgreement {
  bool written = true;
  int32_t failed_rank = -1;
};

// What every rank agreed on for this step's boundary.
struct StepAgreement {
  bool stop = false;
  bool preempt = false;                      // checkpoint, then stop
  std::optional<CheckpointType> checkpoint;  // a requested one: kFull or kSharded
  int64_t request_id = 0;                    // of that request
  bool stop_after = false;                   // stop after that checkpoint
  SaveAgreement save;                        // the background checkpoint in flight
  int64_t proposal = 0;                      // the highest StepGuard::Proposal() of any rank
};

class StepControl {
 public:
  // `pg` may be null (one rank), `shm` null (no shared memory), `control`
  // null (nothing asks from outside).
  StepControl(c10::intrusive_ptr<c10d::ProcessGroup> pg, DirectCollectives* shm, TrainerControl* control);

  // Takes this rank's requests and starts the exchange. `periodic` is the
  // job's own checkpoint type, which an "auto" request resolves to; `save`
  // where this rank's background checkpoint stands; `proposal` what the
  // fault-tolerance mode proposes (StepGuard::Proposal).
  void Start(CheckpointType periodic, SaveProgress save = SaveProgress::kNone, int64_t proposal = 0);
  // Waits for the exchange; call once after each Start.
  StepAgreement Finish();

 private:
  c10::intrusive_ptr<c10d::ProcessGroup> pg_;
  DirectCollectives* shm_;
  TrainerControl* control_;
  int32_t rank_ = 0;
  int32_t world_size_ = 1;
  at::Tensor word_;
  c10::intrusive_ptr<c10d::Work> work_;
};

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_TRAIN_STEP_CONTROL_H_
