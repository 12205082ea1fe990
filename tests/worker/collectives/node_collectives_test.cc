// NodeCollectives (shared memory within a host, Gloo across hosts) with
// ranks as threads: "hosts" are groups of consecutive ranks, each with its
// own segment and a Gloo group per local rank across them. Its layouts, and
// DDP training against one process over the concatenated batch; the sums
// and broadcasts every DirectCollectives owes are
// direct_collectives_contract_test.cc's.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <cstring>
#include <stdexcept>
#include <vector>

#include "tests/worker/dist_test_util.h"
#include "worker/collectives/node_collectives.h"
#include "worker/collectives/process_group.h"
#include "worker/models/models.h"
#include "worker/parallel/ddp.h"

namespace trainyard {
namespace {

// body(rank, collectives) on `nodes` x `per_node` threads.
bool RunNodes(int nodes, int per_node, const std::function<void(int, NodeCollectives&)>& body) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  return RunThreads(nodes * per_node, [&](int r) {
    auto c = NodeCollectives::Create(store, r, nodes * per_node, per_node, "127.0.0.1", std::chrono::seconds(30));
    body(r, *c);
  });
}

TEST(NodeCollectivesTest, UniformLayoutsOnly) {
  EXPECT_EQ(NodeCollectives::UniformRanksPerHost({0, 0, 1, 1}), 2);
  EXPECT_EQ(NodeCollectives::UniformRanksPerHost({0, 0, 0, 1, 1, 1}), 3);
  EXPECT_EQ(NodeCollectives::UniformRanksPerHost({0, 0, 1, 1, 2, 2}), 2);
  EXPECT_EQ(NodeCollectives::UniformRanksPerHost({0, 0, 0, 0}), 0);     // one host: ShmCollectives
  EXPECT_EQ(NodeCollectives::UniformRanksPerHost({0, 1, 2, 3}), 0);     // one rank per host
  EXPECT_EQ(NodeCollectives::UniformRanksPerHost({0, 1, 0, 1}), 0);     // interleaved
  EXPECT_EQ(NodeCollectives::UniformRanksPerHost({0, 0, 0, 1, 1}), 0);  // uneven
  EXPECT_EQ(NodeCollectives::UniformRanksPerHost({0, 0, 1, 1, 1, 1}), 0);
  EXPECT_EQ(NodeCollectives::UniformRanksPerHost({0, 0}), 0);
}

// DDP over 2 hosts x 2 ranks through NodeCollectives, its buckets in the
// hosts' shared memory: the weights of one process over the whole batch.
TEST(NodeCollectivesTest, DdpTrainsLikeOneProcessOverTheWholeBatch) {
  at::set_num_threads(1);
  constexpr int kNodes = 2, kPer = 2, kRanks = kNodes * kPer, kSteps = 5;
  constexpr int64_t kBatch = 8;
  ModelSpec ms;
  ms.kind = ModelKind::kMlp;
  ms.hidden = {64, 32};
  torch::manual_seed(3);
  auto sample = BuildModel(ms, 7)->sample_shape();
  std::vector<int64_t> shape = {kSteps, kRanks * kBatch};
  shape.insert(shape.end(), sample.begin(), sample.end());
  const at::Tensor inputs = torch::randn(shape);
  const at::Tensor targets = torch::randint(0, 10, {kSteps, kRanks * kBatch}, torch::kLong);
  auto ref = BuildModel(ms, 7);
  torch::optim::SGD ref_opt(ref->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  for (int s = 0; s < kSteps; ++s) {
    ref_opt.zero_grad();
    torch::nn::functional::cross_entropy(ref->forward(inputs[s]), targets[s]).backward();
    ref_opt.step();
  }
  std::vector<std::shared_ptr<Model>> models;
  for (int r = 0; r < kRanks; ++r) models.push_back(BuildModel(ms, 7 + 100 * r));  // rank 0's is broadcast
  std::vector<std::vector<at::Tensor>> results(kRanks);
  auto store = c10::make_intrusive<c10d::HashStore>();
  ASSERT_TRUE(RunThreads(kRanks, [&](int r) {
    auto pg = MakeProcessGroup(Backend::kGloo, store, r, kRanks, "127.0.0.1", std::chrono::seconds(30));
    auto c = NodeCollectives::Create(store, r, kRanks, kPer, "127.0.0.1", std::chrono::seconds(30));
    DdpSpec ds;
    ds.bucket_cap_mb = 0.002;  // several buckets per step
    ds.gradient_as_bucket_view = true;
    auto& model = models[r];
    DistributedDataParallel ddp(model->parameters(), model->buffers(), pg, ds, c.get());
    torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
    for (int s = 0; s < kSteps; ++s) {
      ddp.PrepareForward();
      at::Tensor loss = torch::nn::functional::cross_entropy(model->forward(inputs[s].narrow(0, r * kBatch, kBatch)),
                                                             targets[s].narrow(0, r * kBatch, kBatch));
      ddp.PrepareBackward({});
      loss.backward();
      opt.step();
      for (auto& p : model->parameters()) p.mutable_grad() = at::Tensor();
    }
    if (c->own_resident() == nullptr) throw std::runtime_error("the buckets are not in shared memory");
    for (const auto& p : model->parameters()) results[r].push_back(p.detach().clone());
  }));
  const auto want = ref->parameters();
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_EQ(results[r].size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_TRUE(torch::allclose(results[r][i], want[i], 1e-5, 1e-6))
          << "rank " << r << " param " << i << " max diff " << (results[r][i] - want[i]).abs().max().item<double>();
      EXPECT_TRUE(torch::equal(results[r][i], results[0][i])) << "rank " << r << " param " << i;
    }
  }
  EXPECT_FALSE(torch::allclose(BuildModel(ms, 7)->parameters()[0], want[0]));  // training moved the weights
}

TEST(NodeCollectivesTest, ALayoutTheRanksDoNotDivideIsRefused) {
  // A layout the ranks do not divide is refused before any rendezvous.
  auto store = c10::make_intrusive<c10d::HashStore>();
  EXPECT_THROW(NodeCollectives::Create(store, 0, 5, 2, "127.0.0.1", std::chrono::seconds(1)), std::invalid_argument);
}

}  // namespace
}  // namespace trainyard
