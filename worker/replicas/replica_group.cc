#include "worker/replicas/replica_group.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "common/listen_socket.h"
#include "common/log.h"
#include "worker/collectives/abortable_store.h"
#include "worker/collectives/collectives.h"
#include "worker/collectives/process_group.h"
#include "worker/collectives/shm_collectives.h"
#include "worker/collectives/signed_store.h"

namespace trainyard {

ReplicaStore::ReplicaStore(const std::string& host) {
  c10d::TCPStoreOptions opts;
  opts.port = 0;  // a free one
  opts.isServer = true;
  opts.waitWorkers = false;
  std::string error;
  const int fd = ListenOn(host, 0, &error);
  if (fd >= 0) {
    opts.masterListenFd = fd;
    opts.port = static_cast<uint16_t>(BoundPort(fd));
  } else {
    log::Warn("replica store: {}; it listens on every address of this host", error);
  }
  auto store = c10::make_intrusive<c10d::TCPStore>(fd >= 0 ? host : "127.0.0.1", opts);
  port_ = store->getPort();
  store_ = std::move(store);
}

ReplicaStore::~ReplicaStore() = default;

int ReplicaStore::port() const { return port_; }

namespace {

// One epoch's groups as a thread forms them: what it made, or its error.
struct Forming {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::ProcessGroup> world, control;
  std::unique_ptr<ShmCollectives> shm;
  std::unique_ptr<Collectives> shard, replicate;
};

// Whether `m` lists whole replicas of `unit` launch ranks, each in order
// (the layout MakeHybridGroups reads group ranks with).
void CheckWholeReplicas(const MembershipView& m, int32_t unit) {
  const int32_t n = static_cast<int32_t>(m.ranks.size());
  bool whole = n % unit == 0;
  for (int32_t i = 0; whole && i < n; ++i) {
    const int32_t first = m.ranks[i - i % unit];
    whole = first % unit == 0 && m.ranks[i] == first + i % unit;
  }
  if (!whole) {
    throw std::invalid_argument(m.Describe() + " does not list whole shard groups of " + std::to_string(unit) +
                                " ranks in order");
  }
}

}  // namespace

ReplicaGroup::ReplicaGroup(const MembershipView& m, int32_t launch_rank, const std::string& bind_addr,
                           std::chrono::milliseconds timeout, bool shared_memory, FlightRecorder* recorder,
                           std::function<bool()> superseded, int32_t fsdp_unit, std::string secret)
    : membership_(m), rank_(m.IndexOf(launch_rank)), fsdp_unit_(fsdp_unit) {
  if (rank_ < 0) throw std::invalid_argument("rank " + std::to_string(launch_rank) + " is not in " + m.Describe());
  if (fsdp_unit > 0) CheckWholeReplicas(m, fsdp_unit);
  const std::string what = "membership epoch " + std::to_string(m.epoch) + " was superseded while its groups formed";
  auto forming = std::make_shared<Forming>();
  // The groups form on a thread of their own, so that a newer membership
  // can end the wait for them: a member that died after it published its
  // address leaves the others retrying its connection until `timeout`.
  // Abandoned, the thread ends by itself (its store reads give up at once,
  // a connection at the timeout) and what it made is dropped.
  std::thread([forming, m, rank = rank_, size = size(), bind_addr, timeout, shared_memory, recorder, superseded, what,
               fsdp_unit, secret = std::move(secret)] {
    try {
      c10d::TCPStoreOptions opts;
      opts.port = static_cast<uint16_t>(m.store_port);
      opts.isServer = false;
      opts.waitWorkers = false;
      opts.timeout = timeout;
      auto client = c10::make_intrusive<c10d::TCPStore>(m.store_addr, opts);
      c10::intrusive_ptr<c10d::Store> base = client;
      if (superseded) base = c10::make_intrusive<AbortableStore>(client, superseded, what);
      if (!secret.empty()) base = c10::make_intrusive<SignedStore>(base, secret);
      auto store = c10::make_intrusive<c10d::PrefixStore>(m.StorePrefix(), base);
      auto world = MakeProcessGroup(Backend::kGloo, store, rank, size, bind_addr, timeout, recorder, "world");
      std::unique_ptr<ShmCollectives> shm;
      c10::intrusive_ptr<c10d::ProcessGroup> control;
      const bool one_host = shared_memory && size > 1 && ShmCollectives::AllRanksOnThisHost(store, rank, size, "shm");
      if (shared_memory && size > 1 && !one_host) {
        log::Info("rank {}: the members of epoch {} span hosts; gradients travel through Gloo", m.ranks[rank], m.epoch);
      }
      if (one_host) {
        shm = ShmCollectives::Create(store, rank, size, "shm", 128 << 10, timeout, superseded);
        shm->set_flight_recorder(recorder);
      } else {
        control = MakeProcessGroup(Backend::kGloo, c10::make_intrusive<c10d::PrefixStore>("control/", store), rank,
                                   size, bind_addr, timeout, recorder, "control");
      }
      std::unique_ptr<Collectives> shard, replicate;
      if (fsdp_unit == 1) {
        replicate = MakeCollectives(world);
      } else if (fsdp_unit > 1) {
        HybridGroups h = MakeHybridGroups(c10::make_intrusive<c10d::PrefixStore>("fsdp/", store), Backend::kGloo, rank,
                                          size, fsdp_unit, bind_addr, timeout, recorder);
        shard = std::move(h.shard);
        replicate = std::move(h.replicate);
      }
      std::lock_guard<std::mutex> lock(forming->mu);
      forming->store = std::move(store);
      forming->world = std::move(world);
      forming->control = std::move(control);
      forming->shm = std::move(shm);
      forming->shard = std::move(shard);
      forming->replicate = std::move(replicate);
      forming->done = true;
    } catch (...) {
      std::lock_guard<std::mutex> lock(forming->mu);
      forming->error = std::current_exception();
      forming->done = true;
    }
    forming->cv.notify_all();
  }).detach();
  std::unique_lock<std::mutex> lock(forming->mu);
  // Every few milliseconds the question whether a newer membership came.
  while (!forming->cv.wait_for(lock, std::chrono::milliseconds(5), [&] { return forming->done; })) {
    if (superseded && superseded()) throw GroupSuperseded(what);
  }
  if (forming->error) std::rethrow_exception(forming->error);
  store_ = std::move(forming->store);
  world_ = std::move(forming->world);
  control_ = std::move(forming->control);
  shm_ = std::move(forming->shm);
  shard_ = std::move(forming->shard);
  replicate_ = std::move(forming->replicate);
  if (shm_)
    log::Info("rank {}: the members of epoch {} are on this host: gradients travel through shared memory", launch_rank,
              m.epoch);
}

ReplicaGroup::~ReplicaGroup() = default;

DistContext ReplicaGroup::context() const {
  DistContext c;
  c.process_group = world_;
  c.control_group = control_;
  c.shm = shm_.get();
  c.shard_group = shard_.get();
  c.replicate_group = replicate_.get();
  return c;
}

c10::intrusive_ptr<c10d::ProcessGroup> ReplicaGroup::heal_group() const {
  return replicate_ ? replicate_->process_group() : world_;
}

int32_t ReplicaGroup::SourceInWorld(int32_t r) const {
  if (fsdp_unit_ <= 1) return r;  // the world, or NO_SHARD's replicate group (the world)
  return r * fsdp_unit_;          // replicate group rank r = the r-th replica
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
  // Members that trained trained together: they differ by at most the step
  // in flight when their group broke (applied by some, dropped by others).
  // A member further ahead than that is not taken as the source.
  for (int32_t i = 0; i < size; ++i) {
    const int64_t step = out[0][i][0].item<int64_t>();
    if (step >= 0 && r.step - step > 1) {
      throw HealRefused("heal refused: group rank " + std::to_string(r.source) + " claims step " +
                        std::to_string(r.step) + " but group rank " + std::to_string(i) + " is at step " +
                        std::to_string(step) + "; members that trained together differ by at most one step");
    }
  }
  r.healed = committed_step != r.step || cursor != r.cursor;
  r.bytes = BroadcastTrainingState(state, pg, r.source);
  return r;
}

}  // namespace trainyard
