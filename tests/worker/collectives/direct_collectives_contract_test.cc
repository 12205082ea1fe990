// DirectCollectivesContract: what worker/collectives/direct_collectives.h
// promises, run over both implementations with 6 ranks as threads —
// ShmCollectives (one host, one segment) and NodeCollectives (3 "hosts" of
// 2 consecutive ranks, a segment each, Gloo across them). Sums of private
// and resident tensors against a float64 reference and bitwise alike on
// every rank; broadcasts from any root; the maximum of words. Each
// implementation's own tests cover the rest (chunking, layouts, DDP).
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <functional>
#include <memory>
#include <stdexcept>
#include <vector>

#include "tests/worker/dist_test_util.h"
#include "worker/collectives/node_collectives.h"
#include "worker/collectives/shm_collectives.h"

namespace trainyard {
namespace {

constexpr int kRanks = 6;

struct ShmRig {
  static std::unique_ptr<DirectCollectives> Make(const c10::intrusive_ptr<c10d::Store>& store, int r) {
    // A 4 KiB segment chunk: the larger tensors go through it in pieces.
    return ShmCollectives::Create(store, r, kRanks, "contract", 4096, std::chrono::seconds(30));
  }
};

struct NodeRig {
  static std::unique_ptr<DirectCollectives> Make(const c10::intrusive_ptr<c10d::Store>& store, int r) {
    auto c = NodeCollectives::Create(store, r, kRanks, /*ranks_per_host=*/2, "127.0.0.1", std::chrono::seconds(30));
    if (c->nodes() != 3) throw std::runtime_error("not 3 hosts of 2 ranks");
    return c;
  }
};

template <typename Rig>
class DirectCollectivesContract : public ::testing::Test {
 protected:
  // body(rank, collectives) on kRanks threads; true when no rank threw.
  static bool Run(const std::function<void(int, DirectCollectives&)>& body) {
    auto store = c10::make_intrusive<c10d::HashStore>();
    return RunThreads(kRanks, [&](int r) {
      std::unique_ptr<DirectCollectives> c = Rig::Make(store, r);
      if (c->rank() != r || c->world_size() != kRanks) throw std::runtime_error("wrong rank or world size");
      body(r, *c);
    });
  }
};

using Rigs = ::testing::Types<ShmRig, NodeRig>;
TYPED_TEST_SUITE(DirectCollectivesContract, Rigs);

// Sums of private and resident tensors, sizes from one float to many
// segment chunks, against a float64 reference.
TYPED_TEST(DirectCollectivesContract, SumsMatchAReferenceAndAreIdenticalOnEveryRank) {
  const std::vector<int64_t> sizes = {1, 2, 3, 7, 97, 1000, 70001};
  torch::manual_seed(11);
  std::vector<std::vector<at::Tensor>> inputs(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    for (int64_t n : sizes) inputs[r].push_back(torch::randn({n}));
  }
  std::vector<std::vector<at::Tensor>> outputs(kRanks);
  ASSERT_TRUE(this->Run([&](int r, DirectCollectives& c) {
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

TYPED_TEST(DirectCollectivesContract, BroadcastFromAnyRootAndMaxOfWords) {
  const std::vector<size_t> sizes = {0, 5, 1000, 300000};
  std::vector<std::vector<std::vector<uint8_t>>> got(kRanks);
  std::vector<std::vector<int64_t>> maxes(kRanks);
  ASSERT_TRUE(this->Run([&](int r, DirectCollectives& c) {
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

}  // namespace
}  // namespace trainyard
