// DistributedDataParallel: PyTorch's own c10d::Reducer around a module's
// parameters — bucketing, gradient allreduce overlapped with backward,
// averaging — driven explicitly by the training loop. Not thread-safe: used
// from the training thread only.
#ifndef TRAINYARD_WORKER_PARALLEL_DDP_H_
#define TRAINYARD_WORKER_PARALLEL_DDP_H_

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <memory>
#include <vector>

#include "common/job_spec.h"
#include "worker/parallel/comm_hooks.h"

namespace trainyard {

class DirectCollectives;

class DistributedDataParallel {
 public:
  // Broadcasts rank 0's parameters and buffers to every rank (unless
  // `broadcast_initial` is false: replica mode, where the ranks agree on the
  // state themselves), then builds the Reducer's buckets (reverse parameter
  // order, as Python DDP does).
  // `params`: every parameter; those without requires_grad are skipped.
  // With `shm`, gradient buckets are averaged through it (shared memory on
  // one host, or within each host and across hosts) instead of the process
  // group; `shm` must outlive this.
  DistributedDataParallel(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& buffers,
                          c10::intrusive_ptr<c10d::ProcessGroup> process_group, const DdpSpec& options,
                          DirectCollectives* shm = nullptr, bool broadcast_initial = true);
  ~DistributedDataParallel();

  // Call before every forward that synchronizes gradients.
  void PrepareForward();
  // Call before every forward: with ddp.broadcast_buffers (PyTorch's
  // default), rank 0's buffers (BatchNorm statistics) overwrite the others',
  // one coalesced broadcast per dtype. A no-op for models without buffers.
  void SyncBuffers();
  // Call after forward, before backward, on steps whose gradients must be
  // synchronized. Skipping it accumulates locally (no_sync).
  void PrepareBackward(const std::vector<at::Tensor>& outputs);
  // A replay of a captured step synchronized the gradients again without
  // the host code above: its traffic is counted (comm_stats()).
  void CountReplayedStep();

  size_t num_buckets() const;

  // Gradient-communication counters (cumulative).
  const CommStats& comm_stats() const;
  // The comm hook's state (empty without a stateful hook) — part of the
  // training state a checkpoint saves. Call between steps.
  std::map<std::string, at::Tensor> CommHookState() const;
  void LoadCommHookState(const std::map<std::string, at::Tensor>& state);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_PARALLEL_DDP_H_
