#include "worker/collectives/collectives.h"

#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <stdexcept>

#include "worker/collectives/process_group.h"

namespace trainyard {
namespace {

void CheckShapes(const at::Tensor& full, const at::Tensor& shard, int32_t size) {
  if (!full.is_contiguous() || !shard.is_contiguous() || full.scalar_type() != shard.scalar_type() ||
      full.numel() != shard.numel() * size) {
    throw std::invalid_argument("collectives: full must be contiguous, of the shard's dtype and size x its length");
  }
}

// Gloo can neither reduce nor (for some ops) carry these dtypes.
bool GlooNeedsBytes(const at::Tensor& t) {
  return t.scalar_type() == at::kBFloat16 || t.scalar_type() == at::kShort || t.scalar_type() == at::kBool;
}

// What every backend shares: the group, and plain allreduce / broadcast.
class GroupCollectives : public Collectives {
 public:
  explicit GroupCollectives(c10::intrusive_ptr<c10d::ProcessGroup> pg) : pg_(std::move(pg)) {}
  int32_t rank() const override { return pg_->getRank(); }
  int32_t size() const override { return pg_->getSize(); }
  c10::intrusive_ptr<c10d::ProcessGroup> process_group() const override { return pg_; }
  void AllGatherInto(at::Tensor& full, const at::Tensor& shard) override { AllGatherIntoAsync(full, shard)->wait(); }

 protected:
  void PlainAllreduce(const at::Tensor& t) {
    std::vector<at::Tensor> v = {t};
    pg_->allreduce(v)->wait();
  }
  void PlainBroadcast(const at::Tensor& t, int32_t root) {
    std::vector<at::Tensor> v = {t};
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    pg_->broadcast(v, opts)->wait();
  }

  c10::intrusive_ptr<c10d::ProcessGroup> pg_;
};

class GlooCollectives final : public GroupCollectives {
 public:
  using GroupCollectives::GroupCollectives;

  c10::intrusive_ptr<c10d::Work> AllGatherIntoAsync(at::Tensor& full, const at::Tensor& shard) override {
    CheckShapes(full, shard, size());
    const bool bytes = GlooNeedsBytes(shard);
    at::Tensor out = bytes ? full.view(at::kByte) : full;
    at::Tensor in = bytes ? shard.view(at::kByte) : shard;
    // All-gather into views of the flat output: no copy afterwards. The work
    // keeps its tensors alive.
    std::vector<std::vector<at::Tensor>> outputs = {out.chunk(size())};
    std::vector<at::Tensor> inputs = {in};
    return pg_->allgather(outputs, inputs);
  }

  void ReduceScatterSum(at::Tensor& shard, const at::Tensor& full) override {
    CheckShapes(full, shard, size());
    const bool bytes = GlooNeedsBytes(full);
    // alltoall_base sends slice r to rank r: each rank receives every rank's
    // copy of its own slice, then sums them (in fp32 for bf16).
    at::Tensor send = bytes ? full.view(at::kByte) : full;
    at::Tensor recv = at::empty_like(send);
    std::vector<int64_t> equal;
    pg_->alltoall_base(recv, send, equal, equal)->wait();
    at::Tensor parts = (bytes ? recv.view(full.scalar_type()) : recv).view({size(), shard.numel()});
    if (bytes) {
      shard.copy_(parts.to(at::kFloat).sum(0).view_as(shard));
    } else {
      at::Tensor flat = shard.view({-1});
      at::sum_out(flat, parts, {0});
    }
  }

  void AllreduceSum(at::Tensor& t) override {
    if (GlooNeedsBytes(t)) {
      // Sum through a reduce-scatter and an all-gather of bytes.
      const int64_t chunk = (t.numel() + size() - 1) / size();
      at::Tensor padded = at::zeros({chunk * size()}, t.options());
      padded.narrow(0, 0, t.numel()).copy_(t.reshape({-1}));
      at::Tensor mine = at::empty({chunk}, t.options());
      ReduceScatterSum(mine, padded);
      AllGatherInto(padded, mine);
      t.copy_(padded.narrow(0, 0, t.numel()).view_as(t));
      return;
    }
    PlainAllreduce(t);
  }

  void Broadcast(at::Tensor& t, int32_t root) override {
    PlainBroadcast(GlooNeedsBytes(t) ? t.view(at::kByte) : t, root);
  }
};

// NCCL has the real collectives (compiled everywhere, run only on GPUs).
class NativeCollectives final : public GroupCollectives {
 public:
  using GroupCollectives::GroupCollectives;
  c10::intrusive_ptr<c10d::Work> AllGatherIntoAsync(at::Tensor& full, const at::Tensor& shard) override {
    CheckShapes(full, shard, size());
    at::Tensor in = shard;
    return pg_->_allgather_base(full, in);
  }
  void ReduceScatterSum(at::Tensor& shard, const at::Tensor& full) override {
    CheckShapes(full, shard, size());
    at::Tensor in = full;
    pg_->_reduce_scatter_base(shard, in)->wait();
  }
  void AllreduceSum(at::Tensor& t) override { PlainAllreduce(t); }
  void Broadcast(at::Tensor& t, int32_t root) override { PlainBroadcast(t, root); }
};

}  // namespace

std::unique_ptr<Collectives> MakeCollectives(c10::intrusive_ptr<c10d::ProcessGroup> pg) {
  if (UsesNccl(*pg)) return std::make_unique<NativeCollectives>(std::move(pg));
  return std::make_unique<GlooCollectives>(std::move(pg));
}

HybridGroups MakeHybridGroups(const c10::intrusive_ptr<c10d::Store>& store, Backend backend, int32_t rank,
                              int32_t world_size, int32_t ranks_per_node, const std::string& bind_addr,
                              std::chrono::milliseconds timeout, FlightRecorder* recorder) {
  if (ranks_per_node < 1 || world_size % ranks_per_node != 0) {
    throw std::invalid_argument("ranks_per_node must divide the world size");
  }
  const int32_t node = rank / ranks_per_node, local = rank % ranks_per_node;
  const int32_t nodes = world_size / ranks_per_node;
  const std::string shard_name = "shard/" + std::to_string(node), rep_name = "replicate/" + std::to_string(local);
  auto shard_store = c10::make_intrusive<c10d::PrefixStore>("hybrid/" + shard_name, store);
  auto rep_store = c10::make_intrusive<c10d::PrefixStore>("hybrid/" + rep_name, store);
  HybridGroups g;
  g.shard = MakeCollectives(
      MakeProcessGroup(backend, shard_store, local, ranks_per_node, bind_addr, timeout, recorder, shard_name));
  g.replicate =
      MakeCollectives(MakeProcessGroup(backend, rep_store, node, nodes, bind_addr, timeout, recorder, rep_name));
  return g;
}

}  // namespace trainyard
