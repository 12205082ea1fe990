// In-memory snapshots (checkpoint.snapshot_every_steps): every N steps each
// rank writes its share of the training state into the host's shared memory
// (SnapshotDir in common/paths.h: one directory per job and host), as a
// SHARDED checkpoint sealed like a disk one (staging, manifest last,
// rename), so a snapshot torn by a crash is never taken for a complete one.
// Snapshots are synchronous — a snapshot taken after step s is complete
// before step s+1 starts, so a crash loses at most every_steps steps — and
// their manifest lists sizes without checksums (reading the bytes back
// would cost more than it guards against in memory). Only the newest
// complete snapshot is kept: rank 0 removes the one before it on a thread
// of its own, off the step boundary, and waits for that before the next
// snapshot begins. A restarted group resumes from
// the newest snapshot when it is newer than the latest disk checkpoint and
// every rank can read it (ranks on other hosts cannot: they resume from
// disk).
#ifndef TRAINYARD_WORKER_CHECKPOINT_SNAPSHOTS_H_
#define TRAINYARD_WORKER_CHECKPOINT_SNAPSHOTS_H_

#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "common/step_metrics.h"
#include "worker/checkpoint/checkpoint.h"

namespace trainyard {

class Snapshots {
 public:
  // `dir` empty or `every_steps` 0: off.
  Snapshots(std::string dir, int64_t every_steps);
  ~Snapshots();
  Snapshots(const Snapshots&) = delete;
  Snapshots& operator=(const Snapshots&) = delete;

  bool enabled() const { return !dir_.empty() && every_steps_ > 0; }
  const std::string& dir() const { return dir_; }
  bool Due(int64_t step) const { return enabled() && step % every_steps_ == 0; }

  // Collective (every rank after the same step): checks that shared memory
  // has room on every rank (else skips, saying so), then saves. Never
  // throws for I/O trouble; returns the event (ok false with the reason).
  CheckpointEvent Take(const TrainingState& state, int64_t index, const std::string& staging_tag);

  // Whether the directory, if there is one, is this account's alone
  // (common/paths.h IsOwnDirectory): else nothing in it is used.
  absl::Status Usable() const;
  // The newest complete snapshot (checksums verified), or "" when there is
  // none or the directory is not Usable; what was skipped and why goes to
  // `notes`.
  std::string Newest(std::vector<std::string>* notes) const;
  // Removes every snapshot of the job on this host.
  void RemoveAll();

 private:
  // Waits for the removal of older snapshots, if one runs.
  void WaitForPruning();

  std::string dir_;
  int64_t every_steps_;
  std::thread pruning_;  // rank 0: removing the snapshots older than the newest
};

// Bytes this rank writes into a SHARDED snapshot of `state`, estimated
// from what it holds.
int64_t SnapshotBytesEstimate(const TrainingState& state);

// Bytes free for an unprivileged writer on the file system holding `path`
// (or its nearest existing parent); -1 when unknown.
int64_t FreeBytes(const std::string& path);

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_CHECKPOINT_SNAPSHOTS_H_
