// DataLoader: one rank's batches, optionally read ahead by worker threads.
#ifndef TRAINYARD_WORKER_DATA_LOADER_H_
#define TRAINYARD_WORKER_DATA_LOADER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "worker/data.h"
#include "worker/distributed_sampler.h"

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
};

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_DATA_LOADER_H_
