#include "worker/process_group.h"

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <stdexcept>

namespace trainyard {

c10::intrusive_ptr<c10d::Store> ConnectStore(const RendezvousOptions& o) {
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<uint16_t>(o.master_port);
  opts.isServer = o.rank == 0;
  opts.numWorkers = static_cast<size_t>(o.world_size);
  opts.waitWorkers = true;
  opts.timeout = o.timeout;
  return c10::make_intrusive<c10d::TCPStore>(o.master_addr, opts);
}

c10::intrusive_ptr<c10d::ProcessGroup> MakeProcessGroup(Device device, const c10::intrusive_ptr<c10d::Store>& store,
                                                        int32_t rank, int32_t world_size, const std::string& bind_addr,
                                                        std::chrono::milliseconds timeout) {
  switch (device) {
    case Device::kCpu: {
      auto options = c10d::ProcessGroupGloo::Options::create(timeout);
      options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(bind_addr));
      options->threads = 2;
      return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world_size, options);
    }
    case Device::kCuda:
#ifdef TRAINYARD_WITH_NCCL
      return MakeNcclProcessGroup(store, rank, world_size, timeout);
#else
      throw std::runtime_error("device cuda needs a CUDA build of trainyard-worker (NCCL); this one is CPU-only");
#endif
  }
  throw std::invalid_argument("unknown device");
}

}  // namespace trainyard
