// Rendezvous and process-group creation. The backend is chosen by device in
// one place (MakeProcessGroup): Gloo for CPU, NCCL for CUDA (compiled only in
// CUDA builds of LibTorch, with TRAINYARD_WITH_NCCL).
#ifndef TRAINYARD_WORKER_PROCESS_GROUP_H_
#define TRAINYARD_WORKER_PROCESS_GROUP_H_

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <string>

#include "common/job_spec.h"

namespace trainyard {

struct RendezvousOptions {
  std::string master_addr = "127.0.0.1";  // rank 0 hosts the TCPStore here
  int master_port = 29500;
  int32_t rank = 0;
  int32_t world_size = 1;
  // Address this rank's Gloo transport binds to and advertises to peers.
  std::string bind_addr = "127.0.0.1";
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
};

// The TCPStore every rank connects to (rank 0 serves it).
c10::intrusive_ptr<c10d::Store> ConnectStore(const RendezvousOptions& options);

// The one switch from device to collective backend.
c10::intrusive_ptr<c10d::ProcessGroup> MakeProcessGroup(Device device, const c10::intrusive_ptr<c10d::Store>& store,
                                                        int32_t rank, int32_t world_size, const std::string& bind_addr,
                                                        std::chrono::milliseconds timeout);

#ifdef TRAINYARD_WITH_NCCL
// Defined in process_group_nccl.cc, which only CUDA builds compile.
c10::intrusive_ptr<c10d::ProcessGroup> MakeNcclProcessGroup(const c10::intrusive_ptr<c10d::Store>& store,
                                                            int32_t rank, int32_t world_size,
                                                            std::chrono::milliseconds timeout);
#endif

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_PROCESS_GROUP_H_
