#include "worker/replica_group.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <stdexcept>

#include "common/log.h"
#include "worker/abortable_store.h"
#include "worker/process_group.h"

namespace trainyard {

ReplicaStore::ReplicaStore() {
  c10d::TCPStoreOptions opts;
  opts.port = 0;  // a free one
  opts.isServer = true;
  opts.waitWorkers = false;
  auto store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", opts);
  port_ = store->getPort();
  store_ = std::move(store);
}

ReplicaStore::~ReplicaStore() = default;

int ReplicaStore::port() const { return port_; }

ReplicaGroup::ReplicaGroup(const Membership& m, int32_t launch_rank, const std::string& bind_addr,
                           std::chrono::milliseconds timeout, FlightRecorder* recorder,
                           std::function<bool()> superseded)
    : membership_(m), rank_(m.IndexOf(launch_rank)) {
  if (rank_ < 0) throw std::invalid_argument("rank " + std::to_string(launch_rank) + " is not in " + m.Describe());
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<uint16_t>(m.store_port);
  opts.isServer = false;
  opts.waitWorkers = false;
  opts.timeout = timeout;
  auto client = c10::make_intrusive<c10d::TCPStore>(m.store_addr, opts);
  c10::intrusive_ptr<c10d::Store> base = client;
  if (superseded) {
    base = c10::make_intrusive<AbortableStore>(
        client, std::move(superseded),
        "membership epoch " + std::to_string(m.epoch) + " was superseded while its groups formed");
  }
  store_ = c10::make_intrusive<c10d::PrefixStore>(m.StorePrefix(), base);
  world_ = MakeProcessGroup(Backend::kGloo, store_, rank_, size(), bind_addr, timeout, recorder, "world");
  control_ = MakeProcessGroup(Backend::kGloo, c10::make_intrusive<c10d::PrefixStore>("control/", store_), rank_, size(),
                              bind_addr, timeout, recorder, "control");
}

ReplicaGroup::~ReplicaGroup() = default;

DistContext ReplicaGroup::context() const {
  DistContext c;
  c.process_group = world_;
  c.control_group = control_;
  return c;
}

HealResult Heal(const TrainingState& state, const c10::intrusive_ptr<c10d::ProcessGroup>& pg, int64_t committed_step,
                int64_t cursor) {
  const int32_t size = pg->getSize();
  at::Tensor mine = at::tensor({committed_step, cursor}, at::kLong);
  std::vector<at::Tensor> all(static_cast<size_t>(size));
  for (at::Tensor& t : all) t = at::empty({2}, at::kLong);
  std::vector<std::vector<at::Tensor>> out = {all};
  std::vector<at::Tensor> in = {mine};
  pg->allgather(out, in)->wait();
  HealResult r;
  r.step = out[0][0][0].item<int64_t>();
  bool differ = false;
  for (int32_t i = 0; i < size; ++i) {
    const int64_t step = out[0][i][0].item<int64_t>();
    const int64_t at = out[0][i][1].item<int64_t>();
    if (step > r.step) {
      r.step = step;
      r.source = i;
    }
    differ = differ || step != out[0][0][0].item<int64_t>() || at != out[0][0][1].item<int64_t>();
  }
  r.cursor = out[0][r.source][1].item<int64_t>();
  if (!differ) return r;
  r.healed = committed_step != r.step || cursor != r.cursor;
  r.bytes = BroadcastTrainingState(state, pg, r.source);
  return r;
}

}  // namespace trainyard
