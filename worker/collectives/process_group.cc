#include "worker/collectives/process_group.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <stdexcept>

#include "common/listen_socket.h"
#include "common/log.h"
#include "worker/collectives/recording_backend.h"

namespace trainyard {

c10::intrusive_ptr<c10d::Store> ConnectStore(const RendezvousOptions& o) {
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<uint16_t>(o.master_port);
  opts.isServer = o.rank == 0;
  opts.numWorkers = static_cast<size_t>(o.world_size);
  opts.waitWorkers = true;
  opts.timeout = o.timeout;
  if (opts.isServer) {
    // Rank 0 serves the store on the address the others reach it by, not
    // on every address of its host.
    std::string error;
    const int fd = ListenOn(o.master_addr, o.master_port, &error);
    if (fd >= 0) {
      opts.masterListenFd = fd;
    } else {
      log::Warn("rank 0: {}; the rendezvous store listens on every address of this host", error);
    }
  }
  return c10::make_intrusive<c10d::TCPStore>(o.master_addr, opts);
}

c10::intrusive_ptr<c10d::ProcessGroup> MakeProcessGroup(Backend backend, const c10::intrusive_ptr<c10d::Store>& store,
                                                        int32_t rank, int32_t world_size, const std::string& bind_addr,
                                                        std::chrono::milliseconds timeout, FlightRecorder* recorder,
                                                        const std::string& group_name) {
  auto recorded = [&](c10::intrusive_ptr<c10d::Backend> b) {
    return recorder != nullptr ? MakeRecordingBackend(std::move(b), recorder, group_name) : b;
  };
  if (backend == Backend::kAuto) throw std::invalid_argument("MakeProcessGroup: resolve the backend first");
  auto group = c10::make_intrusive<c10d::ProcessGroup>(store, rank, world_size);
  // Each backend rendezvouses under its own prefix, as torch.distributed's do.
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(bind_addr));
  options->threads = 2;
  auto gloo = recorded(c10::make_intrusive<c10d::ProcessGroupGloo>(
      c10::make_intrusive<c10d::PrefixStore>("cpu/", store), rank, world_size, options));
  group->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::GLOO, gloo);
  if (backend == Backend::kGloo) {
    group->setBackend(c10::DeviceType::CUDA, c10d::ProcessGroup::BackendType::GLOO, gloo);
    group->setDefaultBackend(c10d::ProcessGroup::BackendType::GLOO);
    return group;
  }
#ifdef TRAINYARD_WITH_CUDA
  auto nccl =
      recorded(MakeNcclBackend(c10::make_intrusive<c10d::PrefixStore>("cuda/", store), rank, world_size, timeout));
  group->setBackend(c10::DeviceType::CUDA, c10d::ProcessGroup::BackendType::NCCL, nccl);
  group->setDefaultBackend(c10d::ProcessGroup::BackendType::NCCL);
  return group;
#else
  throw std::runtime_error(
      "backend nccl needs a CUDA build of trainyard-worker; this one was built on a CPU-only torch");
#endif
}

bool UsesNccl(const c10d::ProcessGroup& group) {
  return group.getBackendType() == c10d::ProcessGroup::BackendType::NCCL;
}

}  // namespace trainyard
