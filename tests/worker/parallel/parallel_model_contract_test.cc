// The ParallelModel contract, run over every implementation behind the seam
// (worker/parallel/parallel_model.h): LocalModel on one rank, DdpModel and
// FsdpModel on two ranks as threads over real Gloo groups, each made by
// MakeParallelModel as the Trainer makes it. Whatever the parallelism: a
// finite step moves the weights and a non-finite one leaves them, the
// gradients are there after a synchronized backward and gone after
// ReleaseGradients, the memory is counted, and ranks that hold the same
// parameters hold the same values after a step.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <map>
#include <mutex>
#include <string>

#include "tests/worker/dist_test_util.h"
#include "worker/base/tensor_hash.h"
#include "worker/collectives/dist_setup.h"
#include "worker/parallel/parallel_model.h"

namespace trainyard {
namespace {

struct Kind {
  std::string name;
  DistributedType type;
  int world;
};

class ParallelModelContract : public ::testing::TestWithParam<Kind> {
 protected:
  JobSpec Spec() const {
    JobSpec s;
    s.model.hidden = {16, 8};
    s.distributed_type = GetParam().type;
    s.num_processes = GetParam().world;
    s.ddp.intra_host_transport = IntraHostTransport::kProcessGroup;
    return s;
  }
  // fn(rank, model) on each rank, with the groups the worker would build.
  void OnRanks(const std::function<void(int, ParallelModel&)>& fn) {
    const JobSpec spec = Spec();
    const int world = GetParam().world;
    at::set_num_threads(1);
    auto store = c10::make_intrusive<c10d::HashStore>();
    RunThreads(world, [&](int r) {
      DistSetup dist;
      if (world > 1) dist = SetUpGroups(spec, store, r, world, "127.0.0.1", std::chrono::seconds(60));
      std::unique_ptr<ParallelModel> pm = MakeParallelModel(spec, world, c10::Device(c10::kCPU), dist.context());
      torch::manual_seed(100 + r);  // each rank its own batch
      fn(r, *pm);
    });
  }
  static void Backward(ParallelModel& pm, const JobSpec& spec) {
    const at::Tensor out = pm.Forward(torch::randn({4, spec.model.input_size}), /*sync=*/true);
    pm.Backward(out.pow(2).mean(), out, /*sync=*/true);
  }
  static std::vector<at::Tensor> Copy(const std::vector<at::Tensor>& ts) {
    std::vector<at::Tensor> out;
    for (const at::Tensor& t : ts) out.push_back(t.detach().clone());
    return out;
  }
};

TEST_P(ParallelModelContract, AFiniteStepMovesTheWeightsANonFiniteOneLeavesThem) {
  const JobSpec spec = Spec();
  OnRanks([&](int r, ParallelModel& pm) {
    const std::vector<at::Tensor> before = Copy(pm.Parameters());
    ASSERT_FALSE(before.empty()) << "rank " << r;
    Backward(pm, spec);
    pm.OptimizerStep(0.1, /*finite=*/false);
    const std::vector<at::Tensor> kept = pm.Parameters();
    for (size_t i = 0; i < kept.size(); ++i) EXPECT_TRUE(torch::equal(kept[i], before[i])) << "rank " << r << ": " << i;
    pm.OptimizerStep(0.1, /*finite=*/true);
    bool moved = false;
    const std::vector<at::Tensor> after = pm.Parameters();
    for (size_t i = 0; i < after.size(); ++i) moved = moved || !torch::equal(after[i], before[i]);
    EXPECT_TRUE(moved) << "rank " << r << ": a finite step left every weight";
  });
}

TEST_P(ParallelModelContract, GradientsAreThereAfterABackwardAndGoneAfterTheirRelease) {
  const JobSpec spec = Spec();
  OnRanks([&](int r, ParallelModel& pm) {
    Backward(pm, spec);
    int defined = 0;
    for (const at::Tensor& g : pm.Gradients()) defined += g.defined() ? 1 : 0;
    EXPECT_GT(defined, 0) << "rank " << r;
    const ModelMemory with = pm.Memory();
    EXPECT_GT(with.params, 0) << "rank " << r;
    EXPECT_GT(with.grads, 0) << "rank " << r;
    pm.OptimizerStep(0.1, true);
    pm.ReleaseGradients();
    for (const at::Tensor& g : pm.Gradients()) EXPECT_FALSE(g.defined()) << "rank " << r;
    EXPECT_EQ(pm.Memory().grads, 0) << "rank " << r;
  });
}

// The implementations whose ranks each hold every parameter (FSDP's hold
// shards of them).
class ReplicatedModelContract : public ParallelModelContract {};

TEST_P(ReplicatedModelContract, RanksHoldingTheSameParametersAgreeAfterAStep) {
  const JobSpec spec = Spec();
  std::mutex mu;
  std::map<int, uint64_t> hashes;
  OnRanks([&](int r, ParallelModel& pm) {
    Backward(pm, spec);  // different batches on each rank
    pm.OptimizerStep(0.1, true);
    std::lock_guard<std::mutex> lock(mu);
    hashes[r] = HashTensors(pm.Parameters());
  });
  for (const auto& [r, h] : hashes) EXPECT_EQ(h, hashes.at(0)) << "rank " << r << " differs from rank 0";
}

INSTANTIATE_TEST_SUITE_P(Implementations, ParallelModelContract,
                         ::testing::Values(Kind{"Local", DistributedType::kNo, 1},
                                           Kind{"Ddp", DistributedType::kDdp, 2},
                                           Kind{"Fsdp", DistributedType::kFsdp, 2}),
                         [](const ::testing::TestParamInfo<Kind>& i) { return i.param.name; });
INSTANTIATE_TEST_SUITE_P(Implementations, ReplicatedModelContract,
                         ::testing::Values(Kind{"Local", DistributedType::kNo, 1},
                                           Kind{"Ddp", DistributedType::kDdp, 2}),
                         [](const ::testing::TestParamInfo<Kind>& i) { return i.param.name; });

}  // namespace
}  // namespace trainyard
