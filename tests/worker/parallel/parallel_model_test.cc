// ParallelModel on one rank: MakeParallelModel picks LocalModel, whose step
// (Forward, Backward, ClipGradients, OptimizerStep) is bit for bit the step
// the model and its optimizer take alone; clipping by norm reports the norm
// only when asked; ReleaseGradients leaves no gradient behind. DDP and FSDP
// behind the same seam are tested through the Trainer (trainer_test,
// ddp_test, fsdp_test).
#include "worker/parallel/parallel_model.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "worker/models/models.h"
#include "worker/models/optimizer.h"
#include "worker/parallel/local_model.h"

namespace trainyard {
namespace {

TEST(ParallelModel, OneRankStepsAsTheModelAndItsOptimizerAlone) {
  // Bit for bit needs one summation order: on one thread, since the BLAS
  // may split a product over fewer threads when the machine is busy.
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  struct Restore {
    int n;
    ~Restore() { at::set_num_threads(n); }
  } restore{threads};
  JobSpec spec;
  spec.model.hidden = {16};
  spec.optimizer.kind = OptimizerKind::kAdamW;
  std::unique_ptr<ParallelModel> pm = MakeParallelModel(spec, 1, c10::Device(c10::kCPU), DistContext{});
  EXPECT_NE(dynamic_cast<LocalModel*>(pm.get()), nullptr);
  EXPECT_EQ(pm->ddp(), nullptr);
  EXPECT_EQ(pm->fsdp(), nullptr);
  EXPECT_LT(pm->forward_flops_per_sample(), 0) << "not counted before the first forward";

  std::shared_ptr<Model> alone = BuildModel(spec.model, spec.seed);
  std::unique_ptr<torch::optim::Optimizer> optimizer =
      MakeOptimizer(spec.optimizer, alone->parameters(), spec.fused.optimizer);  // as the job steps
  const at::Tensor x = torch::randn({4, spec.model.input_size});

  const at::Tensor out = pm->Forward(x, /*sync=*/true);
  pm->Backward(out.pow(2).mean(), out, /*sync=*/true);
  EXPECT_GT(pm->forward_flops_per_sample(), 0);
  EXPECT_TRUE(std::isnan(pm->ClipGradients(0, 0))) << "no norm unless clipping by norm";
  const double norm = pm->ClipGradients(0.5, 0);
  pm->OptimizerStep(0.01, /*finite=*/true);
  const ModelMemory held = pm->Memory();
  EXPECT_GT(held.params, 0);
  EXPECT_EQ(held.grads, held.params) << "one fp32 gradient per parameter";
  EXPECT_EQ(held.optimizer, 2 * held.params) << "AdamW: two moments per parameter";
  pm->ReleaseGradients();
  for (const at::Tensor& g : pm->Gradients()) EXPECT_FALSE(g.defined());
  EXPECT_EQ(pm->Memory().grads, 0);

  alone->forward(x).pow(2).mean().backward();
  EXPECT_EQ(norm, torch::nn::utils::clip_grad_norm_(alone->parameters(), 0.5));
  SetLearningRate(*optimizer, 0.01);
  optimizer->step();
  const std::vector<at::Tensor> mine = pm->Parameters(), theirs = alone->parameters();
  ASSERT_EQ(mine.size(), theirs.size());
  for (size_t i = 0; i < mine.size(); ++i) {
    EXPECT_TRUE(torch::equal(mine[i], theirs[i]))
        << i << ": max difference " << (mine[i] - theirs[i]).abs().max().item<double>();
  }
}

TEST(ParallelModel, ANonFiniteStepLeavesTheWeights) {
  JobSpec spec;
  spec.model.hidden = {8};
  std::unique_ptr<ParallelModel> pm = MakeParallelModel(spec, 1, c10::Device(c10::kCPU), DistContext{});
  std::vector<at::Tensor> before;
  for (const at::Tensor& p : pm->Parameters()) before.push_back(p.clone());
  const at::Tensor out = pm->Forward(torch::randn({2, spec.model.input_size}), true);
  pm->Backward(out.sum(), out, true);
  pm->OptimizerStep(0.1, /*finite=*/false);
  const std::vector<at::Tensor> after = pm->Parameters();
  for (size_t i = 0; i < after.size(); ++i) EXPECT_TRUE(torch::equal(after[i], before[i])) << i;
}

}  // namespace
}  // namespace trainyard
