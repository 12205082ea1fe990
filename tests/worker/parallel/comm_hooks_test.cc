// DDP communication hooks over real Gloo (ranks as threads), checked against
// independent float64 references.
#include "worker/parallel/comm_hooks.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "tests/worker/dist_test_util.h"
#include "worker/parallel/ddp.h"
#include "worker/train/trainer.h"

namespace trainyard {
namespace {

constexpr int kWorld = 2;

// A bucket of several gradients, as the Reducer hands it to a hook.
struct Bucket {
  std::vector<std::vector<int64_t>> shapes;
  at::Tensor buffer;
  std::vector<size_t> offsets, lengths;
  std::vector<c10::IntArrayRef> sizes;  // point into `shapes`

  Bucket(std::vector<std::vector<int64_t>> s, at::Tensor data) : shapes(std::move(s)), buffer(std::move(data)) {
    size_t off = 0;
    for (const auto& shape : shapes) {
      size_t n = 1;
      for (int64_t d : shape) n *= static_cast<size_t>(d);
      offsets.push_back(off);
      lengths.push_back(n);
      off += n;
    }
    for (const auto& shape : shapes) sizes.emplace_back(shape);
  }
  c10d::GradBucket Grad(size_t index = 0, size_t count = 1) {
    return c10d::GradBucket(index, count, buffer, offsets, lengths, sizes, {}, std::nullopt);
  }
};

int64_t NumelOf(const std::vector<std::vector<int64_t>>& shapes) {
  int64_t n = 0;
  for (const auto& s : shapes) n += c10::multiply_integers(s);
  return n;
}

// Runs `steps` hook calls on every rank; rank r's input at step s is
// inputs[s][r]. Returns outputs[rank][step] and each rank's hook.
struct HookRun {
  std::vector<std::vector<at::Tensor>> outputs;                        // [rank][step]
  std::vector<std::vector<std::map<std::string, at::Tensor>>> states;  // [rank][step] after the step
};

HookRun RunHook(const DdpSpec& spec, const std::vector<std::vector<int64_t>>& shapes,
                const std::vector<std::vector<at::Tensor>>& inputs) {
  HookRun run;
  run.outputs.resize(kWorld);
  run.states.resize(kWorld);
  RunRanks(kWorld, [&](int rank, c10::intrusive_ptr<c10d::ProcessGroup> pg) {
    CommStats stats;
    auto hook = MakeCommHook(spec, pg, &stats);
    for (size_t s = 0; s < inputs.size(); ++s) {
      Bucket b(shapes, inputs[s][rank].clone());
      auto grad = b.Grad();
      auto fut = hook->runHook(grad);
      fut->wait();
      run.outputs[rank].push_back(hook->parseHookResult(fut->value()).clone());
      run.states[rank].push_back(hook->State());
    }
  });
  return run;
}

std::vector<std::vector<at::Tensor>> RandomInputs(int steps, int64_t n, uint64_t seed) {
  torch::manual_seed(seed);
  std::vector<std::vector<at::Tensor>> in(steps);
  for (auto& step : in) {
    for (int r = 0; r < kWorld; ++r) step.push_back(torch::randn({n}));
  }
  return in;
}

at::Tensor ExactMean(const std::vector<at::Tensor>& per_rank) {
  at::Tensor sum = torch::zeros(per_rank[0].sizes(), torch::kDouble);
  for (const auto& t : per_rank) sum += t.to(torch::kDouble);
  return sum / static_cast<double>(per_rank.size());
}

double MaxAbs(const at::Tensor& t) { return t.abs().max().item<double>(); }

TEST(HalfCompressHooks, MatchFp32AllreduceWithinRoundingAndAgreeAcrossRanks) {
  const std::vector<std::vector<int64_t>> shapes = {{33, 7}, {7}, {1000}};
  const auto inputs = RandomInputs(3, NumelOf(shapes), 11);
  // fp16 keeps 11 significant bits (relative step 2^-11), bf16 8 (2^-8); each
  // value is rounded on compression and the sum once more.
  for (auto [hook, rel] : {std::pair{CommHookType::kFp16, 2.0 / 2048}, std::pair{CommHookType::kBf16, 2.0 / 256}}) {
    DdpSpec spec;
    spec.comm_hook = hook;
    HookRun run = RunHook(spec, shapes, inputs);
    for (size_t s = 0; s < inputs.size(); ++s) {
      at::Tensor exact = ExactMean(inputs[s]);
      at::Tensor got = run.outputs[0][s].to(torch::kDouble);
      const double tol = rel * MaxAbs(exact) + 1e-7;
      EXPECT_LE(MaxAbs(got - exact), tol) << CommHookName(hook) << " step " << s;
      EXPECT_GT(MaxAbs(got - exact), 0) << "no rounding at all: was the payload compressed?";
      EXPECT_TRUE(torch::equal(run.outputs[0][s], run.outputs[1][s])) << CommHookName(hook);
    }
  }
}

TEST(HalfCompressHooks, WireBytesAreHalf) {
  RunRanks(kWorld, [&](int, c10::intrusive_ptr<c10d::ProcessGroup> pg) {
    for (auto hook : {CommHookType::kFp16, CommHookType::kBf16}) {
      DdpSpec spec;
      spec.comm_hook = hook;
      CommStats stats;
      auto h = MakeCommHook(spec, pg, &stats);
      Bucket b({{1000}}, torch::randn({1000}));
      auto grad = b.Grad();
      auto fut = h->runHook(grad);
      fut->wait();
      EXPECT_EQ(stats.fp32_equivalent_bytes.load(), 4000);
      EXPECT_EQ(stats.wire_bytes.load(), 2000);
    }
  });
}

// ---- PowerSGD reference (float64, written independently of the hook) -------

at::Tensor GramSchmidt(at::Tensor m) {  // [n, r] double
  m = m.clone();
  for (int64_t i = 0; i < m.size(1); ++i) {
    at::Tensor col = m.select(1, i);
    for (int64_t j = 0; j < i; ++j) col -= col.dot(m.select(1, j)) * m.select(1, j);
    const double norm = col.norm().item<double>();
    if (norm > 0) col /= norm;
  }
  return m;
}

// PyTorch's choice: Gram-Schmidt for up to 2 columns, else the Q of a
// Householder QR (LAPACK's, whose column signs the hook's QR shares).
at::Tensor Orthonormal(const at::Tensor& m) {
  return m.size(1) <= 2 ? GramSchmidt(m) : std::get<0>(torch::linalg_qr(m));
}

// One PowerSGD step on matrices M_r (per rank) starting from Q: returns the
// averaged approximation and the new (averaged) Q.
std::pair<at::Tensor, at::Tensor> ReferenceStep(const std::vector<at::Tensor>& ms, const at::Tensor& q_in) {
  at::Tensor q = Orthonormal(q_in.to(torch::kDouble));
  at::Tensor p = torch::zeros({ms[0].size(0), q.size(1)}, torch::kDouble);
  for (const auto& m : ms) p += m.to(torch::kDouble).mm(q);
  p = Orthonormal(p);
  at::Tensor q_new = torch::zeros_like(q);
  for (const auto& m : ms) q_new += m.to(torch::kDouble).t().mm(p);
  q_new /= static_cast<double>(ms.size());
  return {p.mm(q_new.t()), q_new};
}

DdpSpec PowerSgd(int rank, int64_t start, bool error_feedback, bool warm_start, double min_rate = 2.0) {
  DdpSpec spec;
  spec.comm_hook = CommHookType::kPowerSgd;
  spec.power_sgd.matrix_approximation_rank = rank;
  spec.power_sgd.start_powerSGD_iter = start;
  spec.power_sgd.use_error_feedback = error_feedback;
  spec.power_sgd.warm_start = warm_start;
  spec.power_sgd.min_compression_rate = min_rate;
  return spec;
}

TEST(PowerSgdHook, FullRankWithoutErrorFeedbackIsTheExactAverage) {
  const std::vector<std::vector<int64_t>> shapes = {{12, 5}, {5}, {4, 3, 2}};
  const auto inputs = RandomInputs(3, NumelOf(shapes), 21);
  HookRun run = RunHook(PowerSgd(/*rank=*/6, 0, false, false, /*min_rate=*/0), shapes, inputs);
  for (size_t s = 0; s < inputs.size(); ++s) {
    at::Tensor exact = ExactMean(inputs[s]);
    // fp32 matmuls and Gram-Schmidt: ~1e-6 relative to the largest entry.
    EXPECT_LE(MaxAbs(run.outputs[0][s].to(torch::kDouble) - exact), 1e-5 * MaxAbs(exact)) << "step " << s;
    EXPECT_TRUE(torch::equal(run.outputs[0][s], run.outputs[1][s]));
  }
}

// A classifier's gradients have a lower rank than their matrices (a batch
// of B samples: rank <= B; the last layer: at most classes - 1). With an
// approximation rank above it the extra columns of P are rounding noise:
// orthogonalized by Householder QR (as PyTorch does) the average stays
// exact; Gram-Schmidt lost their orthogonality and was off by ~1e-3
// relative (found on an H100, the same on the CPU).
TEST(PowerSgdHook, ARankAboveTheGradientsIsStillTheExactAverage) {
  const std::vector<std::vector<int64_t>> shapes = {{40, 60}};
  torch::manual_seed(3);
  std::vector<std::vector<at::Tensor>> inputs(2);
  for (auto& step : inputs) {
    for (int r = 0; r < kWorld; ++r) {  // each rank's matrix: rank 3
      step.push_back(torch::randn({40, 3}).mm(torch::randn({3, 60})).reshape({-1}));
    }
  }
  HookRun run = RunHook(PowerSgd(/*rank=*/16, 0, false, false, /*min_rate=*/0), shapes, inputs);
  for (size_t s = 0; s < inputs.size(); ++s) {
    at::Tensor exact = ExactMean(inputs[s]);
    EXPECT_LE(MaxAbs(run.outputs[0][s].to(torch::kDouble) - exact), 1e-5 * MaxAbs(exact)) << "step " << s;
  }
}

// Batched PowerSGD compresses a bucket as one square matrix; at a rank of
// its side the approximation is the exact average.
TEST(BatchedPowerSgdHook, AtTheFullRankIsTheExactAverage) {
  const std::vector<std::vector<int64_t>> shapes = {{100, 130}};  // 13000 values -> a 115 x 115 matrix
  const auto inputs = RandomInputs(3, NumelOf(shapes), 17);
  DdpSpec spec = PowerSgd(/*rank=*/128, 0, false, false, /*min_rate=*/0);
  spec.comm_hook = CommHookType::kBatchedPowerSgd;
  HookRun run = RunHook(spec, shapes, inputs);
  for (size_t s = 0; s < inputs.size(); ++s) {
    at::Tensor exact = ExactMean(inputs[s]);
    EXPECT_LE(MaxAbs(run.outputs[0][s].to(torch::kDouble) - exact), 1e-5 * MaxAbs(exact)) << "step " << s;
  }
}

TEST(PowerSgdHook, PIsOrthonormalAndTheResidualIsKept) {
  const std::vector<std::vector<int64_t>> shapes = {{40, 30}, {30}};
  const auto inputs = RandomInputs(3, NumelOf(shapes), 31);
  HookRun run = RunHook(PowerSgd(2, /*start=*/2, true, true), shapes, inputs);
  // Steps 0 and 1 are plain allreduce: exact.
  for (int s = 0; s < 2; ++s) {
    EXPECT_LE(MaxAbs(run.outputs[0][s].to(torch::kDouble) - ExactMean(inputs[s])), 1e-6) << s;
  }
  const auto& state = run.states[0][2];
  at::Tensor p = state.at("p/0").view({40, 2});
  EXPECT_TRUE(torch::allclose(p.t().mm(p), torch::eye(2), 1e-5, 1e-5)) << p.t().mm(p);
  // First compressed step: no earlier error, so residual = input - output,
  // on each rank for its own input.
  for (int r = 0; r < kWorld; ++r) {
    at::Tensor residual = inputs[2][r] - run.outputs[r][2];
    EXPECT_TRUE(torch::allclose(run.states[r][2].at("error/0"), residual, 1e-6, 1e-6)) << "rank " << r;
  }
  // The 1-D tensor travelled uncompressed: exact average.
  at::Tensor bias = run.outputs[0][2].narrow(0, 1200, 30).to(torch::kDouble);
  at::Tensor exact_bias = ExactMean(inputs[2]).narrow(0, 1200, 30);
  EXPECT_LE(MaxAbs(bias - exact_bias), 1e-6);
  // The matrix was compressed: rank 2 of a random 40x30 average is not exact.
  EXPECT_GT(MaxAbs(run.outputs[0][2].narrow(0, 0, 1200).to(torch::kDouble) - ExactMean(inputs[2]).narrow(0, 0, 1200)),
            1e-2);
  EXPECT_EQ(state.at("iter").item<int64_t>(), 3);
}

// Error feedback is applied, not only kept: the step after a compressed
// one compresses (its gradient + the residual that step left), which an
// independent float64 reference from the warm-started Q reproduces; the same
// reference without the residual does not.
TEST(PowerSgdHook, ErrorFeedbackIsAddedToTheNextGradient) {
  const std::vector<std::vector<int64_t>> shapes = {{40, 30}};
  const auto inputs = RandomInputs(4, 40 * 30, 61);
  HookRun run = RunHook(PowerSgd(2, /*start=*/2, /*error_feedback=*/true, /*warm=*/true), shapes, inputs);
  std::vector<at::Tensor> with_error, without_error;
  for (int r = 0; r < kWorld; ++r) {
    // Step 2 was the first compressed step: its residual is input - output.
    const at::Tensor residual = (inputs[2][r] - run.outputs[r][2]).to(torch::kDouble);
    with_error.push_back((inputs[3][r].to(torch::kDouble) + residual).view({40, 30}));
    without_error.push_back(inputs[3][r].to(torch::kDouble).view({40, 30}));
  }
  const at::Tensor q = run.states[0][2].at("q/0").view({30, 2});
  const auto [expected, q_new] = ReferenceStep(with_error, q);
  const auto [unfed, q_unfed] = ReferenceStep(without_error, q);
  const at::Tensor got = run.outputs[0][3].view({40, 30}).to(torch::kDouble);
  EXPECT_LE(MaxAbs(got - expected), 1e-4) << "step 3 is not the compression of gradient + error";
  EXPECT_GT(MaxAbs(got - unfed), 1e-2) << "the reference cannot tell whether the error was added";
  // And the residual carried on: step 3's error is (gradient + error) - output.
  for (int r = 0; r < kWorld; ++r) {
    const at::Tensor want = with_error[r].view({-1}) - run.outputs[r][3].to(torch::kDouble);
    EXPECT_LE(MaxAbs(run.states[r][3].at("error/0").to(torch::kDouble) - want), 1e-5) << "rank " << r;
  }
}

TEST(PowerSgdHook, WarmStartContinuesFromTheLastQ) {
  const std::vector<std::vector<int64_t>> shapes = {{24, 16}};
  const auto inputs = RandomInputs(4, 24 * 16, 41);
  HookRun warm = RunHook(PowerSgd(3, 2, /*error_feedback=*/false, /*warm=*/true), shapes, inputs);
  HookRun cold = RunHook(PowerSgd(3, 2, /*error_feedback=*/false, /*warm=*/false), shapes, inputs);
  // Step 3 of the warm run starts from step 2's Q: an independent float64
  // reference from that Q reproduces it.
  std::vector<at::Tensor> ms;
  for (int r = 0; r < kWorld; ++r) ms.push_back(inputs[3][r].view({24, 16}));
  auto [expected, q_new] = ReferenceStep(ms, warm.states[0][2].at("q/0").view({16, 3}));
  EXPECT_LE(MaxAbs(warm.outputs[0][3].view({24, 16}).to(torch::kDouble) - expected), 1e-4);
  EXPECT_TRUE(torch::allclose(warm.states[0][3].at("q/0").view({16, 3}).to(torch::kDouble), q_new, 1e-4, 1e-4));
  // Without warm start Q is drawn afresh and nothing is kept.
  EXPECT_GT(MaxAbs(cold.outputs[0][3].view({24, 16}).to(torch::kDouble) - expected), 1e-3);
  EXPECT_EQ(cold.states[0][3].count("q/0"), 0u);
  for (const HookRun* run : {&warm, &cold}) EXPECT_TRUE(torch::equal(run->outputs[0][3], run->outputs[1][3]));
}

TEST(PowerSgdHook, SwitchesExactlyAtStartIter) {
  const std::vector<std::vector<int64_t>> shapes = {{30, 30}};
  const auto inputs = RandomInputs(5, 900, 51);
  HookRun run = RunHook(PowerSgd(1, /*start=*/3, true, true), shapes, inputs);
  for (int s = 0; s < 5; ++s) {
    const double err = MaxAbs(run.outputs[0][s].to(torch::kDouble) - ExactMean(inputs[s]));
    if (s < 3) {
      EXPECT_LE(err, 1e-6) << "step " << s << " is before start_powerSGD_iter";
    } else {
      EXPECT_GT(err, 1e-2) << "step " << s << " must be compressed";
    }
  }
}

TEST(PowerSgdHook, SmallMatricesBelowTheCompressionRateTravelUncompressed) {
  // 4x3 at rank 2: 12 / ((4+3)*2) < 2, so it goes as is.
  const std::vector<std::vector<int64_t>> shapes = {{4, 3}, {64, 64}};
  const auto inputs = RandomInputs(3, NumelOf(shapes), 61);
  HookRun run = RunHook(PowerSgd(2, 2, true, true), shapes, inputs);
  EXPECT_LE(MaxAbs(run.outputs[0][2].narrow(0, 0, 12).to(torch::kDouble) - ExactMean(inputs[2]).narrow(0, 0, 12)),
            1e-6);
}

TEST(PowerSgdHook, BatchingSameShapesEqualsPerTensorCompression) {
  const std::vector<std::vector<int64_t>> shapes = {{20, 10}, {20, 10}, {20, 10}};
  const auto inputs = RandomInputs(3, 600, 71);
  DdpSpec plain = PowerSgd(2, 2, /*error_feedback=*/false, /*warm=*/true);
  DdpSpec batched = plain;
  batched.power_sgd.batch_tensors_with_same_shape = true;
  HookRun a = RunHook(plain, shapes, inputs);
  HookRun b = RunHook(batched, shapes, inputs);
  // The Q draws differ between the two layouts, so check each against what
  // PowerSGD must produce whatever Q is: P·Pᵀ·mean(M), the projection of the
  // mean onto a 2-dimensional column space.
  for (const HookRun* run : {&a, &b}) {
    for (int t = 0; t < 3; ++t) {
      at::Tensor out = run->outputs[0][2].narrow(0, t * 200, 200).view({20, 10}).to(torch::kDouble);
      at::Tensor mean = ExactMean(inputs[2]).narrow(0, t * 200, 200).view({20, 10});
      // out lies in a 2-D column space and is the projection of the mean onto it.
      at::Tensor u = std::get<0>(torch::linalg_svd(out, false)).narrow(1, 0, 2);
      EXPECT_LE(MaxAbs(u.mm(u.t()).mm(mean) - out), 1e-4);
    }
    EXPECT_TRUE(torch::equal(run->outputs[0][2], run->outputs[1][2]));
  }
  EXPECT_TRUE(b.states[0][2].at("p/0").numel() == 3 * 20 * 2);
}

TEST(BatchedPowerSgdHook, MatchesItsReference) {
  const std::vector<std::vector<int64_t>> shapes = {{10, 7}, {7}, {30}};  // 107 values -> an 11x11 matrix
  const auto inputs = RandomInputs(4, 107, 81);
  DdpSpec spec = PowerSgd(2, 2, /*error_feedback=*/false, /*warm=*/true);
  spec.comm_hook = CommHookType::kBatchedPowerSgd;
  HookRun run = RunHook(spec, shapes, inputs);
  for (int s = 2; s < 4; ++s) {
    std::vector<at::Tensor> ms;
    for (int r = 0; r < kWorld; ++r) {
      at::Tensor padded = torch::zeros({121});
      padded.narrow(0, 0, 107).copy_(inputs[s][r]);
      ms.push_back(padded.view({11, 11}));
    }
    // The batched hook does not orthogonalize Q before use (as PyTorch's).
    at::Tensor q = s == 2 ? at::Tensor() : run.states[0][s - 1].at("q/0").view({11, 2}).to(torch::kDouble);
    if (s == 2) continue;  // step 2's Q is random: checked through step 3
    at::Tensor p = torch::zeros({11, 2}, torch::kDouble);
    for (const auto& m : ms) p += m.to(torch::kDouble).mm(q);
    p = GramSchmidt(p);
    at::Tensor qn = torch::zeros({11, 2}, torch::kDouble);
    for (const auto& m : ms) qn += m.to(torch::kDouble).t().mm(p);
    qn /= 2.0;
    at::Tensor expected = p.mm(qn.t()).reshape({-1}).narrow(0, 0, 107);
    EXPECT_LE(MaxAbs(run.outputs[0][s].to(torch::kDouble) - expected), 1e-4) << "step " << s;
    EXPECT_TRUE(torch::equal(run.outputs[0][s], run.outputs[1][s]));
  }
}

TEST(PowerSgdHook, StateRoundTripsThroughLoadState) {
  const std::vector<std::vector<int64_t>> shapes = {{16, 16}};
  const auto inputs = RandomInputs(5, 256, 91);
  DdpSpec spec = PowerSgd(2, 2, true, true);
  // Reference: 5 uninterrupted steps. Resumed: 3 steps, state saved, a fresh
  // hook loads it and runs steps 3 and 4. Outputs must be bitwise equal.
  HookRun full = RunHook(spec, shapes, inputs);
  std::vector<std::vector<at::Tensor>> resumed(kWorld);
  RunRanks(kWorld, [&](int rank, c10::intrusive_ptr<c10d::ProcessGroup> pg) {
    CommStats stats;
    auto first = MakeCommHook(spec, pg, &stats);
    for (int s = 0; s < 3; ++s) {
      Bucket b(shapes, inputs[s][rank].clone());
      auto g = b.Grad();
      auto f = first->runHook(g);
      f->wait();
    }
    auto saved = first->State();
    first.reset();
    auto second = MakeCommHook(spec, pg, &stats);
    second->LoadState(saved);
    for (int s = 3; s < 5; ++s) {
      Bucket b(shapes, inputs[s][rank].clone());
      auto g = b.Grad();
      auto f = second->runHook(g);
      f->wait();
      resumed[rank].push_back(second->parseHookResult(f->value()).clone());
    }
  });
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_TRUE(torch::equal(resumed[r][0], full.outputs[r][3]));
    EXPECT_TRUE(torch::equal(resumed[r][1], full.outputs[r][4]));
  }
}

TEST(OrthogonalizeColumns, ZeroColumnsStayZero) {
  at::Tensor m = torch::zeros({1, 5, 2});
  OrthogonalizeColumns(m, 0.0);
  EXPECT_FALSE(m.isnan().any().item<bool>());
  EXPECT_EQ(MaxAbs(m), 0.0);
}

// Training with each hook on a fixed task, several buckets, real Gloo.
double TrainWith(CommHookType hook, CommWrapper wrapper, int rank = 4) {
  JobSpec spec;
  spec.model.hidden = {256, 256};
  spec.data.batch_size = 32;
  spec.data.num_samples = 4096;
  spec.optimizer.kind = OptimizerKind::kSgd;
  spec.optimizer.lr = 0.02;
  spec.optimizer.momentum = 0.9;
  spec.max_steps = 300;
  spec.num_processes = 2;
  spec.ddp.bucket_cap_mb = 0.1;  // several buckets per step
  spec.ddp.comm_hook = hook;
  spec.ddp.comm_wrapper = wrapper;
  spec.ddp.power_sgd.matrix_approximation_rank = rank;
  spec.ddp.power_sgd.start_powerSGD_iter = 10;
  struct Tail : MetricsSink {
    double sum = 0;
    int n = 0;
    void OnStep(const StepMetrics& m) override {
      if (m.step > 250) sum += m.loss, ++n;
    }
  };
  std::vector<Tail> tails(2);
  std::vector<size_t> buckets(2);
  RunRanks(2, [&](int rank, c10::intrusive_ptr<c10d::ProcessGroup> pg) {
    Trainer t(spec, rank, 2, DistContext{pg, nullptr}, &tails[rank], nullptr);
    t.Run();
    buckets[rank] = t.ddp()->num_buckets();
  });
  EXPECT_GE(buckets[0], 2u);
  return (tails[0].sum / tails[0].n + tails[1].sum / tails[1].n) / 2;
}

// Mean loss over the last 50 of 300 SGD-momentum steps on a 784-256-256-10
// MLP, 2 ranks, several buckets. Runs are deterministic (fixed seeds).
TEST(CommHookTraining, EachHookReachesTheLossOfPlainAllreduce) {
  at::set_num_threads(1);
  const double plain = TrainWith(CommHookType::kNone, CommWrapper::kNone);
  struct Variant {
    CommHookType hook;
    CommWrapper wrapper;
    int rank;
    double bound;  // allowed ratio to plain allreduce's loss
  };
  // fp16/bf16 and PowerSGD at rank 32 stay within 5%. PowerSGD at rank 4 and
  // batched PowerSGD (the whole 270k-value bucket as one 520x520 matrix)
  // approximate far more coarsely and converge more slowly on this short run:
  // measured 1.66x and 1.33x (rank 32) of plain's loss; bounds leave room
  // for rounding differences only.
  for (Variant v : {Variant{CommHookType::kFp16, CommWrapper::kNone, 0, 1.05},
                    Variant{CommHookType::kBf16, CommWrapper::kNone, 0, 1.05},
                    Variant{CommHookType::kPowerSgd, CommWrapper::kNone, 32, 1.05},
                    Variant{CommHookType::kPowerSgd, CommWrapper::kFp16, 32, 1.05},
                    Variant{CommHookType::kPowerSgd, CommWrapper::kNone, 4, 1.8},
                    Variant{CommHookType::kBatchedPowerSgd, CommWrapper::kBf16, 32, 1.45}}) {
    const double loss = TrainWith(v.hook, v.wrapper, v.rank);
    std::cout << CommHookName(v.hook) << "+" << CommWrapperName(v.wrapper) << " rank " << v.rank << ": loss " << loss
              << " = " << loss / plain << "x plain (" << plain << ")\n";
    EXPECT_LE(loss, plain * v.bound) << CommHookName(v.hook) << "+" << CommWrapperName(v.wrapper);
  }
}

}  // namespace
}  // namespace trainyard
