// Replica healing: one rank's whole training state to every rank of a group,
// enumerated as checkpoints enumerate it (Holding, the optimizer's fields,
// buffers, the per-rank state of rank_state-*.safetensors).
#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/comm.hpp>

#include <cstring>

#include "worker/base/tensor_hash.h"
#include "worker/checkpoint/checkpoint.h"
#include "worker/checkpoint/checkpoint_holding.h"
#include "worker/checkpoint/checkpoint_internal.h"
#include "worker/collectives/collectives.h"
#include "worker/parallel/ddp.h"
#include "worker/parallel/fsdp.h"

namespace trainyard {
using namespace checkpoint_internal;  // NOLINT: this file is part of the checkpoint code
namespace {

constexpr size_t kHealBucketBytes = 64 * 1024 * 1024;

// Broadcasts `tensors` from `src` in buckets, grouped by device (in place).
int64_t BroadcastByDevice(const c10::intrusive_ptr<c10d::ProcessGroup>& pg, const std::vector<at::Tensor>& tensors,
                          int32_t src) {
  std::map<std::string, std::vector<at::Tensor>> by_device;
  int64_t bytes = 0;
  for (const at::Tensor& t : tensors) {
    by_device[t.device().str()].push_back(t);
    bytes += static_cast<int64_t>(t.nbytes());
  }
  for (auto& [device, group] : by_device) c10d::broadcast_coalesced(pg, group, kHealBucketBytes, src);
  return bytes;
}

}  // namespace

void CheckStateDigest(const c10::intrusive_ptr<c10d::ProcessGroup>& pg, const std::vector<at::Tensor>& tensors,
                      int32_t src) {
  const uint64_t mine = HashTensors(tensors);
  int64_t as_signed;
  std::memcpy(&as_signed, &mine, sizeof(mine));
  std::vector<at::Tensor> digest = {at::tensor({as_signed}, at::kLong)};
  c10d::BroadcastOptions opts;
  opts.rootRank = src;
  pg->broadcast(digest, opts)->wait();
  if (digest[0].item<int64_t>() != as_signed) {
    throw StateDigestMismatch("the training state received from group rank " + std::to_string(src) +
                              " does not match the digest it sent (" + std::to_string(tensors.size()) +
                              " tensors): it changed on the way");
  }
}

int64_t BroadcastTrainingState(const TrainingState& s, const c10::intrusive_ptr<c10d::ProcessGroup>& pg, int32_t src) {
  if (s.fsdp != nullptr && pg->getSize() > 1 &&
      (s.fsdp->replicate_group() == nullptr || s.fsdp->replicate_group()->process_group() != pg)) {
    throw std::invalid_argument("BroadcastTrainingState: FSDP shards are replicas only over the replicate group");
  }
  torch::NoGradGuard no_grad;
  const bool source = pg->getRank() == src;
  const Holding h(s);
  const std::vector<std::string> fields = OptimizerFields(*s.spec);
  // Whether the source has optimizer state yet, and its step count.
  int64_t optimizer_step = 0;
  for (const at::Tensor& holder : h.holders()) optimizer_step = std::max(optimizer_step, StepOf(*s.optimizer, holder));
  at::Tensor head = at::tensor({HasState(*s.optimizer, h.holders()) ? int64_t{1} : 0, optimizer_step}, at::kLong);
  std::vector<at::Tensor> head_v = {head};
  c10d::BroadcastOptions opts;
  opts.rootRank = src;
  pg->broadcast(head_v, opts)->wait();
  const bool has_state = head[0].item<int64_t>() != 0;

  std::vector<at::Tensor> live;  // written in place
  for (const at::Tensor& holder : h.holders()) live.push_back(holder.detach());
  for (const auto& [name, t] : Buffers(s)) live.push_back(t);
  if (has_state) {
    for (const at::Tensor& holder : h.holders()) {
      EnsureState(*s.optimizer, s.spec->optimizer.kind, holder, head[1].item<int64_t>());
      for (const std::string& f : fields) {
        at::Tensor field = FieldOf(*s.optimizer, holder, f);
        if (field.defined()) live.push_back(field);
      }
    }
  } else if (!source) {
    s.optimizer->state().clear();
  }
  // The per-rank state a checkpoint keeps: copies, loaded back below.
  at::Tensor rng;
  {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    rng = gen.get_state();
  }
  std::map<std::string, at::Tensor> hook =
      s.ddp != nullptr ? s.ddp->CommHookState() : std::map<std::string, at::Tensor>{};
  std::map<std::string, std::map<std::string, at::Tensor>> extra;
  for (const auto& [name, obj] : s.extra) {
    for (const auto& [k, v] : obj->State()) extra[name][k] = v.detach().clone();
  }
  std::vector<at::Tensor> all = live;
  all.push_back(rng);
  for (auto& [k, v] : hook) all.push_back(v);
  for (auto& [name, state] : extra) {
    for (auto& [k, v] : state) all.push_back(v);
  }
  const int64_t bytes = BroadcastByDevice(pg, all, src);
  CheckStateDigest(pg, all, src);
  if (!source) {
    {
      auto gen = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(rng);
    }
    if (!hook.empty()) s.ddp->LoadCommHookState(hook);
    for (const auto& [name, obj] : s.extra) obj->LoadState(extra[name]);
  }
  return bytes;
}

}  // namespace trainyard
