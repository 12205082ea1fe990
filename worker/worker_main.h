// RunWorker: the whole life of one trainyard-worker process — connect to the
// coordinator, rendezvous, train, report. Returns the process exit code.
#ifndef TRAINYARD_WORKER_WORKER_MAIN_H_
#define TRAINYARD_WORKER_WORKER_MAIN_H_

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "worker/collectives.h"

#include <chrono>
#include <memory>
#include <string>

namespace trainyard {

// Exit codes of trainyard-worker.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitStopped = 3;  // stopped on request (SIGINT or stop command)
inline constexpr int kExitPreempted = 4;  // checkpointed, then stopped on preemption (SIGTERM)

struct WorkerArgs {
  std::string server;
  std::string job_id;
  int32_t rank = 0;
  int32_t world_size = 0;  // 0: the coordinator's
  int32_t attempt = 1;     // 0: join the current attempt (--join)
  // Rendezvous: rank 0's store. Empty address: the coordinator's, else
  // the first node of the Slurm step, else MASTER_ADDR, else loopback.
  std::string master_addr;
  int master_port = 0;     // 0: the coordinator's; rank 0 joining: a free one
  // Address this rank's collectives bind to and peers reach it at; empty:
  // the local address toward the rendezvous host.
  std::string bind_addr;
  // Rank 0 joining: the address other ranks reach its store at; empty: the
  // local address toward the coordinator.
  std::string advertise_addr;
  // Joining: how long to wait for the job to start and rank 0 to join.
  std::chrono::milliseconds join_timeout{std::chrono::minutes(10)};
  std::string token;
  int32_t threads = 0;  // 0: the spec's threads_per_process
  // TLS to the coordinator: the CA its certificate is checked against, and
  // for mutual TLS this worker's certificate and key (PEM files).
  std::string coordinator_ca, tls_cert, tls_key;
};

int RunWorker(const WorkerArgs& args);

// Keeps freed tensor memory in the process for reuse (glibc: large blocks
// from the heap rather than mmap, no trimming below 512 MiB free). Without
// it every step maps and unmaps its activations and pays the page faults
// again — 15-20% of a small convolutional model's step on CPU. Call once,
// first thing.
void TuneAllocator();

// The shared-memory gradient path when the spec allows it and every rank is
// on this host (collective over all ranks); null otherwise.
class ShmCollectives;
struct JobSpec;
// FSDP's shard and replicate groups for the job's sharding strategy.
class Collectives;
struct FsdpGroups {
  std::unique_ptr<Collectives> shard;
  std::unique_ptr<Collectives> replicate;
};
FsdpGroups MakeFsdpGroups(const JobSpec& spec, const c10::intrusive_ptr<c10d::Store>& store,
                          const c10::intrusive_ptr<c10d::ProcessGroup>& world, int32_t rank, int32_t world_size,
                          const std::string& bind_addr, std::chrono::milliseconds timeout);

std::unique_ptr<ShmCollectives> MaybeSharedMemory(const JobSpec& spec, const c10::intrusive_ptr<c10d::Store>& store,
                                                  int32_t rank, int32_t world_size);

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_WORKER_MAIN_H_
