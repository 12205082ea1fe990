#include "worker/collectives/dist_setup.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "common/log.h"
#include "worker/collectives/node_collectives.h"
#include "worker/collectives/signed_store.h"

namespace trainyard {

DistContext DistSetup::context() const {
  DistContext c{world, shm.get(), shard.get(), replicate.get(), device};
  c.flight_recorder = recorder;
  c.checkpoint_group = checkpoint;
  c.control_group = control;
  c.control_shm = control_shm.get();
  return c;
}

bool SharedMemoryAllowed(const JobSpec& spec) {
  // Comm hooks compress for the process group; shared memory is for plain fp32.
  return spec.distributed_type == DistributedType::kDdp &&
         spec.ddp.intra_host_transport != IntraHostTransport::kProcessGroup && spec.device == Device::kCpu &&
         spec.ddp.comm_hook == CommHookType::kNone;
}

std::unique_ptr<DirectCollectives> MaybeSharedMemory(const JobSpec& spec, const c10::intrusive_ptr<c10d::Store>& store,
                                                     int32_t rank, int32_t world_size, const std::string& bind_addr,
                                                     std::chrono::milliseconds timeout, FlightRecorder* recorder) {
  const IntraHostTransport t = spec.ddp.intra_host_transport;
  if (world_size < 2 || !SharedMemoryAllowed(spec)) {
    if (t == IntraHostTransport::kSharedMemory && spec.device != Device::kCpu) {
      throw std::invalid_argument("ddp.intra_host_transport shm needs device cpu");
    }
    return nullptr;
  }
  const std::vector<int32_t> hosts = ShmCollectives::HostOfEachRank(store, rank, world_size, "trainyard");
  const int32_t nodes = *std::max_element(hosts.begin(), hosts.end()) + 1;
  if (nodes == 1) {
    log::Info("rank {}: all {} ranks on this host; gradients travel through shared memory", rank, world_size);
    auto shm = ShmCollectives::Create(store, rank, world_size, "trainyard");
    shm->set_flight_recorder(recorder);
    return shm;
  }
  const int32_t per_host = NodeCollectives::UniformRanksPerHost(hosts);
  if (per_host == 0) {
    if (t == IntraHostTransport::kSharedMemory) {
      throw std::invalid_argument(
          "ddp.intra_host_transport shm needs the same number (at least 2) of consecutive "
          "ranks on every host; these " +
          std::to_string(world_size) + " ranks are on " + std::to_string(nodes) + " hosts otherwise");
    }
    log::Info(
        "rank {}: ranks on {} hosts, not 2 or more consecutive ones on each; gradients travel through the "
        "process group",
        rank, nodes);
    return nullptr;
  }
  log::Info(
      "rank {}: ranks on {} hosts, {} on each; gradients travel through shared memory within a host and Gloo "
      "across hosts",
      rank, nodes, per_host);
  return NodeCollectives::Create(store, rank, world_size, per_host, bind_addr, timeout, recorder);
}

DistSetup SetUpGroups(const JobSpec& spec, const c10::intrusive_ptr<c10d::Store>& store, int32_t rank,
                      int32_t world_size, const std::string& bind_addr, std::chrono::milliseconds timeout,
                      FlightRecorder* recorder) {
  DistSetup d;
  d.store = store;
  d.recorder = recorder;
  const Backend backend = EffectiveBackend(spec.backend, spec.device);
  d.world = MakeProcessGroup(backend, store, rank, world_size, bind_addr, timeout, recorder);
  d.shm = MaybeSharedMemory(spec, store, rank, world_size, bind_addr, timeout, recorder);
  if (!d.shm) {
    // Measured on the 2-rank DDP benchmark over Gloo: the agreement on the
    // training group cost ~2 ms of a 21 ms step, and a Gloo round trip of
    // its own still weighs on steps under a millisecond (docs/BENCHMARKS.md).
    if (ShmCollectives::AllRanksOnThisHost(store, rank, world_size, "trainyard-control")) {
      d.control_shm = ShmCollectives::Create(store, rank, world_size, "trainyard-control", 4 << 10);
      d.control_shm->set_flight_recorder(recorder);
    } else {
      d.control = MakeProcessGroup(Backend::kGloo, c10::make_intrusive<c10d::PrefixStore>("control/", store), rank,
                                   world_size, bind_addr, timeout, recorder, "control");
    }
  }
  if (spec.distributed_type != DistributedType::kFsdp) return d;
  if (spec.checkpoint.async) {
    d.checkpoint = MakeProcessGroup(Backend::kGloo, c10::make_intrusive<c10d::PrefixStore>("checkpoint/", store), rank,
                                    world_size, bind_addr, timeout);
  }
  switch (spec.fsdp.sharding_strategy) {
    case ShardingStrategy::kFullShard:
    case ShardingStrategy::kShardGradOp: d.shard = MakeCollectives(d.world); break;
    case ShardingStrategy::kNoShard: d.replicate = MakeCollectives(d.world); break;
    case ShardingStrategy::kHybridShard:
    case ShardingStrategy::kHybridShardZero2: {
      const int32_t per_node = world_size == spec.num_processes ? spec.hybrid_ranks_per_node()
                               : spec.fsdp.ranks_per_node > 0   ? spec.fsdp.ranks_per_node
                                                                : world_size;
      HybridGroups h = MakeHybridGroups(store, backend, rank, world_size, per_node, bind_addr, timeout, recorder);
      d.shard = std::move(h.shard);
      d.replicate = std::move(h.replicate);
      break;
    }
  }
  return d;
}

DistSetup SetUpDistributed(const JobSpec& spec, const RendezvousOptions& options, FlightRecorder* recorder) {
  if (options.world_size < 2) return DistSetup{};
  log::Info("rank {}/{}: rendezvous at {}:{}", options.rank, options.world_size, options.master_addr,
            options.master_port);
  c10::intrusive_ptr<c10d::Store> store = ConnectStore(options);
  if (!options.secret.empty()) store = c10::make_intrusive<SignedStore>(std::move(store), options.secret);
  return SetUpGroups(spec, store, options.rank, options.world_size, options.bind_addr, options.timeout, recorder);
}

}  // namespace trainyard
