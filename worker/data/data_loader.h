// DataLoader: one rank's batches, optionally read ahead by worker threads.
#ifndef TRAINYARD_WORKER_DATA_DATA_LOADER_H_
#define TRAINYARD_WORKER_DATA_DATA_LOADER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "worker/data/data.h"
#include "worker/data/distributed_sampler.h"
#include "worker/data/global_cursor.h"

namespace trainyard {

// Yields this rank's batches epoch after epoch. With num_workers > 0, that
// many threads read and collate the next batches ahead of the training
// thread (at most max(prefetch_batches, num_workers) in flight), as
// torch.utils.data.DataLoader's workers do; the batches and their order are
// the same as without them. The dataset's Get must then be safe to call
// from several threads at once (every dataset here is). Next, Seek and the
// position are for one thread (the training thread).
class DataLoader {
 public:
  DataLoader(std::shared_ptr<const Dataset> dataset, DistributedSampler sampler, int64_t batch_size,
             int num_workers = 0, int prefetch_batches = 2);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Rethrows a worker's error (e.g. an unreadable file) for its batch.
  Batch Next();
  // The position after the last batch Next returned (what a checkpoint
  // saves), not the workers' read-ahead.
  int64_t epoch() const { return epoch_; }
  int64_t offset() const { return offset_; }  // next index within the epoch's shard
  void Seek(int64_t epoch, int64_t offset);

  // Replica mode (fault_tolerance.mode replica): from now on batches follow
  // a global cursor (worker/global_cursor.h) instead of this rank's shard,
  // read without worker threads, up to global position `limit` (the job's
  // samples: the last step's share may be smaller). A batch is member
  // `member`'s share of the members' next batch; the reads go ahead of the
  // committed cursor until CommitReads (the step committed: the cursor moves
  // past them) or RollbackReads (the step was dropped). epoch() and
  // offset() then tell the committed cursor as a checkpoint saves it
  // (offset per member: a cursor the members do not divide is rounded
  // down), and Seek sets it.
  void UseGlobalCursor(int64_t limit);
  bool global_cursor() const { return cursor_ != nullptr; }
  // Which share the next reads take; rolls the reads back.
  void SetMembers(int32_t member, int32_t members);
  int64_t cursor() const;  // committed
  void SetCursor(int64_t cursor);
  void CommitReads();
  void RollbackReads();
  // The global positions this member read in the step CommitReads last
  // committed (replica mode).
  const std::vector<int64_t>& committed_positions() const;

 private:
  // The batch after `*epoch`/`*offset` (a new epoch when the shard is used
  // up); advances them.
  struct Planned {
    int64_t epoch = 0, end = 0;
    std::vector<int64_t> indices;
  };
  Planned Plan(int64_t* epoch, int64_t* offset, std::vector<int64_t>* indices) const;
  void StartWorkers();
  void StopWorkers();
  void WorkerLoop();

  std::shared_ptr<const Dataset> dataset_;
  DistributedSampler sampler_;
  int64_t batch_size_;
  int64_t epoch_ = 0;
  int64_t offset_ = 0;
  std::vector<int64_t> indices_;  // the current epoch's shard

  struct Prefetch;  // the workers' state
  std::unique_ptr<Prefetch> prefetch_;

  struct Cursor;  // replica mode
  std::unique_ptr<Cursor> cursor_;
  Batch NextAtCursor();
};

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_DATA_DATA_LOADER_H_
