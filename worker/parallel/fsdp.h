// FullyShardedModel: Trainyard's C++ FSDP over a Model's layers.
//
// Each unit (a run of layers chosen by the wrap policy, plus a root unit for
// every parameter no wrapped unit owns) keeps its parameters in one flat
// buffer padded to a multiple of the shard group size; each rank owns one
// contiguous shard, a leaf tensor the optimizer steps on (so optimizer state
// is sharded too). Before a unit's forward its full parameters are gathered
// into that buffer, which the module's own parameters are views of; after
// its backward (detected by post hooks on the parameters' gradient
// accumulators) the flat gradient is reduce-scattered into the shard's
// gradient, all-reduced across replicas for HYBRID strategies and averaged
// over the world. FULL_SHARD frees gathered parameters after each unit's
// forward and gathers them again before its backward (a hook on the unit's
// output); SHARD_GRAD_OP keeps them from forward to backward; both free them
// after backward. NO_SHARD is a shard group of one: parameters stay in place
// and gradients are all-reduced (DDP's arithmetic).
//
// Collectives are issued on the thread that runs forward and backward, in
// unit order, which is the same on every rank. Not thread-safe.
#ifndef TRAINYARD_WORKER_PARALLEL_FSDP_H_
#define TRAINYARD_WORKER_PARALLEL_FSDP_H_

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "worker/collectives/collectives.h"
#include "worker/models/models.h"

namespace trainyard {

struct FsdpOptions {
  ShardingStrategy strategy = ShardingStrategy::kFullShard;
  WrapPolicy wrap_policy = WrapPolicy::kSizeBased;
  // SIZE_BASED_WRAP: consecutive layers are grouped until a unit holds at
  // least this many parameters.
  int64_t min_num_params = 100000000;
  // TRANSFORMER_BASED_WRAP: every layer of one of these types is a unit.
  std::vector<std::string> layer_types;
  // Broadcast rank 0's initial weights before sharding.
  bool sync_module_states = true;
  // Keep shards (and so their gradients and optimizer state) in CPU memory;
  // each unit's shard is copied to `compute_device` for its all-gather and
  // its reduced gradient copied back. With a CPU compute device (this build)
  // the copies are no-ops on the same path.
  bool offload_params = false;
  c10::Device compute_device = c10::Device(c10::kCPU);
  // Start the next unit's all-gather while this one computes: in forward
  // (forward_prefetch), and in backward before (BACKWARD_PRE) or after
  // (BACKWARD_POST) the current unit's gradient computation.
  bool forward_prefetch = false;
  BackwardPrefetch backward_prefetch = BackwardPrefetch::kBackwardPre;
  // Mixed precision (Accelerate's bf16 for FSDP): shards stay fp32; gathered
  // parameters, compute and gradient reduction run in this dtype;
  // floating-point forward inputs are cast to it. kFloat = off.
  at::ScalarType param_dtype = at::kFloat;
};

struct FsdpUnitInfo {
  std::vector<size_t> layers;  // indices into Model::layers(); empty for the root
  int64_t num_params = 0;      // parameter values (unpadded)
  int64_t shard_numel = 0;
  // The unit's parameters, as indices into Model::parameters(), and where
  // each starts in the flat buffer (rank r's shard is elements
  // [r * shard_numel, (r + 1) * shard_numel) of it).
  std::vector<size_t> params;
  std::vector<int64_t> offsets;
};

class FullyShardedModel {
 public:
  // `shard_group`: ranks sharing one copy of the parameters (the world for
  // FULL_SHARD/SHARD_GRAD_OP, a node for HYBRID, null for NO_SHARD).
  // `replicate_group`: ranks holding the same shard (null for FULL_SHARD and
  // SHARD_GRAD_OP, the world for NO_SHARD). Both must outlive this object.
  FullyShardedModel(std::shared_ptr<Model> model, FsdpOptions options, Collectives* shard_group,
                    Collectives* replicate_group, int32_t world_size);
  ~FullyShardedModel();

  at::Tensor Forward(const at::Tensor& input);
  // Call after the loss is computed and before backward().
  void PrepareBackward();
  // Call after backward(): finishes units whose hooks did not fire (unused
  // parameters) and frees every gathered buffer.
  void FinishBackward();

  // Clips the gradients (call after FinishBackward) so that their global L2
  // norm — over every shard of every unit, as if unsharded — is at most
  // `max_norm`; returns the norm before clipping. Collective over the shard
  // group. Replicas hold identical shards and are not counted twice.
  double ClipGradNorm(double max_norm);

  // The shards, in unit order: what the optimizer steps on.
  std::vector<at::Tensor> ShardParameters() const;
  // Gathers the full parameters (collective), in Model::parameters() order.
  std::vector<at::Tensor> FullParameters();
  const std::vector<FsdpUnitInfo>& units() const;
  // This rank's place: its shard within the shard group, and which replica
  // of the shards it holds (0 on the first node, or the only one).
  int32_t shard_rank() const;
  int32_t shard_size() const;
  int32_t replica_rank() const;
  // The shard group (null when unsharded), and the replicate group (null
  // without replicas).
  Collectives* shard_group() const;
  Collectives* replicate_group() const;
  // Replica mode (fault_tolerance.mode replica): from now on over these
  // groups (a new membership's), of `world_size` ranks in all; the shards,
  // their layout and the optimizer's state stay. The shard group must have
  // the size and give this rank the place it had (std::logic_error
  // otherwise); null groups drop the old ones (nothing may run until the
  // next Rebind). What a step interrupted by a broken group left behind
  // (gathered units, prefetches, partial gradients) is dropped. No
  // collective.
  void Rebind(Collectives* shard_group, Collectives* replicate_group, int32_t world_size);

  // Cumulative collective traffic of this rank.
  struct CommCounters {
    int64_t allgather_bytes = 0;       // payload gathered (full unit sizes)
    int64_t allgathers = 0;            // all-gathers issued (prefetched ones included)
    int64_t reduce_scatter_bytes = 0;  // gradient payload reduced (incl. replica all-reduce)
    int64_t nanos = 0;                 // time inside collectives (waiting, for prefetched gathers)
    int64_t prefetches = 0;            // all-gathers started ahead of need
  };
  const CommCounters& comm() const;
  Model& model();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_PARALLEL_FSDP_H_
