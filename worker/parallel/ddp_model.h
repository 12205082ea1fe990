// DdpModel: a ParallelModel replicated on every rank with
// DistributedDataParallel (worker/ddp.h): rank 0's weights broadcast at
// construction, buffers synchronized before each forward, gradients
// averaged across ranks during the backward of the step's last micro-batch
// (the others accumulate locally, as no_sync).
#ifndef TRAINYARD_WORKER_PARALLEL_DDP_MODEL_H_
#define TRAINYARD_WORKER_PARALLEL_DDP_MODEL_H_

#include <memory>
#include <vector>

#include "worker/parallel/parallel_model.h"

namespace trainyard {

class DdpModel final : public ParallelModel {
 public:
  // Collective over dist.process_group (required); gradients go through
  // dist.shm when set.
  DdpModel(const JobSpec& spec, std::shared_ptr<Model> model, c10::Device device, const DistContext& dist);
  ~DdpModel() override;

  void Backward(const at::Tensor& loss, const at::Tensor& output, bool sync) override;
  at::Tensor EvalForward(const at::Tensor& inputs) override { return RunForward(inputs); }
  std::vector<at::Tensor> Parameters() const override;
  DistributedDataParallel* ddp() const override { return ddp_.get(); }
  void Rebind(const DistContext& dist) override;

 protected:
  void BeforeForward(bool sync) override;

 private:
  std::unique_ptr<DistributedDataParallel> ddp_;
};

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_PARALLEL_DDP_MODEL_H_
