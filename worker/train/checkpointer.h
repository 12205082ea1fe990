// Checkpointer: one rank's checkpoints, for the Trainer — the agreement of
// every rank on their numbering and on where the run resumes from (rank 0
// decides: its latest complete checkpoint, or a newer in-memory snapshot
// every rank can see; without either, the job's initial weights), periodic
// and requested saves (written in the background with checkpoint.async),
// synchronous saves (final, cancel, preemption), in-memory snapshots, and
// each outcome reported to the MetricsSink by rank 0 — and when to take
// them: at each step boundary (AtStepBoundary), what every rank agreed on
// (preemption, a request, a cancel with a checkpoint) and what is due
// (checkpoint.every_steps, checkpoint.snapshot_every_steps).
//
// Methods marked collective must be called by every rank at the same step
// boundary. Runs on the training thread; not thread-safe.
#ifndef TRAINYARD_WORKER_TRAIN_CHECKPOINTER_H_
#define TRAINYARD_WORKER_TRAIN_CHECKPOINTER_H_

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "common/step_metrics.h"
#include "worker/checkpoint/background_checkpoint.h"
#include "worker/checkpoint/checkpoint.h"
#include "worker/train/step_control.h"

namespace trainyard {

class FlightRecorder;
class Snapshots;

class Checkpointer {
 public:
  // `state` gives the rank's training state whenever a save or a load needs
  // it (the step included). `sink` may be null. `snapshot_dir` empty: no
  // in-memory snapshots. `flight` (may be null) is told the phase when a
  // boundary checkpoints or snapshots.
  Checkpointer(const JobSpec& spec, int32_t rank, c10::intrusive_ptr<c10d::ProcessGroup> pg,
               const std::string& snapshot_dir, MetricsSink* sink, std::function<TrainingState()> state,
               FlightRecorder* flight = nullptr);
  ~Checkpointer();
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // Collective, once before training: numbering and the resume source
  // agreed, then the state restored (into `state`'s model and optimizer);
  // returns the step to go on from (0 when starting fresh).
  int64_t AgreeAndRestore();
  // Restores from a checkpoint directory (every rank; reads only); later
  // saves are numbered after it.
  ResumeInfo Restore(const std::string& dir);
  // State registered here is saved with every checkpoint and restored on
  // resume; `state` must outlive the checkpointer.
  void Register(const std::string& name, Checkpointable* state);

  // The layout of periodic saves: checkpoint.type, else what the
  // distribution suggests (SHARDED for FSDP with SHARDED_STATE_DICT).
  CheckpointType PeriodicType() const;
  // This rank's part of the background save in flight, for the step's
  // agreement (worker/step_control.h), and that agreement's outcome.
  SaveProgress progress() const { return background_->progress(); }
  void Advance(bool all_written, int32_t failed_rank);

  // What a step boundary's checkpoints decided for the run.
  struct Boundary {
    bool stop = false;                  // the run ends here (agreed stop, cancel, preemption)
    bool preempted = false;             // after a preemption checkpoint
    std::string preemption_checkpoint;  // its path; empty when it failed
  };
  // Collective, after `step` (the steps done), with what every rank agreed
  // for this boundary: a preemption checkpoint (then stop), else a requested
  // one (synchronous when it ends the run: cancel with a checkpoint), else a
  // periodic one when every_steps divides `step`; then, when the run goes
  // on, an in-memory snapshot if one is due.
  Boundary AtStepBoundary(const StepAgreement& agreed, int64_t step);

  // Collective: a save now, synchronously, after the background one in
  // flight; kAuto: PeriodicType().
  CheckpointEvent Save(CheckpointType type, const std::string& trigger, int64_t request_id = 0);
  // Collective: a periodic or requested save, in the background with
  // checkpoint.async (else as Save).
  void Start(CheckpointType type, const std::string& trigger, int64_t request_id);
  // Collective: waits for the background save in flight, if any.
  void Drain();
  // Collective, after the last step: the FULL checkpoint of the final
  // weights (the last save when it was one of this step); its path.
  // Throws when it fails.
  std::string SaveFinal(int64_t step);

  // In-memory snapshots: whether one is due after `step`, and taking it
  // (collective). Rank 0 removes them all when the run ends (RemoveSnapshots).
  bool SnapshotDue(int64_t step) const;
  void Snapshot();
  void RemoveSnapshots();

  // Replica mode: saves go on as `rank` of `pg` (a new membership's group).
  // A background save in flight is abandoned (it never commits: its group
  // is gone). No collective.
  void Rebind(int32_t rank, c10::intrusive_ptr<c10d::ProcessGroup> pg);
  // Replica mode, after Rebind: every member takes group rank `src`'s
  // numbering of the next checkpoint and snapshot and its staging tag (a
  // replacement has none of its own). Collective.
  void AdoptNumbering(int32_t src);
  // The rank's training state with the registered state, as saves see it.
  TrainingState Current() const { return State(); }

  // What AgreeAndRestore restored from (empty: started fresh), and what
  // could not be restored exactly.
  const std::string& resumed_from() const { return resumed_from_; }
  const std::vector<std::string>& resume_notes() const { return resume_notes_; }

 private:
  // A save's outcome: remembered when it succeeded, reported by rank 0.
  void Report(const CheckpointEvent& event);
  TrainingState State() const;

  const JobSpec& spec_;
  int32_t rank_;
  c10::intrusive_ptr<c10d::ProcessGroup> pg_;
  MetricsSink* const sink_;
  const std::function<TrainingState()> state_;
  FlightRecorder* const flight_;
  std::map<std::string, Checkpointable*> extra_;
  std::unique_ptr<AsyncCheckpointer> background_;  // checkpoint.async
  std::unique_ptr<Snapshots> snapshots_;           // checkpoint.snapshot_every_steps
  // The next N of checkpoint_<N> and of snapshots, and the staging tag every
  // rank shares (rank 0's pid).
  int64_t next_index_ = 0;
  int64_t next_snapshot_ = 0;
  std::string staging_tag_;
  bool snapshot_failing_ = false;
  std::string resumed_from_;
  std::vector<std::string> resume_notes_;
  // The last successful save.
  int64_t last_step_ = -1;
  CheckpointType last_type_ = CheckpointType::kAuto;
  std::string last_path_;
};

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_TRAIN_CHECKPOINTER_H_
