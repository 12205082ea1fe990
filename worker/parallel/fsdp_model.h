// FsdpModel: a ParallelModel sharded with FullyShardedModel (worker/fsdp.h)
// as the job's fsdp section asks: the optimizer steps on this rank's shards,
// gradients are reduce-scattered in every micro-batch's backward and
// accumulated in the shards, the norm clip is taken over all shards, and
// buffers (BatchNorm statistics) are kept whole on every rank (rank 0's
// before each forward, with ddp.broadcast_buffers). Mixed precision casts
// the gathered parameters instead of autocasting.
#ifndef TRAINYARD_WORKER_PARALLEL_FSDP_MODEL_H_
#define TRAINYARD_WORKER_PARALLEL_FSDP_MODEL_H_

#include <memory>
#include <vector>

#include "worker/parallel/parallel_model.h"

namespace trainyard {

class FsdpModel final : public ParallelModel {
 public:
  // Collective over dist's shard and replicate groups (null with one rank);
  // in replica mode over the shard group only (a replacement replica builds
  // its model while the others train; the heal brings their state).
  FsdpModel(const JobSpec& spec, std::shared_ptr<Model> model, c10::Device device, int32_t world_size,
            const DistContext& dist);
  ~FsdpModel() override;

  void Backward(const at::Tensor& loss, const at::Tensor& output, bool sync) override;
  at::Tensor EvalForward(const at::Tensor& inputs) override { return RunForward(inputs); }
  // Frees the gathered parameters (no gradients were made).
  void EndEvaluation() override;
  std::vector<at::Tensor> Parameters() const override;
  FullyShardedModel* fsdp() const override { return fsdp_.get(); }
  // Replica mode: over a new membership's shard and replicate groups.
  void Rebind(const DistContext& dist) override;

 protected:
  void BeforeForward(bool sync) override;
  at::Tensor RunForward(const at::Tensor& inputs) override;
  double ClipGradNorm(double max_norm) override;

 private:
  c10::intrusive_ptr<c10d::ProcessGroup> pg_;
  std::unique_ptr<FullyShardedModel> fsdp_;
  std::vector<at::Tensor> buffers_;  // synchronized before each forward
};

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_PARALLEL_FSDP_MODEL_H_
