// StepGuard: how a fault-tolerance mode (spec.fault_tolerance.mode) meets
// the Trainer's loop. The loop asks it where to train before it is built
// (Seat), lets it bring the state to where the job continues (Start), and
// then meets it at two points of every step: before the step (Next: join
// what the ranks agreed at the last boundary, and whether to step again)
// and after it (Commit once the ranks agreed on the boundary, or Recover
// from a step that threw). Between the gradients and the optimizer step it
// may hold the step back (BeforeApply: a two-phase commit).
//
// Whole-group jobs (mode restart, and jobs without fault tolerance) get
// WholeGroupGuard: the launch's own group, the resume checkpoint, and every
// failure fatal. fault_tolerance.mode replica: worker/replicas/. A guard is
// used on the training thread only.
#ifndef TRAINYARD_WORKER_TRAIN_STEP_GUARD_H_
#define TRAINYARD_WORKER_TRAIN_STEP_GUARD_H_

#include <cstdint>
#include <exception>
#include <memory>

#include "worker/collectives/dist_context.h"

namespace trainyard {

struct TrainerParts;

// Where a rank trains: its groups, its rank and their size in them, and the
// share of the held-out data it evaluates (its launch rank's).
struct TrainerSeat {
  DistContext dist;
  int32_t rank = 0;
  int32_t world_size = 1;
  int32_t data_rank = 0;
  int32_t data_world = 1;
};

class StepGuard {
 public:
  virtual ~StepGuard() = default;

  // Before the trainer's parts are built: the groups they are built on.
  virtual TrainerSeat Seat() = 0;
  // Once built: brings `parts` (which outlive the guard's use of them) to
  // the state the job continues from: the resume checkpoint, or the state
  // of running members. Collective.
  virtual void Start(TrainerParts* parts) = 0;

  // Before each step: joins what the ranks agreed at the last boundary.
  // Whether to take another step (false: the job's samples are trained, or
  // this rank left the job).
  virtual bool Next() = 0;
  // Between the gradients and the optimizer step (learning rate `lr`,
  // gradients `finite`): returns once the step may be applied.
  virtual void BeforeApply(double /*lr*/, bool /*finite*/) {}
  // The ranks agreed on the step's boundary (`agreed`: the MAX of their
  // Proposal()): the step is committed.
  virtual void Commit(int64_t /*agreed*/) {}
  // A step threw `e`: true when the guard took care of it (the step was
  // dropped and the rank goes on), false when the trainer rethrows.
  virtual bool Recover(const std::exception& /*e*/) { return false; }

  // The step of a fault-free run the loop stands at: the learning-rate
  // schedule and evaluation follow it.
  virtual int64_t Position() const = 0;
  // What this rank puts into each step's agreement.
  virtual int64_t Proposal() const { return 0; }
  // This rank left the job: its loop ends as stopped, and it does not
  // remove the job's snapshots (others still train).
  virtual bool left() const { return false; }
  // After the loop, when every rank is past its last snapshot.
  virtual void Finish() {}
};

// The launch's group (`dist`: rank `rank` of `world_size`), restored from
// checkpoint.resume_from; a failed step ends the rank.
std::unique_ptr<StepGuard> MakeWholeGroupGuard(int32_t rank, int32_t world_size, DistContext dist);

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_TRAIN_STEP_GUARD_H_
