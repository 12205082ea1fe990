// Rendezvous and process-group creation: the one place where a job's
// backend becomes a c10d::ProcessGroup.
//
// A group always has a Gloo backend for CPU tensors (the per-step control
// word, agreement flags, checkpoint metadata), as torch.distributed's
// "cpu:gloo,cuda:nccl" groups do. With Backend::kNccl, CUDA tensors go to
// NCCL and NCCL is the default backend; with Backend::kGloo, Gloo carries
// CUDA tensors too (through host memory). c10d dispatches each collective to
// the backend registered for its tensors' device.
#ifndef TRAINYARD_WORKER_COLLECTIVES_PROCESS_GROUP_H_
#define TRAINYARD_WORKER_COLLECTIVES_PROCESS_GROUP_H_

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <string>

#include "common/job_spec.h"

namespace trainyard {

class FlightRecorder;

struct RendezvousOptions {
  std::string master_addr = "127.0.0.1";  // rank 0 hosts the TCPStore here
  int master_port = 29500;
  int32_t rank = 0;
  int32_t world_size = 1;
  // Address this rank's Gloo transport binds to and advertises to peers.
  std::string bind_addr = "127.0.0.1";
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  // The attempt's secret (RendezvousSecret): when set, every value of the
  // store is signed with it and checked on reading (worker/signed_store.h).
  std::string secret;
};

// The TCPStore every rank connects to (rank 0 serves it).
c10::intrusive_ptr<c10d::Store> ConnectStore(const RendezvousOptions& options);

// `backend` must be resolved (EffectiveBackend): kGloo or kNccl. kNccl
// needs a CUDA build and the rank's GPU selected (UseDevice) first; it
// throws std::runtime_error otherwise. With a `recorder` (which must
// outlive the group), every collective is recorded in it under `group_name`
// (worker/recording_backend.h).
c10::intrusive_ptr<c10d::ProcessGroup> MakeProcessGroup(Backend backend, const c10::intrusive_ptr<c10d::Store>& store,
                                                        int32_t rank, int32_t world_size, const std::string& bind_addr,
                                                        std::chrono::milliseconds timeout,
                                                        FlightRecorder* recorder = nullptr,
                                                        const std::string& group_name = "world");

// True when `group` sends CUDA tensors through NCCL.
bool UsesNccl(const c10d::ProcessGroup& group);

#ifdef TRAINYARD_WITH_CUDA
// Defined in process_group_nccl.cc, compiled in every CUDA build.
c10::intrusive_ptr<c10d::Backend> MakeNcclBackend(const c10::intrusive_ptr<c10d::Store>& store, int32_t rank,
                                                  int32_t world_size, std::chrono::milliseconds timeout);
#endif

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_COLLECTIVES_PROCESS_GROUP_H_
