// NodeCollectives: DirectCollectives for ranks on several hosts — shared
// memory among the ranks of a host, a process group across hosts — as
// NCCL does within and between nodes.
//
// Layout: `ranks_per_node` consecutive ranks per host (node k holds ranks
// [k * ranks_per_node, (k + 1) * ranks_per_node)), as Slurm's block
// distribution and torchrun place them. An allreduce sums within the host
// (ShmCollectives), then local rank i sums the i-th slice of that across
// hosts with the ranks of local rank i on the other hosts (a Gloo group of
// its own, one per local rank, so the hosts' links carry each slice once
// and every local rank works in parallel), then the host's ranks copy each
// other's slices through shared memory. Every rank ends with the same bits.
#ifndef TRAINYARD_WORKER_COLLECTIVES_NODE_COLLECTIVES_H_
#define TRAINYARD_WORKER_COLLECTIVES_NODE_COLLECTIVES_H_

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "worker/collectives/direct_collectives.h"

namespace trainyard {

class FlightRecorder;
class ShmCollectives;

class NodeCollectives final : public DirectCollectives {
 public:
  // Collective over all ranks. `ranks_per_node` must divide `world_size`,
  // be ≥ 1, and the ranks of one node must share a host (checked: an
  // std::invalid_argument otherwise). The cross-host groups' collectives are
  // recorded in `recorder` (may be null; must outlive this) as groups
  // "cross/<local rank>", the shared memory's as "shm".
  static std::unique_ptr<NodeCollectives> Create(const c10::intrusive_ptr<c10d::Store>& store, int32_t rank,
                                                 int32_t world_size, int32_t ranks_per_node,
                                                 const std::string& bind_addr, std::chrono::milliseconds timeout,
                                                 FlightRecorder* recorder = nullptr);

  // The ranks per host when `host_of_rank` (ShmCollectives::HostOfEachRank)
  // puts the same number ≥ 2 of consecutive ranks on each of ≥ 2 hosts; 0
  // otherwise (one host, one rank per host, or an uneven or interleaved
  // placement).
  static int32_t UniformRanksPerHost(const std::vector<int32_t>& host_of_rank);

  ~NodeCollectives() override;

  void AllreduceSum(at::Tensor& tensor, float divisor = 1.0f) override;
  void Broadcast(void* data, size_t bytes, int32_t root) override;
  void AllreduceMax(int64_t* values, int n) override;
  bool ReserveResident(size_t bytes_per_rank) override;
  void* own_resident() const override;
  const std::string& resident_error() const override;
  c10::DataPtr ResidentDataPtr(void* data) const override;
  int32_t rank() const override { return rank_; }
  int32_t world_size() const override { return world_; }

  int32_t nodes() const { return world_ / per_node_; }
  int32_t ranks_per_node() const { return per_node_; }

 private:
  NodeCollectives(int32_t rank, int32_t world, int32_t per_node, std::unique_ptr<ShmCollectives> local,
                  c10::intrusive_ptr<c10d::ProcessGroup> cross);

  int32_t rank_, world_, per_node_;
  std::unique_ptr<ShmCollectives> local_;         // this host's ranks
  c10::intrusive_ptr<c10d::ProcessGroup> cross_;  // this local rank on every host
};

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_COLLECTIVES_NODE_COLLECTIVES_H_
