// LocalModel: a ParallelModel that is not parallelized (one rank, or ranks
// that do not synchronize gradients): the model's own parameters, stepped
// as they are.
#ifndef TRAINYARD_WORKER_PARALLEL_LOCAL_MODEL_H_
#define TRAINYARD_WORKER_PARALLEL_LOCAL_MODEL_H_

#include <memory>
#include <vector>

#include "worker/parallel/parallel_model.h"

namespace trainyard {

class LocalModel final : public ParallelModel {
 public:
  LocalModel(const JobSpec& spec, std::shared_ptr<Model> model, c10::Device device);

  void Backward(const at::Tensor& loss, const at::Tensor& output, bool sync) override;
  at::Tensor EvalForward(const at::Tensor& inputs) override { return RunForward(inputs); }
  std::vector<at::Tensor> Parameters() const override;
};

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_PARALLEL_LOCAL_MODEL_H_
