#include "worker/parallel/ddp.h"

#include <cstring>

#include <c10/core/StorageImpl.h>
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/comm.hpp>
#include <torch/csrc/distributed/c10d/reducer.hpp>
#include "common/log.h"

#include <algorithm>
#include <chrono>

#include "worker/collectives/direct_collectives.h"

namespace trainyard {
namespace {

// Averages each bucket through shared memory on the autograd thread, in
// bucket order (the Reducer launches buckets in index order on every rank).
class ShmAllreduceHook final : public c10d::CommHookInterface {
 public:
  ShmAllreduceHook(DirectCollectives* shm, int32_t world_size, CommStats* stats)
      : shm_(shm), world_size_(world_size), stats_(stats) {}

  c10::intrusive_ptr<c10::ivalue::Future> runHook(c10d::GradBucket& bucket) override {
    at::Tensor& buffer = bucket.getBufferRef();
    const auto start = std::chrono::steady_clock::now();
    shm_->AllreduceSum(buffer, static_cast<float>(world_size_));  // the mean, in the same pass
    const int64_t bytes = buffer.numel() * static_cast<int64_t>(sizeof(float));
    stats_->wire_bytes += bytes;
    stats_->fp32_equivalent_bytes += bytes;
    stats_->hook_nanos +=
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
    auto future = c10::make_intrusive<c10::ivalue::Future>(c10::TensorType::get());
    future->markCompleted(c10::IValue(buffer));
    return future;
  }

  at::Tensor parseHookResult(const c10::IValue& result) override { return result.toTensor(); }

 private:
  DirectCollectives* shm_;
  int32_t world_size_;
  CommStats* stats_;
};

// c10d::Reducer's constructor across LibTorch 2.x releases: 2.15 takes no
// per-bucket size limits and a list of per-bucket caps for rebuilding;
// earlier 2.x releases take the limits after the bucket indices.
template <typename Reducer = c10d::Reducer>
std::unique_ptr<Reducer> MakeReducer(std::vector<at::Tensor> params, std::vector<std::vector<size_t>> bucket_indices,
                                     std::vector<size_t> per_bucket_limits, c10::intrusive_ptr<c10d::ProcessGroup> pg,
                                     std::vector<bool> expect_sparse, int64_t cap, bool find_unused,
                                     bool gradient_as_bucket_view, int64_t first_cap) {
  using Names = std::unordered_map<size_t, std::string>;
  using Pg = c10::intrusive_ptr<c10d::ProcessGroup>;
  using Params = std::vector<at::Tensor>;
  using Indices = std::vector<std::vector<size_t>>;
  if constexpr (std::is_constructible_v<Reducer, Params, Indices, Pg, std::vector<bool>, int64_t, bool, bool, Names,
                                        int64_t, bool, bool, std::vector<int64_t>>) {
    return std::make_unique<Reducer>(std::move(params), std::move(bucket_indices), std::move(pg),
                                     std::move(expect_sparse), cap, find_unused, gradient_as_bucket_view, Names{},
                                     first_cap, /*skip_all_reduce_unused_params=*/false,
                                     /*use_python_reducer=*/false, /*bucket_bytes_cap_list=*/std::vector<int64_t>{});
  } else if constexpr (std::is_constructible_v<Reducer, Params, Indices, std::vector<size_t>, Pg, std::vector<bool>,
                                               int64_t, bool, bool, Names, int64_t, bool, bool>) {
    return std::make_unique<Reducer>(std::move(params), std::move(bucket_indices), std::move(per_bucket_limits),
                                     std::move(pg), std::move(expect_sparse), cap, find_unused, gradient_as_bucket_view,
                                     Names{}, first_cap,
                                     /*skip_all_reduce_unused_params=*/false, /*use_python_reducer=*/false);
  } else {
    return std::make_unique<Reducer>(std::move(params), std::move(bucket_indices), std::move(per_bucket_limits),
                                     std::move(pg), std::move(expect_sparse), cap, find_unused, gradient_as_bucket_view,
                                     Names{}, first_cap);
  }
}

}  // namespace

struct DistributedDataParallel::Impl {
  std::vector<at::Tensor> params;  // the ones that require grad
  c10::intrusive_ptr<c10d::ProcessGroup> reducer_pg;
  std::unique_ptr<c10d::Reducer> reducer;
  size_t buckets = 0;
  CommStats stats;
  CommHook* hook = nullptr;        // owned by the reducer
  bool builtin_allreduce = false;  // no hook: count the Reducer's own traffic
  bool stateful_hook = false;      // PowerSGD: buckets are never rebuilt (see PrepareForward)
  int64_t grad_bytes = 0;
  std::vector<at::Tensor> buffers;  // synchronized before each forward (broadcast_buffers)
  c10::intrusive_ptr<c10d::ProcessGroup> pg;
  DirectCollectives* shm = nullptr;   // when gradients go through shared memory, so do buffers
  std::vector<uint8_t> buffer_bytes;  // their packed bytes, reused

  // Moves every gradient bucket (and with it the gradients that are views
  // of it) into the resident shared-memory area, bucket after bucket at the
  // same offsets on every rank: the allreduce then reads the other ranks'
  // buckets where they are instead of copying them through the segment. The
  // bucket keeps its storage object, only the bytes move, so every view
  // follows. Without room in shared memory the buckets stay where they are.
  void MoveBucketsToSharedMemory() {
    auto aligned = [](size_t bytes) { return (bytes + 63) / 64 * 64; };  // buckets start on cache lines
    std::vector<c10d::GradBucket> grad_buckets = reducer->get_grad_buckets(/*return_zero_tensors=*/false);
    size_t total = 0;
    for (const c10d::GradBucket& b : grad_buckets) {
      const at::Tensor& t = b.getBuffer();
      if (!t.is_contiguous() || t.storage_offset() != 0 || t.storage().nbytes() != t.nbytes()) return;
      total += aligned(t.nbytes());
    }
    if (!shm->ReserveResident(total)) {
      log::Warn("no shared memory for {} bytes of gradient buckets per rank ({}); they are copied instead", total,
                shm->resident_error());
      return;
    }
    char* area = static_cast<char*>(shm->own_resident());
    size_t offset = 0;
    for (const c10d::GradBucket& b : grad_buckets) {
      const at::Tensor& t = b.getBuffer();
      std::memcpy(area + offset, t.data_ptr(), t.nbytes());
      t.storage().unsafeGetStorageImpl()->set_data_ptr(shm->ResidentDataPtr(area + offset));
      offset += aligned(t.nbytes());
    }
  }
};

DistributedDataParallel::DistributedDataParallel(const std::vector<at::Tensor>& all_params,
                                                 const std::vector<at::Tensor>& buffers,
                                                 c10::intrusive_ptr<c10d::ProcessGroup> pg, const DdpSpec& options,
                                                 DirectCollectives* shm, bool broadcast_initial)
    : impl_(std::make_unique<Impl>()) {
  const int32_t world_size = pg->getSize();
  constexpr size_t kBroadcastBucketBytes = 250 * 1024 * 1024;  // Python DDP's broadcast_bucket_size
  {
    torch::NoGradGuard no_grad;
    std::vector<at::Tensor> state(all_params.begin(), all_params.end());
    state.insert(state.end(), buffers.begin(), buffers.end());
    if (broadcast_initial && !state.empty()) c10d::broadcast_coalesced(pg, state, kBroadcastBucketBytes, 0);
  }
  for (const at::Tensor& p : all_params) {
    if (p.requires_grad()) impl_->params.push_back(p);
  }
  impl_->pg = pg;
  if (options.broadcast_buffers) impl_->buffers = buffers;
  if (impl_->params.empty()) throw std::invalid_argument("DDP: the model has no trainable parameters");

  const auto cap = static_cast<size_t>(options.bucket_cap_mb * 1024 * 1024);
  const std::vector<bool> expect_sparse(impl_->params.size(), false);
  // The first bucket is small (1 MiB, as in PyTorch) so communication starts
  // early; a bucket_cap_mb below that caps it too.
  const size_t first_cap = std::min(cap, static_cast<size_t>(c10d::kDefaultFirstBucketBytes));
  auto [bucket_indices, per_bucket_limits] =
      c10d::compute_bucket_assignment_by_size(impl_->params, {first_cap, cap}, expect_sparse);
  // Gradients become ready roughly in reverse order of the parameters.
  std::reverse(bucket_indices.begin(), bucket_indices.end());
  std::reverse(per_bucket_limits.begin(), per_bucket_limits.end());
  impl_->buckets = bucket_indices.size();
  impl_->reducer_pg = pg;
  impl_->reducer = MakeReducer(impl_->params, std::move(bucket_indices), std::move(per_bucket_limits), std::move(pg),
                               expect_sparse, static_cast<int64_t>(cap), options.find_unused_parameters,
                               options.gradient_as_bucket_view, static_cast<int64_t>(first_cap));
  for (const at::Tensor& p : impl_->params) impl_->grad_bytes += p.numel() * p.element_size();
  if (options.comm_hook != CommHookType::kNone) {
    std::unique_ptr<CommHook> hook = MakeCommHook(options, impl_->reducer_pg, &impl_->stats);
    impl_->hook = hook.get();
    impl_->stateful_hook =
        options.comm_hook == CommHookType::kPowerSgd || options.comm_hook == CommHookType::kBatchedPowerSgd;
    impl_->reducer->register_comm_hook(std::move(hook));
  } else if (shm != nullptr) {
    impl_->reducer->register_comm_hook(std::make_unique<ShmAllreduceHook>(shm, world_size, &impl_->stats));
    impl_->shm = shm;
    impl_->MoveBucketsToSharedMemory();
  } else {
    impl_->builtin_allreduce = true;
  }
}

const CommStats& DistributedDataParallel::comm_stats() const { return impl_->stats; }

std::map<std::string, at::Tensor> DistributedDataParallel::CommHookState() const {
  return impl_->hook != nullptr ? impl_->hook->State() : std::map<std::string, at::Tensor>{};
}

void DistributedDataParallel::LoadCommHookState(const std::map<std::string, at::Tensor>& state) {
  if (impl_->hook == nullptr) {
    if (!state.empty()) throw std::invalid_argument("comm hook state given, but this job has no stateful hook");
    return;
  }
  // Checkpoints hold host tensors; the hook's state lives with the gradients.
  const c10::Device device = impl_->params.front().device();
  std::map<std::string, at::Tensor> on_device;
  for (const auto& [name, tensor] : state) on_device.emplace(name, tensor.to(device));
  impl_->hook->LoadState(on_device);
}

DistributedDataParallel::~DistributedDataParallel() = default;

void DistributedDataParallel::SyncBuffers() {
  if (impl_->buffers.empty()) return;
  torch::NoGradGuard no_grad;
  if (impl_->shm != nullptr) {
    // Rank 0's buffers, packed into one byte string, through shared memory.
    std::vector<uint8_t>& bytes = impl_->buffer_bytes;
    size_t total = 0;
    for (const at::Tensor& b : impl_->buffers) total += static_cast<size_t>(b.nbytes());
    bytes.resize(total);
    const bool root = impl_->shm->rank() == 0;
    size_t offset = 0;
    if (root) {
      for (const at::Tensor& b : impl_->buffers) {
        const at::Tensor c = b.contiguous();
        std::memcpy(bytes.data() + offset, c.data_ptr(), c.nbytes());
        offset += c.nbytes();
      }
    }
    impl_->shm->Broadcast(bytes.data(), total, 0);
    if (!root) {
      for (at::Tensor& b : impl_->buffers) {
        b.copy_(torch::from_blob(bytes.data() + offset, b.sizes(), b.options()));
        offset += b.nbytes();
      }
    }
    return;
  }
  c10d::broadcast_coalesced(impl_->pg, impl_->buffers, 250 * 1024 * 1024, 0);
}

void DistributedDataParallel::PrepareForward() {
  // PyTorch rebuilds the buckets once, in the order gradients became ready
  // in the first backward. A stateful hook (PowerSGD) keys its state by
  // bucket, and a resumed job's first step would run on the initial
  // assignment again: with such a hook the initial assignment is kept for
  // good, so restored state always meets the buckets it was made for.
  if (!impl_->stateful_hook && impl_->reducer->rebuild_buckets() && impl_->shm != nullptr) {
    impl_->MoveBucketsToSharedMemory();
  }
  impl_->reducer->prepare_for_forward();
}

void DistributedDataParallel::PrepareBackward(const std::vector<at::Tensor>& outputs) {
  impl_->reducer->prepare_for_backward(outputs);
  if (impl_->builtin_allreduce) {
    impl_->stats.wire_bytes += impl_->grad_bytes;
    impl_->stats.fp32_equivalent_bytes += impl_->grad_bytes;
  }
}

void DistributedDataParallel::CountReplayedStep() {
  if (impl_->builtin_allreduce) {
    impl_->stats.wire_bytes += impl_->grad_bytes;
    impl_->stats.fp32_equivalent_bytes += impl_->grad_bytes;
  }
}

size_t DistributedDataParallel::num_buckets() const { return impl_->buckets; }

}  // namespace trainyard
