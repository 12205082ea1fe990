#include "worker/collectives/node_collectives.h"

#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <algorithm>
#include <stdexcept>

#include "common/job_spec.h"
#include "worker/collectives/process_group.h"
#include "worker/collectives/shm_collectives.h"

namespace trainyard {
namespace {

// [lo, hi) of local rank `local`'s slice of n elements split among `parts`:
// the same bounds on every rank for the same n.
std::pair<int64_t, int64_t> Slice(int64_t n, int32_t parts, int32_t local) {
  const int64_t per = (n + parts - 1) / parts;
  const int64_t lo = std::min(n, per * local);
  return {lo, std::min(n, lo + per)};
}

void Wait(const c10::intrusive_ptr<c10d::Work>& work) {
  if (!work->wait()) throw std::runtime_error("a collective across hosts did not complete");
}

}  // namespace

int32_t NodeCollectives::UniformRanksPerHost(const std::vector<int32_t>& host_of_rank) {
  const auto world = static_cast<int32_t>(host_of_rank.size());
  if (world < 4) return 0;
  int32_t per = 0;
  while (per < world && host_of_rank[per] == 0) ++per;
  if (per < 2 || per == world || world % per != 0) return 0;
  for (int32_t r = 0; r < world; ++r) {
    if (host_of_rank[r] != r / per) return 0;
  }
  return per;
}

std::unique_ptr<NodeCollectives> NodeCollectives::Create(const c10::intrusive_ptr<c10d::Store>& store, int32_t rank,
                                                         int32_t world_size, int32_t ranks_per_node,
                                                         const std::string& bind_addr,
                                                         std::chrono::milliseconds timeout, FlightRecorder* recorder) {
  if (ranks_per_node < 1 || world_size % ranks_per_node != 0) {
    throw std::invalid_argument("NodeCollectives: ranks_per_node " + std::to_string(ranks_per_node) +
                                " does not divide the world size " + std::to_string(world_size));
  }
  const int32_t node = rank / ranks_per_node, local = rank % ranks_per_node;
  auto node_store = c10::make_intrusive<c10d::PrefixStore>("node/" + std::to_string(node), store);
  std::unique_ptr<ShmCollectives> shm;
  if (ranks_per_node > 1) {
    if (!ShmCollectives::AllRanksOnThisHost(node_store, local, ranks_per_node, "trainyard")) {
      throw std::invalid_argument("NodeCollectives: the ranks of node " + std::to_string(node) +
                                  " are not all on one host");
    }
    shm = ShmCollectives::Create(node_store, local, ranks_per_node, "trainyard", 128 << 10, timeout);
    shm->set_flight_recorder(recorder);
  }
  const std::string cross_name = "cross/" + std::to_string(local);
  auto cross_store = c10::make_intrusive<c10d::PrefixStore>(cross_name, store);
  auto cross = MakeProcessGroup(Backend::kGloo, cross_store, node, world_size / ranks_per_node, bind_addr, timeout,
                                recorder, cross_name);
  return std::unique_ptr<NodeCollectives>(
      new NodeCollectives(rank, world_size, ranks_per_node, std::move(shm), std::move(cross)));
}

NodeCollectives::NodeCollectives(int32_t rank, int32_t world, int32_t per_node, std::unique_ptr<ShmCollectives> local,
                                 c10::intrusive_ptr<c10d::ProcessGroup> cross)
    : rank_(rank), world_(world), per_node_(per_node), local_(std::move(local)), cross_(std::move(cross)) {}

NodeCollectives::~NodeCollectives() = default;

void NodeCollectives::AllreduceSum(at::Tensor& tensor, float divisor) {
  if (tensor.scalar_type() != at::kFloat || !tensor.is_contiguous() || !tensor.device().is_cpu()) {
    throw std::invalid_argument("NodeCollectives: allreduce takes contiguous fp32 CPU tensors");
  }
  if (local_) local_->AllreduceSum(tensor, 1.0f);  // the host's sum, on each of its ranks
  const int32_t local = rank_ % per_node_;
  const int64_t n = tensor.numel();
  at::Tensor flat = tensor.view({-1});
  const auto [lo, hi] = Slice(n, per_node_, local);
  if (hi > lo) {
    std::vector<at::Tensor> part{flat.narrow(0, lo, hi - lo)};
    c10d::AllreduceOptions sum;
    sum.reduceOp = c10d::ReduceOp::SUM;
    Wait(cross_->allreduce(part, sum));
    if (divisor != 1.0f) part[0].div_(divisor);
  }
  if (!local_) return;
  // Each local rank's finished slice to the host's other ranks.
  auto* data = flat.data_ptr<float>();
  for (int32_t i = 0; i < per_node_; ++i) {
    const auto [a, b] = Slice(n, per_node_, i);
    local_->Broadcast(data + a, static_cast<size_t>(b - a) * sizeof(float), i);
  }
}

void NodeCollectives::Broadcast(void* data, size_t bytes, int32_t root) {
  if (root < 0 || root >= world_) throw std::invalid_argument("Broadcast: root out of range");
  const int32_t root_node = root / per_node_, root_local = root % per_node_;
  if (rank_ % per_node_ == root_local && bytes > 0) {
    std::vector<at::Tensor> t{torch::from_blob(data, {static_cast<int64_t>(bytes)}, torch::kUInt8)};
    c10d::BroadcastOptions options;
    options.rootRank = root_node;
    Wait(cross_->broadcast(t, options));
  }
  if (local_) local_->Broadcast(data, bytes, root_local);
}

void NodeCollectives::AllreduceMax(int64_t* values, int n) {
  if (n < 0 || n > kMaxWords) throw std::invalid_argument("AllreduceMax takes at most 8 values");
  if (local_) local_->AllreduceMax(values, n);
  if (n == 0) return;
  // Every cross group holds every host's maximum: each ends with the whole.
  std::vector<at::Tensor> t{torch::from_blob(values, {n}, torch::kLong)};
  c10d::AllreduceOptions max;
  max.reduceOp = c10d::ReduceOp::MAX;
  Wait(cross_->allreduce(t, max));
}

bool NodeCollectives::ReserveResident(size_t bytes_per_rank) {
  return local_ && local_->ReserveResident(bytes_per_rank);
}

void* NodeCollectives::own_resident() const { return local_ ? local_->own_resident() : nullptr; }

const std::string& NodeCollectives::resident_error() const {
  static const std::string kOneRank = "one rank on this host";
  return local_ ? local_->resident_error() : kOneRank;
}

c10::DataPtr NodeCollectives::ResidentDataPtr(void* data) const {
  if (!local_) throw std::logic_error("NodeCollectives: no resident area with one rank per host");
  return local_->ResidentDataPtr(data);
}

}  // namespace trainyard
