// NodeCollectives (shared memory within a host, Gloo across hosts) with
// ranks as threads: "hosts" are groups of consecutive ranks, each with its
// own segment and a Gloo group per local rank across them. Checked against
// float64 references, bitwise agreement of every rank, and DDP training
// against one process over the concatenated batch.
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

// Sums of private and resident tensors over 3 hosts x 2 ranks, sizes from
// one float to many segment chunks, against a float64 reference.
TEST(NodeCollectivesTest, SumsMatchAReferenceAndAreIdenticalOnEveryRank) {
  constexpr int kNodes = 3, kPer = 2, kRanks = kNodes * kPer;
  const std::vector<int64_t> sizes = {1, 2, 3, 7, 97, 1000, 70001};
  torch::manual_seed(11);
  std::vector<std::vector<at::Tensor>> inputs(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    for (int64_t n : sizes) inputs[r].push_back(torch::randn({n}));
  }
  std::vector<std::vector<at::Tensor>> outputs(kRanks);
  ASSERT_TRUE(RunNodes(kNodes, kPer, [&](int r, NodeCollectives& c) {
    EXPECT_EQ(c.nodes(), kNodes);
    size_t total = 0;
    for (int64_t n : sizes) total += static_cast<size_t>(n) * sizeof(float);
    if (!c.ReserveResident(total)) throw std::runtime_error("no resident area: " + c.resident_error());
    auto* area = static_cast<float*>(c.own_resident());
    size_t offset = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      for (float divisor : {1.0f, static_cast<float>(kRanks)}) {
        at::Tensor own = inputs[r][i].clone();
        c.AllreduceSum(own, divisor);
        outputs[r].push_back(own);
        // The same values from the resident area, in place.
        at::Tensor resident = torch::from_blob(area + offset, {sizes[i]}, torch::kFloat);
        resident.copy_(inputs[r][i]);
        c.AllreduceSum(resident, divisor);
        outputs[r].push_back(resident.clone());
      }
      offset += static_cast<size_t>(sizes[i]);
    }
  }));
  for (size_t i = 0; i < sizes.size(); ++i) {
    at::Tensor sum = torch::zeros({sizes[i]}, torch::kDouble);
    for (int r = 0; r < kRanks; ++r) sum += inputs[r][i].to(torch::kDouble);
    for (int d = 0; d < 2; ++d) {
      const at::Tensor want = (d == 0 ? sum : sum / kRanks).to(torch::kFloat);
      for (int k = 0; k < 2; ++k) {
        const size_t at = i * 4 + static_cast<size_t>(d) * 2 + static_cast<size_t>(k);
        EXPECT_TRUE(torch::allclose(outputs[0][at], want, 1e-5, 1e-5))
            << "size " << sizes[i] << (d ? " mean" : " sum") << (k ? " resident" : " private") << " max diff "
            << (outputs[0][at] - want).abs().max().item<double>();
        for (int r = 1; r < kRanks; ++r) {
          EXPECT_TRUE(torch::equal(outputs[r][at], outputs[0][at])) << "rank " << r << " differs, size " << sizes[i];
        }
      }
    }
  }
}

TEST(NodeCollectivesTest, BroadcastFromAnyRootAndMaxOfWords) {
  constexpr int kNodes = 2, kPer = 3, kRanks = kNodes * kPer;
  const std::vector<size_t> sizes = {0, 5, 1000, 300000};
  std::vector<std::vector<std::vector<uint8_t>>> got(kRanks);
  std::vector<std::vector<int64_t>> maxes(kRanks);
  ASSERT_TRUE(RunNodes(kNodes, kPer, [&](int r, NodeCollectives& c) {
    for (int root : {0, 4, 2, 5}) {
      for (size_t n : sizes) {
        std::vector<uint8_t> b(n);
        for (size_t j = 0; j < n; ++j) b[j] = static_cast<uint8_t>(r * 31 + j * 7);
        c.Broadcast(b.data(), n, root);
        got[r].push_back(b);
      }
    }
    int64_t words[3] = {r, -r, r == 4 ? 100 : 0};
    c.AllreduceMax(words, 3);
    maxes[r].assign(words, words + 3);
    int64_t too_many[DirectCollectives::kMaxWords + 1] = {};
    EXPECT_THROW(c.AllreduceMax(too_many, DirectCollectives::kMaxWords + 1), std::invalid_argument);
  }));
  size_t k = 0;
  for (int root : {0, 4, 2, 5}) {
    for (size_t n : sizes) {
      std::vector<uint8_t> want(n);
      for (size_t j = 0; j < n; ++j) want[j] = static_cast<uint8_t>(root * 31 + j * 7);
      for (int r = 0; r < kRanks; ++r) EXPECT_EQ(got[r][k], want) << "rank " << r << " root " << root << " n " << n;
      ++k;
    }
  }
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(maxes[r], (std::vector<int64_t>{kRanks - 1, 0, 100})) << "rank " << r;
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
