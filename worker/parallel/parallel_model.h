// ParallelModel: the job's model as one rank trains it — alone
// (LocalModel), replicated with DDP (DdpModel) or sharded with FSDP
// (FsdpModel) — together with the optimizer over what the rank holds. The
// Trainer's step goes through it: per micro-batch Forward, the loss, then
// Backward (which synchronizes gradients on the step's last micro-batch);
// then ClipGradients, OptimizerStep and ReleaseGradients. The checkpoint
// code reads the parts through model(), ddp(), fsdp() and optimizer()
// (TrainingState). Used by the training thread only.
#ifndef TRAINYARD_WORKER_PARALLEL_PARALLEL_MODEL_H_
#define TRAINYARD_WORKER_PARALLEL_PARALLEL_MODEL_H_

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "common/job_spec.h"
#include "worker/collectives/dist_context.h"

namespace torch::optim {
class Optimizer;
}

namespace trainyard {

class Model;
class DistributedDataParallel;
class FullyShardedModel;

// Bytes a rank holds, counted from tensor storages (each storage once;
// freed FSDP buffers count zero).
struct ModelMemory {
  int64_t params = 0, grads = 0, optimizer = 0;
  int64_t total() const { return params + grads + optimizer; }
};

class ParallelModel {
 public:
  virtual ~ParallelModel();
  ParallelModel(const ParallelModel&) = delete;
  ParallelModel& operator=(const ParallelModel&) = delete;

  // A micro-batch's forward in training. `sync`: this micro-batch's
  // Backward communicates the gradients (the step's last one; the others
  // accumulate locally, as DDP's no_sync). Under autocast for mixed
  // precision unless the parallelism casts the parameters itself (FSDP);
  // the first forward with samples counts the model's FLOPs.
  at::Tensor Forward(const at::Tensor& inputs, bool sync);
  // Backward of `loss` (scaled as it is to be differentiated) computed from
  // `output` of the last Forward, with the same `sync`; with `sync` the
  // gradients are synchronized across ranks when it returns.
  virtual void Backward(const at::Tensor& loss, const at::Tensor& output, bool sync) = 0;
  // `loss` (of the output of Forward or EvalForward) under the forward's
  // autocast: a loss that applies the output projection itself
  // (Model::projection_left_to_loss) does it in the forward's precision.
  at::Tensor UnderAutocast(const std::function<at::Tensor()>& loss) const;
  // Forward without training (evaluation, under NoGradGuard); call
  // EndEvaluation after the last one.
  virtual at::Tensor EvalForward(const at::Tensor& inputs) = 0;
  virtual void EndEvaluation() {}
  // Train or eval mode of the model's modules.
  void Train(bool on);

  // What the optimizer steps on (the parameters, or FSDP's shards), and
  // their gradients.
  virtual std::vector<at::Tensor> Parameters() const = 0;
  std::vector<at::Tensor> Gradients() const;
  // Clips the synchronized gradients: to a global L2 norm of `max_norm`
  // when > 0 (returns the norm before clipping, else NaN), then element-wise
  // to `clip_value` when > 0. Collective under FSDP when max_norm > 0.
  double ClipGradients(double max_norm, double clip_value);
  // Sets the learning rate, and steps when `finite` (fp16: no inf/NaN).
  void OptimizerStep(double lr, bool finite);
  // Releases the gradients (set_to_none, PyTorch 2's default): the next
  // backward hands its gradients over instead of adding them to zeros.
  void ReleaseGradients();

  ModelMemory Memory() const;
  // The model's forward FLOPs per sample, from the first forward; < 0 before.
  double forward_flops_per_sample() const { return forward_flops_per_sample_; }

  // The parts, for checkpoints, metrics and tests: ddp() and fsdp() are
  // null unless that is how the model is parallelized.
  Model& model() const { return *model_; }
  torch::optim::Optimizer& optimizer() const { return *optimizer_; }
  virtual DistributedDataParallel* ddp() const { return nullptr; }
  virtual FullyShardedModel* fsdp() const { return nullptr; }

  // Replica mode (fault_tolerance.mode replica): from now on gradients are
  // synchronized over dist.process_group (a new membership's group), the
  // same parameters and optimizer kept; a null group drops the old one
  // (nothing trains until the next Rebind). No collective. DDP and FSDP
  // (over dist's shard and replicate groups); LocalModel throws
  // std::logic_error.
  virtual void Rebind(const DistContext& dist);

 protected:
  // `autocast`: Forward runs under autocast when mixed precision asks.
  ParallelModel(const JobSpec& spec, std::shared_ptr<Model> model, c10::Device device, bool autocast);
  // Before a training forward (buffers synchronized, the Reducer prepared).
  virtual void BeforeForward(bool /*sync*/) {}
  virtual at::Tensor RunForward(const at::Tensor& inputs);
  // The global norm clip; returns the norm before clipping.
  virtual double ClipGradNorm(double max_norm);
  // Set once by the implementation's constructor, over Parameters().
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  const JobSpec& spec_;
  std::shared_ptr<Model> model_;
  const c10::Device device_;

 private:
  const bool autocast_;
  double forward_flops_per_sample_ = -1;
};

// The job's `fused` section applied to `model` and this process: the
// attention backend, the fused ops, and the output projection left to a
// chunked loss where it applies (cross-entropy, not FSDP).
void UseFusedKernels(const JobSpec& spec, Model* model);

// Builds the job's model (weights from spec.seed, identical on every rank)
// on `device`, parallelized as spec.distributed_type asks over `dist`
// (collective: DDP and FSDP broadcast rank 0's weights), with its
// optimizer. `spec` must outlive the result.
std::unique_ptr<ParallelModel> MakeParallelModel(const JobSpec& spec, int32_t world_size, c10::Device device,
                                                 const DistContext& dist);

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_PARALLEL_PARALLEL_MODEL_H_
