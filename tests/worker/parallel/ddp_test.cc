// DDP correctness over real Gloo process groups (ranks as threads sharing a
// HashStore): parameters after several steps equal a single-process run over
// the concatenated batch.
#include <c10/core/StorageImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <functional>
#include <thread>

#include "tests/worker/dist_test_util.h"
#include "tests/worker/rank_processes.h"
#include "worker/collectives/process_group.h"
#include "worker/collectives/shm_collectives.h"
#include "worker/data/data.h"
#include "worker/data/distributed_sampler.h"
#include "worker/data/synthetic_dataset.h"
#include "worker/models/models.h"
#include "worker/parallel/ddp.h"
#include "worker/train/trainer.h"

namespace trainyard {
namespace {

constexpr int kWorld = 2;
constexpr int kSteps = 6;
constexpr int64_t kPerRankBatch = 16;

std::unique_ptr<torch::optim::Optimizer> MakeOpt(OptimizerKind kind, const std::vector<at::Tensor>& params) {
  if (kind == OptimizerKind::kSgd) {
    return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(0.05).momentum(0.9));
  }
  return std::make_unique<torch::optim::AdamW>(params, torch::optim::AdamWOptions(1e-3).weight_decay(0.01));
}

struct Case {
  ModelKind model;
  OptimizerKind optimizer;
  double bucket_cap_mb;
  bool grad_as_bucket_view;
  bool shm = false;
  friend void PrintTo(const Case& c, std::ostream* os) {
    *os << ModelKindName(c.model) << "/" << OptimizerKindName(c.optimizer) << "/bucket_mb=" << c.bucket_cap_mb
        << (c.grad_as_bucket_view ? "/bucket_view" : "") << (c.shm ? "/shm" : "/gloo");
  }
};

class DdpEquivalence : public ::testing::TestWithParam<Case> {};

TEST_P(DdpEquivalence, MatchesSingleProcessOverConcatenatedBatch) {
  at::set_num_threads(1);
  const Case c = GetParam();
  ModelSpec ms;
  ms.kind = c.model;
  ms.hidden = {64, 32};
  const uint64_t seed = 7;
  // Fresh random inputs and labels; rank r takes rows [r*B, (r+1)*B).
  torch::manual_seed(1234);
  auto sample = BuildModel(ms, seed)->sample_shape();
  std::vector<int64_t> shape = {kSteps, kWorld * kPerRankBatch};
  shape.insert(shape.end(), sample.begin(), sample.end());
  torch::manual_seed(99);
  at::Tensor inputs = torch::randn(shape);
  at::Tensor targets = torch::randint(0, 10, {kSteps, kWorld * kPerRankBatch}, torch::kLong);

  // Reference: one process, whole batch.
  auto ref = BuildModel(ms, seed);
  auto ref_opt = MakeOpt(c.optimizer, ref->parameters());
  for (int s = 0; s < kSteps; ++s) {
    ref_opt->zero_grad();
    torch::nn::functional::cross_entropy(ref->forward(inputs[s]), targets[s]).backward();
    ref_opt->step();
  }

  std::vector<std::vector<at::Tensor>> results(kWorld);
  std::vector<std::shared_ptr<Model>> models;
  for (int r = 0; r < kWorld; ++r) models.push_back(BuildModel(ms, seed + 100 * r));  // DDP must broadcast rank 0's
  std::vector<std::unique_ptr<ShmCollectives>> shm;
  RunRanks(
      kWorld,
      [&](int rank, c10::intrusive_ptr<c10d::ProcessGroup> pg) {
        auto& model = models[rank];
        DdpSpec ds;
        ds.bucket_cap_mb = c.bucket_cap_mb;
        ds.gradient_as_bucket_view = c.grad_as_bucket_view;
        DistributedDataParallel ddp(model->parameters(), model->buffers(), pg, ds, c.shm ? shm[rank].get() : nullptr);
        auto opt = MakeOpt(c.optimizer, model->parameters());
        for (int s = 0; s < kSteps; ++s) {
          at::Tensor x = inputs[s].narrow(0, rank * kPerRankBatch, kPerRankBatch);
          at::Tensor y = targets[s].narrow(0, rank * kPerRankBatch, kPerRankBatch);
          ddp.PrepareForward();
          at::Tensor loss = torch::nn::functional::cross_entropy(model->forward(x), y);
          ddp.PrepareBackward({});
          loss.backward();
          opt->step();
          if (c.shm) ASSERT_NE(shm[rank]->resident(rank), nullptr) << "the buckets are not in shared memory";
          if (c.shm && c.grad_as_bucket_view) {
            // The gradients are views of buckets that live in shared memory.
            const auto* area = static_cast<const char*>(shm[rank]->resident(rank));
            for (const auto& p : model->parameters()) {
              const auto* g = static_cast<const char*>(p.grad().data_ptr());
              EXPECT_TRUE(g >= area && g + p.grad().nbytes() <= area + shm[rank]->resident_bytes());
            }
          }
          for (auto& p : model->parameters()) p.mutable_grad() = at::Tensor();  // set_to_none, as the trainer
        }
        for (const auto& p : model->parameters()) results[rank].push_back(p.detach().clone());
      },
      c.shm, &shm);

  auto ref_params = ref->parameters();
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_EQ(results[r].size(), ref_params.size());
    for (size_t i = 0; i < ref_params.size(); ++i) {
      // fp32: the averaged per-rank gradients and the full-batch gradient
      // differ by summation order, which the CPU's kernels pick by shape: a
      // half batch and a whole one are blocked differently. On an AMD EPYC
      // the cnn's parameters ended up to 5.5e-6 apart after the 6 steps; a
      // reduction gone wrong (a sum for a mean, a bucket not reduced) moves
      // them by ~1e-3, over a hundred times this tolerance.
      EXPECT_TRUE(torch::allclose(results[r][i], ref_params[i], /*rtol=*/1e-4, /*atol=*/1e-5))
          << "rank " << r << " param " << i << " max diff "
          << (results[r][i] - ref_params[i]).abs().max().item<double>();
    }
  }
  // The model really changed (the test cannot pass on untouched weights).
  auto init = BuildModel(ms, seed)->parameters();
  EXPECT_FALSE(torch::allclose(init[0], ref_params[0]));
}

INSTANTIATE_TEST_SUITE_P(Models, DdpEquivalence,
                         ::testing::Values(Case{ModelKind::kMlp, OptimizerKind::kSgd, 25, false},
                                           Case{ModelKind::kMlp, OptimizerKind::kAdamW, 25, false},
                                           // tiny buckets: several buckets per step
                                           Case{ModelKind::kMlp, OptimizerKind::kSgd, 0.002, false},
                                           Case{ModelKind::kMlp, OptimizerKind::kSgd, 0.002, true},
                                           Case{ModelKind::kCnn, OptimizerKind::kSgd, 0.05, false},
                                           Case{ModelKind::kMlp, OptimizerKind::kSgd, 25, false, true},
                                           Case{ModelKind::kMlp, OptimizerKind::kAdamW, 0.002, true, true},
                                           Case{ModelKind::kCnn, OptimizerKind::kSgd, 0.05, false, true},
                                           Case{ModelKind::kCnn, OptimizerKind::kSgd, 0.05, true, true}));

TEST(DistributedSamplerTest, ShardsAreDisjointAndCoverTheDataset) {
  const int64_t n = 103;
  for (bool shuffle : {false, true}) {
    std::vector<int> seen(n, 0);
    int64_t total = 0;
    for (int r = 0; r < 3; ++r) {
      DistributedSampler s(n, r, 3, shuffle, 5);
      auto idx = s.Indices(2);
      EXPECT_EQ(static_cast<int64_t>(idx.size()), s.num_samples());
      for (int64_t i : idx) seen[i]++;
      total += idx.size();
    }
    EXPECT_EQ(total, 105);  // padded to a multiple of the world size
    int dupes = 0;
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_GE(seen[i], 1) << i;
      dupes += seen[i] - 1;
    }
    EXPECT_EQ(dupes, 2);  // exactly the padding
  }
  DistributedSampler a(100, 0, 2, true, 5), b(100, 0, 2, true, 5);
  EXPECT_EQ(a.Indices(0), b.Indices(0));  // deterministic from the seed
  EXPECT_NE(a.Indices(0), a.Indices(1));  // reshuffled per epoch
}

TEST(SyntheticDatasetTest, DeterministicAndLearnable) {
  SyntheticDataset d({784}, 10, 1000, 3);
  Batch a = d.Get({1, 5, 9});
  Batch b = d.Get({9, 5, 1});
  EXPECT_TRUE(torch::equal(a.inputs[0], b.inputs[2]));
  EXPECT_EQ(a.targets[2].item<int64_t>(), b.targets[0].item<int64_t>());
  Batch all = d.Get([] {
    std::vector<int64_t> v(1000);
    std::iota(v.begin(), v.end(), 0);
    return v;
  }());
  // Every class occurs: the teacher spreads labels.
  EXPECT_EQ(std::get<0>(at::_unique(all.targets)).size(0), 10);
}

// Images carry their label in each channel's mean, which a convolution with
// global pooling can see (a random pattern over all pixels it cannot): the
// nearest class mean of 3 per-channel means, fitted on 2,000 samples, labels
// 1,000 others far above chance.
TEST(SyntheticDatasetTest, ImagesCarryTheirLabelInChannelMeans) {
  SyntheticDataset d({3, 32, 32}, 10, 3000, 5);
  std::vector<int64_t> idx(3000);
  std::iota(idx.begin(), idx.end(), 0);
  Batch all = d.Get(idx);
  at::Tensor means = all.inputs.mean({2, 3});  // [3000, 3]
  at::Tensor fit = means.slice(0, 0, 2000), test = means.slice(0, 2000);
  at::Tensor fit_y = all.targets.slice(0, 0, 2000), test_y = all.targets.slice(0, 2000);
  at::Tensor centers = at::zeros({10, 3});
  for (int64_t c = 0; c < 10; ++c) centers[c] = fit.index({fit_y == c}).mean(0);
  at::Tensor predicted = at::cdist(test, centers).argmin(1);
  const double accuracy = predicted.eq(test_y).to(at::kDouble).mean().item<double>();
  EXPECT_GT(accuracy, 0.8) << "chance is 0.1";
}

// The whole trainer on 2 ranks: loss falls, and a stop seen by one rank stops
// both after the same step.
TEST(TrainerTest, TwoRanksTrainAndStopTogether) {
  at::set_num_threads(1);
  JobSpec spec;
  spec.model.hidden = {32};
  spec.data.batch_size = 32;
  spec.data.num_samples = 2048;
  spec.optimizer.lr = 3e-3;
  spec.max_steps = 120;
  spec.num_processes = 2;
  std::vector<TrainResult> results(2);
  RunRanks(2, [&](int rank, c10::intrusive_ptr<c10d::ProcessGroup> pg) {
    Trainer t(spec, rank, 2, DistContext{pg, nullptr}, nullptr, nullptr);
    results[rank] = t.Run();
  });
  for (const auto& r : results) {
    EXPECT_EQ(r.final_step, 120);
    EXPECT_FALSE(r.stopped);
    EXPECT_LT(r.last_loss, r.first_loss * 0.8) << r.first_loss << " -> " << r.last_loss;
  }

  // find_unused_parameters: the Reducer walks the graph from the outputs.
  spec.ddp.find_unused_parameters = true;
  spec.max_steps = 5;
  RunRanks(2, [&](int rank, c10::intrusive_ptr<c10d::ProcessGroup> pg) {
    Trainer t(spec, rank, 2, DistContext{pg, nullptr}, nullptr, nullptr);
    results[rank] = t.Run();
  });
  for (const auto& r : results) EXPECT_EQ(r.final_step, 5);
  spec.ddp.find_unused_parameters = false;
  spec.max_steps = 120;

  TrainerControl stop_rank1;
  struct StopAt : MetricsSink {
    TrainerControl* flag;
    void OnStep(const StepMetrics& m) override {
      if (m.step == 17) flag->RequestStop();
    }
  } sink;
  sink.flag = &stop_rank1;
  RunRanks(2, [&](int rank, c10::intrusive_ptr<c10d::ProcessGroup> pg) {
    Trainer t(spec, rank, 2, DistContext{pg, nullptr}, rank == 1 ? &sink : nullptr, rank == 1 ? &stop_rank1 : nullptr);
    results[rank] = t.Run();
  });
  // The flag is raised during step 17, after that step's control exchange
  // began; the next exchange carries it, so both ranks end after step 18.
  for (const auto& r : results) {
    EXPECT_TRUE(r.stopped);
    EXPECT_EQ(r.final_step, 18);
  }
}

// Runs `body(rank, shm)` on `ranks` threads, each with its own
// ShmCollectives over one store (segment chunks of `chunk_bytes`). True when
// no rank threw; each error is reported as a test failure.
bool RunShmRanks(int ranks, const std::string& key, size_t chunk_bytes,
                 const std::function<void(int, ShmCollectives&)>& body) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  return RunThreads(ranks, [&](int r) {
    // A rank that fails leaves the others waiting: not for 5 minutes.
    auto shm = ShmCollectives::Create(store, r, ranks, key, chunk_bytes, std::chrono::seconds(20));
    body(r, *shm);
  });
}

// Shared-memory allreduce against a float64 reference, across sizes that are
// smaller than, equal to and several times the segment's chunk.
TEST(ShmCollectivesTest, SumsMatchAReferenceAndAreIdenticalOnEveryRank) {
  constexpr int kRanks = 3;
  const std::vector<int64_t> sizes = {1, 2, 7, 96, 97, 1000, 12345};
  torch::manual_seed(5);
  std::vector<std::vector<at::Tensor>> inputs(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    for (int64_t n : sizes) inputs[r].push_back(torch::randn({n}));
  }
  std::vector<std::vector<at::Tensor>> outputs(kRanks), means(kRanks);
  // A 384-byte segment chunk (96 floats): most tensors need several chunks.
  ASSERT_TRUE(RunShmRanks(kRanks, "sum", 384, [&](int r, ShmCollectives& shm) {
    for (int repeat = 0; repeat < 3; ++repeat) {
      outputs[r].clear();
      for (const auto& t : inputs[r]) {
        at::Tensor x = t.clone();
        shm.AllreduceSum(x);
        outputs[r].push_back(x);
      }
    }
    for (const auto& t : inputs[r]) {  // the mean: divided in the same pass
      at::Tensor x = t.clone();
      shm.AllreduceSum(x, static_cast<float>(kRanks));
      means[r].push_back(x);
    }
  }));
  for (size_t i = 0; i < sizes.size(); ++i) {
    at::Tensor ref = torch::zeros({sizes[i]}, torch::kDouble);
    for (int r = 0; r < kRanks; ++r) ref += inputs[r][i].to(torch::kDouble);
    for (int r = 0; r < kRanks; ++r) {
      // fp32 sum of 3 terms: within a few ulps of the exact sum.
      EXPECT_TRUE(torch::allclose(outputs[r][i].to(torch::kDouble), ref, 1e-6, 1e-6)) << "size " << sizes[i];
      EXPECT_TRUE(torch::equal(outputs[r][i], outputs[0][i])) << "ranks disagree at size " << sizes[i];
      // Bitwise the sum divided afterwards (what DDP's mean used to be).
      EXPECT_TRUE(torch::equal(means[r][i], outputs[0][i] / kRanks)) << "mean at size " << sizes[i];
    }
  }
}

// Tensors in the resident area (where DDP keeps its buckets) sum in place
// to bitwise what the copying path gives, at any offset and length; ranks
// that pass different places are all told so.
TEST(ShmCollectivesTest, ResidentTensorsSumLikePrivateOnesAndRanksMustAgree) {
  constexpr int kRanks = 3;
  // (offset in floats, length): unaligned starts and lengths, slices of a
  // cache line or less per rank, one tensor spanning most of the area.
  const std::vector<std::pair<size_t, size_t>> places = {{0, 1}, {3, 7}, {16, 48}, {100, 1001}, {2000, 30000}};
  constexpr size_t kAreaFloats = 40000;
  torch::manual_seed(11);
  std::vector<std::vector<at::Tensor>> inputs(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    for (const auto& pl : places) inputs[r].push_back(torch::randn({static_cast<int64_t>(pl.second)}));
  }
  std::vector<std::vector<at::Tensor>> resident(kRanks), reference(kRanks);
  std::vector<int> disagreements(kRanks, 0);
  std::vector<at::Tensor> kept(kRanks);
  ASSERT_TRUE(RunShmRanks(kRanks, "resident", 384, [&](int r, ShmCollectives& shm) {
    if (!shm.ReserveResident(kAreaFloats * sizeof(float))) throw std::runtime_error("no resident area");
    if (shm.resident_bytes() < kAreaFloats * sizeof(float)) throw std::runtime_error("area too small");
    void* before = shm.resident(r);
    // Already large enough: kept, no collective call.
    if (!shm.ReserveResident(16) || shm.resident(r) != before) throw std::runtime_error("area replaced");
    auto* area = static_cast<float*>(shm.resident(r));
    for (size_t i = 0; i < places.size(); ++i) {
      at::Tensor x = torch::from_blob(area + places[i].first, {static_cast<int64_t>(places[i].second)});
      x.copy_(inputs[r][i]);
      shm.AllreduceSum(x, static_cast<float>(kRanks));
      resident[r].push_back(x.clone());
      at::Tensor y = inputs[r][i].clone();  // outside the area: the copying path
      shm.AllreduceSum(y, static_cast<float>(kRanks));
      reference[r].push_back(y);
    }
    // Rank 1 passes a different place, then rank 2 a tensor outside the
    // area, then rank 0 a different length: every rank is told, none sums.
    std::vector<float> outside(32);
    const std::vector<at::Tensor> odd = {
        torch::from_blob(area + (r == 1 ? 64 : 0), {32}),
        r == 2 ? torch::from_blob(outside.data(), {32}) : torch::from_blob(area, {32}),
        torch::from_blob(area, {r == 0 ? 31 : 32}),
    };
    for (at::Tensor z : odd) {
      try {
        shm.AllreduceSum(z);
      } catch (const std::runtime_error& e) {
        if (std::string(e.what()).find("ranks passed different tensors") != std::string::npos) ++disagreements[r];
      }
    }
    // And they stay in step: a sum after that is right.
    at::Tensor ok = torch::from_blob(area, {5});
    ok.fill_(static_cast<float>(r));
    shm.AllreduceSum(ok);
    if (!torch::equal(ok, torch::full({5}, 3.0f))) throw std::runtime_error("sum after disagreements is wrong");
    // A storage moved into the area (as DDP moves its buckets) keeps it
    // mapped after the ShmCollectives is gone.
    at::Tensor moved = torch::zeros({1000});
    moved.storage().unsafeGetStorageImpl()->set_data_ptr(shm.ResidentDataPtr(area + 2000));
    kept[r] = moved;
  }));
  for (int r = 0; r < kRanks; ++r) {
    kept[r].fill_(static_cast<float>(r) + 0.5f);  // every ShmCollectives is destroyed by now
    EXPECT_TRUE(torch::equal(kept[r], torch::full({1000}, static_cast<float>(r) + 0.5f)));
  }
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(disagreements[r], 3) << "rank " << r;
    for (size_t i = 0; i < places.size(); ++i) {
      // Bitwise the copying path's result, and close to a float64 mean.
      EXPECT_TRUE(torch::equal(resident[r][i], reference[r][i])) << "rank " << r << " place " << i;
      at::Tensor mean = torch::zeros({static_cast<int64_t>(places[i].second)}, torch::kDouble);
      for (int q = 0; q < kRanks; ++q) mean += inputs[q][i].to(torch::kDouble);
      mean /= kRanks;
      EXPECT_TRUE(torch::allclose(resident[r][i].to(torch::kDouble), mean, 1e-6, 1e-6)) << "place " << i;
    }
  }
}

// The control word's exchange: elementwise max, the same on every rank, over
// many calls in a row (the two buffers alternate).
TEST(ShmCollectivesTest, MaxOfSmallWordsOnEveryRank) {
  constexpr int kRanks = 3, kCalls = 200;
  std::vector<std::vector<std::vector<int64_t>>> got(kRanks);
  ASSERT_TRUE(RunShmRanks(kRanks, "max", 1 << 12, [&](int r, ShmCollectives& shm) {
    for (int call = 0; call < kCalls; ++call) {
      // Rank (call % kRanks) holds the largest value of word 0; word 1 is
      // -rank; word 4 is set by one rank on some calls only.
      std::vector<int64_t> w = {r == call % kRanks ? 1000 + call : call, -r, 0, 0, (call % 7 == 0 && r == 2) ? 1 : 0};
      shm.AllreduceMax(w.data(), static_cast<int>(w.size()));
      got[r].push_back(w);
    }
    std::vector<int64_t> too_many(ShmCollectives::kMaxWords + 1);
    EXPECT_THROW(shm.AllreduceMax(too_many.data(), static_cast<int>(too_many.size())), std::invalid_argument);
  }));
  for (int call = 0; call < kCalls; ++call) {
    const std::vector<int64_t> want = {1000 + call, 0, 0, 0, call % 7 == 0 ? 1 : 0};
    for (int r = 0; r < kRanks; ++r) EXPECT_EQ(got[r][call], want) << "rank " << r << " call " << call;
  }
}

// Broadcast of byte strings from any root, smaller than and several times the
// segment's chunk, between allreduces that use the same slots.
TEST(ShmCollectivesTest, BroadcastCopiesTheRootsBytes) {
  constexpr int kRanks = 3;
  const std::vector<size_t> sizes = {0, 5, 384, 1000, 5000};
  std::vector<std::vector<std::vector<uint8_t>>> got(kRanks);
  ASSERT_TRUE(RunShmRanks(kRanks, "bcast", 384, [&](int r, ShmCollectives& shm) {
    for (size_t i = 0; i < sizes.size(); ++i) {
      const int root = static_cast<int>(i % kRanks);
      std::vector<uint8_t> b(sizes[i]);
      for (size_t j = 0; j < b.size(); ++j) b[j] = static_cast<uint8_t>(r * 31 + j * 7);
      shm.Broadcast(b.data(), b.size(), root);
      got[r].push_back(b);
      at::Tensor x = torch::full({300}, static_cast<float>(r));  // the same slots, in between
      shm.AllreduceSum(x);
      if (!torch::equal(x, torch::full({300}, 3.0f))) throw std::runtime_error("allreduce in between is wrong");
    }
  }));
  for (size_t i = 0; i < sizes.size(); ++i) {
    const int root = static_cast<int>(i % kRanks);
    std::vector<uint8_t> want(sizes[i]);
    for (size_t j = 0; j < want.size(); ++j) want[j] = static_cast<uint8_t>(root * 31 + j * 7);
    for (int r = 0; r < kRanks; ++r) EXPECT_EQ(got[r][i], want) << "rank " << r << " size " << sizes[i];
  }
}

TEST(ShmCollectivesTest, AMissingPeerTimesOutWithAClearError) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::unique_ptr<ShmCollectives> shm0, shm1;
  std::thread t1([&] { shm1 = ShmCollectives::Create(store, 1, 2, "late", 1024, std::chrono::milliseconds(300)); });
  shm0 = ShmCollectives::Create(store, 0, 2, "late", 1024, std::chrono::milliseconds(300));
  t1.join();
  at::Tensor x = torch::ones({10});
  try {
    shm0->AllreduceSum(x);  // rank 1 never calls
    FAIL() << "expected a timeout";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 did not arrive"), std::string::npos) << e.what();
  }
  at::Tensor bf = torch::ones({4}, torch::kBFloat16);
  EXPECT_THROW(shm0->AllreduceSum(bf), std::invalid_argument);
}

// A peer whose process ended is named at once, not at the timeout: rank 1's
// process maps the segment and ends without calling the collective (a
// zombie until this test reaps it after rank 0's process ends).
TEST(ShmCollectivesTest, APeerWhoseProcessEndedIsSeenAtOnce) {
  const auto out = RunRankProcesses(2, [](int rank, int world, const c10::intrusive_ptr<c10d::Store>& store) {
    auto shm = ShmCollectives::Create(store, rank, world, "ended", 1024, std::chrono::seconds(60));
    if (rank == 1) std::_Exit(0);
    at::Tensor x = torch::ones({10});
    std::string what = "no error";
    try {
      shm->AllreduceSum(x);
    } catch (const ShmAborted& e) {
      what = e.what();
    }
    std::cout << "rank 0: " << what << std::endl;
    const bool named = what.find("rank 1 (pid ") != std::string::npos &&
                       what.find("ended while the others waited for it") != std::string::npos;
    return std::vector<at::Tensor>{torch::tensor({named ? 1 : 0})};
  });
  ASSERT_EQ(out[0].size(), 1u) << "rank 0 returned nothing";
  EXPECT_EQ(out[0][0].item<int>(), 1) << "rank 0 did not name rank 1's ended process (its output says what it got)";
}

TEST(ShmCollectivesTest, HostCheckSeesOneHost) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  bool a = false, b = false;
  std::thread t([&] { b = ShmCollectives::AllRanksOnThisHost(store, 1, 2, "h"); });
  a = ShmCollectives::AllRanksOnThisHost(store, 0, 2, "h");
  t.join();
  EXPECT_TRUE(a);
  EXPECT_TRUE(b);
  store->set("h2/host/1", std::vector<uint8_t>{'x'});  // a rank elsewhere
  EXPECT_FALSE(ShmCollectives::AllRanksOnThisHost(store, 0, 2, "h2"));
}

}  // namespace
}  // namespace trainyard
