// A rank's distributed topology: the rendezvous store, the world process
// group (Gloo for host tensors, NCCL or Gloo for CUDA tensors), the
// shared-memory gradient path among ranks of one host, and FSDP's shard and
// replicate groups — everything the Trainer takes as its DistContext.
//
// The worker calls SetUpDistributed; tests and benchmarks that run ranks as
// threads (their own store) call SetUpGroups. Collective: every rank of the
// world calls it with the same spec.
#ifndef TRAINYARD_WORKER_COLLECTIVES_DIST_SETUP_H_
#define TRAINYARD_WORKER_COLLECTIVES_DIST_SETUP_H_

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "common/job_spec.h"
#include "worker/collectives/collectives.h"
#include "worker/collectives/direct_collectives.h"
#include "worker/collectives/dist_context.h"
#include "worker/collectives/process_group.h"
#include "worker/collectives/shm_collectives.h"

namespace trainyard {

struct DistSetup {
  c10::intrusive_ptr<c10d::Store> store;          // null when world size is 1
  c10::intrusive_ptr<c10d::ProcessGroup> world;   // null when world size is 1
  std::unique_ptr<DirectCollectives> shm;         // DDP's shared-memory path, when chosen
  std::unique_ptr<Collectives> shard, replicate;  // FSDP, by sharding strategy
  // FSDP with asynchronous checkpoints: the writer threads' Gloo group for
  // assembling FULL checkpoints (TrainingState::checkpoint_group).
  c10::intrusive_ptr<c10d::ProcessGroup> checkpoint;
  // The per-step agreement (worker/step_control.h), when DDP's shared
  // memory does not carry it: shared memory of its own when every rank is
  // on this host, else a Gloo group of its own (its own threads and
  // connections, so the small exchange never queues with the gradients').
  std::unique_ptr<ShmCollectives> control_shm;
  c10::intrusive_ptr<c10d::ProcessGroup> control;
  std::optional<c10::Device> device;   // unset: RankDevice(spec.device)
  FlightRecorder* recorder = nullptr;  // records every group's collectives; not owned

  // Borrows this setup's groups: keep the setup alive while it is used.
  DistContext context() const;
};

// Rendezvous at options.master_addr:master_port, then every group. World
// size 1: an empty setup. With a `recorder` (which must outlive the setup),
// every group's collectives are recorded in it.
DistSetup SetUpDistributed(const JobSpec& spec, const RendezvousOptions& options, FlightRecorder* recorder = nullptr);

// Every group over an existing store (world size > 1).
DistSetup SetUpGroups(const JobSpec& spec, const c10::intrusive_ptr<c10d::Store>& store, int32_t rank,
                      int32_t world_size, const std::string& bind_addr, std::chrono::milliseconds timeout,
                      FlightRecorder* recorder = nullptr);

// Whether the spec lets DDP's gradients travel through shared memory (DDP,
// CPU, plain fp32: no comm hook, intra_host_transport not process_group)
// when every rank is on one host.
bool SharedMemoryAllowed(const JobSpec& spec);

// The shared-memory gradient path when the spec allows it (collective over
// all ranks): ShmCollectives when every rank is on this host;
// NodeCollectives when the ranks are on several hosts, the same number ≥ 2
// of consecutive ranks on each (shared memory within a host, Gloo across);
// null otherwise. Throws std::invalid_argument when the spec demands shm and
// it cannot be had.
std::unique_ptr<DirectCollectives> MaybeSharedMemory(const JobSpec& spec, const c10::intrusive_ptr<c10d::Store>& store,
                                                     int32_t rank, int32_t world_size, const std::string& bind_addr,
                                                     std::chrono::milliseconds timeout,
                                                     FlightRecorder* recorder = nullptr);

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_COLLECTIVES_DIST_SETUP_H_
