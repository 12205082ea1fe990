// Sharded collectives over real Gloo (ranks as threads) against references.
#include "worker/collectives/collectives.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "tests/worker/dist_test_util.h"

namespace trainyard {
namespace {

TEST(CollectivesTest, AllGatherAndReduceScatterMatchReferences) {
  constexpr int kWorld = 3;
  constexpr int64_t kShard = 1001;
  for (auto dtype : {at::kFloat, at::kBFloat16, at::kDouble}) {
    torch::manual_seed(3);
    std::vector<at::Tensor> shards, fulls;
    for (int r = 0; r < kWorld; ++r) {
      shards.push_back(torch::randn({kShard}).to(dtype));
      fulls.push_back(torch::randn({kWorld * kShard}).to(dtype));
    }
    std::vector<at::Tensor> gathered(kWorld), scattered(kWorld), reduced(kWorld), broadcast(kWorld);
    RunRanks(kWorld, [&](int rank, c10::intrusive_ptr<c10d::ProcessGroup> pg) {
      auto c = MakeCollectives(pg);
      gathered[rank] = torch::empty({kWorld * kShard}, dtype);
      c->AllGatherInto(gathered[rank], shards[rank]);
      scattered[rank] = torch::empty({kShard}, dtype);
      c->ReduceScatterSum(scattered[rank], fulls[rank]);
      reduced[rank] = fulls[rank].clone();
      c->AllreduceSum(reduced[rank]);
      broadcast[rank] = rank == 1 ? shards[1].clone() : torch::zeros({kShard}, dtype);
      c->Broadcast(broadcast[rank], 1);
    });
    at::Tensor expected_gather = torch::cat(shards);
    at::Tensor sum = torch::zeros({kWorld * kShard}, torch::kDouble);
    for (const auto& f : fulls) sum += f.to(torch::kDouble);
    // bf16 inputs summed in fp32 and rounded once: within one bf16 step.
    const double tol = dtype == at::kBFloat16 ? 2.0 / 256 : 1e-6;
    for (int r = 0; r < kWorld; ++r) {
      EXPECT_TRUE(torch::equal(gathered[r], expected_gather)) << dtype << " rank " << r;
      at::Tensor mine = sum.narrow(0, r * kShard, kShard);
      EXPECT_TRUE(torch::allclose(scattered[r].to(torch::kDouble), mine, tol, tol)) << dtype << " rank " << r;
      EXPECT_TRUE(torch::allclose(reduced[r].to(torch::kDouble), sum, tol, tol)) << dtype << " rank " << r;
      EXPECT_TRUE(torch::equal(reduced[r], reduced[0])) << "ranks disagree";
      EXPECT_TRUE(torch::equal(broadcast[r], shards[1]));
    }
  }
}

TEST(CollectivesTest, RejectsMismatchedSizes) {
  RunRanks(2, [&](int, c10::intrusive_ptr<c10d::ProcessGroup> pg) {
    auto c = MakeCollectives(pg);
    at::Tensor full = torch::zeros({7});
    at::Tensor shard = torch::zeros({3});
    EXPECT_THROW(c->AllGatherInto(full, shard), std::invalid_argument);
    EXPECT_THROW(c->ReduceScatterSum(shard, full), std::invalid_argument);
  });
}

TEST(CollectivesTest, HybridGroupsSplitNodesAndReplicas) {
  constexpr int kWorld = 4;
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<double> shard_sum(kWorld), rep_sum(kWorld);
  std::vector<int> shard_size(kWorld), rep_size(kWorld);
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      HybridGroups g = MakeHybridGroups(store, Backend::kGloo, r, kWorld, 2, "127.0.0.1", std::chrono::seconds(30));
      at::Tensor a = torch::full({1}, static_cast<double>(1 << r), torch::kDouble);
      at::Tensor b = a.clone();
      g.shard->AllreduceSum(a);
      g.replicate->AllreduceSum(b);
      shard_sum[r] = a.item<double>();
      rep_sum[r] = b.item<double>();
      shard_size[r] = g.shard->size();
      rep_size[r] = g.replicate->size();
    });
  }
  for (auto& t : threads) t.join();
  // Values 1,2,4,8 on ranks 0..3: nodes {0,1} and {2,3}; replicas {0,2}, {1,3}.
  EXPECT_EQ(shard_sum, (std::vector<double>{3, 3, 12, 12}));
  EXPECT_EQ(rep_sum, (std::vector<double>{5, 10, 5, 10}));
  EXPECT_EQ(shard_size, (std::vector<int>{2, 2, 2, 2}));
  EXPECT_EQ(rep_size, (std::vector<int>{2, 2, 2, 2}));
}

}  // namespace
}  // namespace trainyard
