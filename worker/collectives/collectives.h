// Collectives: the sharded-data collectives FSDP needs, over one process
// group, with the backend's gaps filled in one place.
//
// The Gloo implementation builds what Gloo lacked when it was written
// (LibTorch 1.13: no all-gather-into-tensor, no reduce-scatter, no bf16
// arithmetic) from collectives every release has: all-gather into chunk
// views; reduce-scatter as alltoall_base followed by a local sum (the same
// bytes as a real reduce-scatter); bf16 carried as bytes and summed in fp32.
// On NCCL the native _allgather_base / _reduce_scatter_base are used. Blocking calls; one calling thread per rank,
// and every rank must call in the same order.
#ifndef TRAINYARD_WORKER_COLLECTIVES_COLLECTIVES_H_
#define TRAINYARD_WORKER_COLLECTIVES_COLLECTIVES_H_

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <memory>
#include <string>

#include "common/job_spec.h"

namespace trainyard {

class FlightRecorder;

class Collectives {
 public:
  virtual ~Collectives() = default;
  virtual int32_t rank() const = 0;
  virtual int32_t size() const = 0;

  // full.numel() == size() * shard.numel(); afterwards full's r-th slice is
  // rank r's shard. Contiguous tensors of one dtype.
  virtual void AllGatherInto(at::Tensor& full, const at::Tensor& shard) = 0;
  // The same, started and returned at once: wait() on the result before
  // reading `full`. Both tensors must stay alive until then.
  virtual c10::intrusive_ptr<c10d::Work> AllGatherIntoAsync(at::Tensor& full, const at::Tensor& shard) = 0;
  // shard = sum over ranks of their full's rank()-th slice.
  virtual void ReduceScatterSum(at::Tensor& shard, const at::Tensor& full) = 0;
  virtual void AllreduceSum(at::Tensor& tensor) = 0;
  virtual void Broadcast(at::Tensor& tensor, int32_t root) = 0;
  virtual c10::intrusive_ptr<c10d::ProcessGroup> process_group() const = 0;
};

// Picks the implementation by the group's backend (gloo or nccl).
std::unique_ptr<Collectives> MakeCollectives(c10::intrusive_ptr<c10d::ProcessGroup> process_group);

// HYBRID sharding's two groups for this rank: `shard` = the ranks of its
// "node" (ranks [node*ranks_per_node, (node+1)*ranks_per_node)), `replicate`
// = the ranks with its local rank on every node. Collective over all ranks.
struct HybridGroups {
  std::unique_ptr<Collectives> shard;
  std::unique_ptr<Collectives> replicate;
};
// With a `recorder`, their collectives are recorded as groups "shard/<node>"
// and "replicate/<local rank>".
HybridGroups MakeHybridGroups(const c10::intrusive_ptr<c10d::Store>& store, Backend backend, int32_t rank,
                              int32_t world_size, int32_t ranks_per_node, const std::string& bind_addr,
                              std::chrono::milliseconds timeout, FlightRecorder* recorder = nullptr);

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_COLLECTIVES_COLLECTIVES_H_
