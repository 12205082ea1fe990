#include "worker/parallel/comm_hooks.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <chrono>
#include <deque>
#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/splitmix.h"

namespace trainyard {
namespace {

// Runs tasks one at a time, in submission order, on its own thread.
class OrderedExecutor {
 public:
  OrderedExecutor() : thread_([this] { Loop(); }) {}
  ~OrderedExecutor() {
    {
      absl::MutexLock lock(&mu_);
      done_ = true;
    }
    thread_.join();
  }
  void Submit(std::function<void()> task) {
    absl::MutexLock lock(&mu_);
    tasks_.push_back(std::move(task));
  }

 private:
  void Loop() {
    for (;;) {
      std::function<void()> task;
      {
        absl::MutexLock lock(&mu_);
        auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return done_ || !tasks_.empty(); };
        mu_.Await(absl::Condition(&ready));
        if (tasks_.empty()) return;
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();  // tasks catch their own exceptions
    }
  }

  absl::Mutex mu_;  // the loop wakes when a task or the end comes
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

WireDtype WireOf(CommWrapper w) {
  switch (w) {
    case CommWrapper::kNone: return WireDtype::kFp32;
    case CommWrapper::kFp16: return WireDtype::kFp16;
    case CommWrapper::kBf16: return WireDtype::kBf16;
  }
  return WireDtype::kFp32;
}

// Common machinery: hand the bucket to the communication thread and return a
// future it completes. Subclasses implement Communicate(), which runs on that
// thread and returns the averaged bucket.
class OrderedCommHook : public CommHook {
 public:
  OrderedCommHook(c10::intrusive_ptr<c10d::ProcessGroup> pg, CommStats* stats)
      : comm_(std::move(pg), stats), stats_(stats) {}

  c10::intrusive_ptr<c10::ivalue::Future> runHook(c10d::GradBucket& bucket) override {
    auto future = c10::make_intrusive<c10::ivalue::Future>(c10::TensorType::get());
    executor_.Submit([this, future, bucket]() mutable {
      const auto start = std::chrono::steady_clock::now();
      try {
        torch::NoGradGuard no_grad;
        stats_->fp32_equivalent_bytes += bucket.getBuffer().numel() * static_cast<int64_t>(sizeof(float));
        at::Tensor result = Communicate(bucket);
        stats_->hook_nanos +=
            std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
        future->markCompleted(c10::IValue(result));
      } catch (...) {
        future->setError(std::current_exception());
      }
    });
    return future;
  }

  at::Tensor parseHookResult(const c10::IValue& result) override { return result.toTensor(); }

 protected:
  virtual at::Tensor Communicate(c10d::GradBucket& bucket) = 0;

  // Plain average of the whole bucket in `wire` precision.
  at::Tensor Average(at::Tensor buffer, WireDtype wire) {
    buffer.div_(comm_.world_size());
    comm_.AllreduceSum(buffer, wire);
    return buffer;
  }

  GradientComm comm_;
  CommStats* stats_;

 private:
  OrderedExecutor executor_;  // last: its thread stops before the rest goes
};

// fp16_compress_hook / bf16_compress_hook: divide, compress, allreduce,
// decompress.
class HalfCompressHook final : public OrderedCommHook {
 public:
  HalfCompressHook(c10::intrusive_ptr<c10d::ProcessGroup> pg, CommStats* stats, WireDtype wire)
      : OrderedCommHook(std::move(pg), stats), wire_(wire) {}
  std::map<std::string, at::Tensor> State() const override { return {}; }
  void LoadState(const std::map<std::string, at::Tensor>&) override {}

 private:
  at::Tensor Communicate(c10d::GradBucket& bucket) override { return Average(bucket.getBufferRef(), wire_); }
  WireDtype wire_;
};

// State shared by both PowerSGD variants.
struct PowerSgdState {
  int64_t iter = 0;
  int64_t rng_draws = 0;               // Q initializations so far: the RNG's position
  std::map<size_t, at::Tensor> error;  // per bucket
  std::map<size_t, at::Tensor> p;      // per bucket, flat
  std::map<size_t, at::Tensor> q;      // per bucket, flat

  std::map<std::string, at::Tensor> Save() const {
    std::map<std::string, at::Tensor> out;
    out["iter"] = at::full({1}, iter, at::kLong);
    out["rng_draws"] = at::full({1}, rng_draws, at::kLong);
    for (const auto& [b, t] : error) out["error/" + std::to_string(b)] = t.clone();
    for (const auto& [b, t] : p) out["p/" + std::to_string(b)] = t.clone();
    for (const auto& [b, t] : q) out["q/" + std::to_string(b)] = t.clone();
    return out;
  }

  void Load(const std::map<std::string, at::Tensor>& in) {
    error.clear();
    p.clear();
    q.clear();
    for (const auto& [key, t] : in) {
      if (key == "iter") {
        iter = t.item<int64_t>();
      } else if (key == "rng_draws") {
        rng_draws = t.item<int64_t>();
      } else {
        const auto slash = key.find('/');
        if (slash == std::string::npos) throw std::invalid_argument("unknown PowerSGD state key " + key);
        const std::string kind = key.substr(0, slash);
        const size_t bucket = std::stoul(key.substr(slash + 1));
        auto& dst = kind == "error" ? error : kind == "p" ? p : kind == "q" ? q : error;
        if (kind != "error" && kind != "p" && kind != "q")
          throw std::invalid_argument("unknown PowerSGD state key " + key);
        dst[bucket] = t.clone();
      }
    }
  }

  // A generator identical on every rank: seeded by (random_seed, draw count).
  at::Generator NextGenerator(uint64_t random_seed) {
    return at::detail::createCPUGenerator(SplitMix64(random_seed ^ SplitMix64(static_cast<uint64_t>(rng_draws++))));
  }
};

// What both PowerSGD variants share: options, state, the plain-allreduce
// phase before start_powerSGD_iter and the end-of-bucket bookkeeping.
class PowerSgdBase : public OrderedCommHook {
 public:
  PowerSgdBase(c10::intrusive_ptr<c10d::ProcessGroup> pg, CommStats* stats, PowerSgdOptions options, WireDtype wire)
      : OrderedCommHook(std::move(pg), stats), o_(options), wire_(wire) {}
  std::map<std::string, at::Tensor> State() const override { return state_.Save(); }
  void LoadState(const std::map<std::string, at::Tensor>& s) override { state_.Load(s); }

 protected:
  // Before start_powerSGD_iter: a plain average. Returns true when done.
  bool AverageBeforeStart(c10d::GradBucket& bucket, at::Tensor& buffer) {
    if (state_.iter >= o_.start_powerSGD_iter) return false;
    Average(buffer, wire_);
    if (bucket.isLast()) ++state_.iter;
    return true;
  }

  // After a compressed bucket: forget P/Q without warm start; count steps.
  void FinishBucket(const c10d::GradBucket& bucket) {
    if (!o_.warm_start) {
      state_.p.erase(bucket.getIndex());
      state_.q.erase(bucket.getIndex());
    }
    if (bucket.isLast()) ++state_.iter;
  }

  PowerSgdOptions o_;
  WireDtype wire_;
  PowerSgdState state_;  // touched only by the communication thread, or between steps
};

// powerSGD_hook: per-tensor rank-r approximation M ≈ P·Qᵀ.
class PowerSgdHook final : public PowerSgdBase {
 public:
  using PowerSgdBase::PowerSgdBase;

 private:
  // Tensors of one shape compressed together ([k, n, m]); k = 1 unless
  // batch_tensors_with_same_shape groups several.
  struct Group {
    std::vector<at::Tensor> matrices;  // [n, m] views into the bucket
    int64_t n = 0, m = 0, r = 0;
    int64_t p_offset = 0, q_offset = 0;
  };

  at::Tensor Communicate(c10d::GradBucket& bucket) override {
    const size_t idx = bucket.getIndex();
    at::Tensor buffer = bucket.getBufferRef();
    if (AverageBeforeStart(bucket, buffer)) return buffer;
    at::Tensor input_copy;
    if (o_.use_error_feedback) {
      auto it = state_.error.find(idx);
      if (it != state_.error.end() && it->second.numel() == buffer.numel()) {
        buffer.add_(it->second);
      } else {
        state_.error[idx] = at::zeros_like(buffer);
      }
      input_copy = buffer.clone();
    }

    // Split the bucket: vectors and poorly compressible matrices travel
    // uncompressed; the rest by shape groups.
    std::vector<at::Tensor> uncompressed;
    std::vector<Group> groups;
    std::map<std::pair<int64_t, int64_t>, size_t> group_of_shape;
    for (const at::Tensor& g : bucket.getGradients()) {
      if (g.dim() <= 1) {
        uncompressed.push_back(g);
        continue;
      }
      const int64_t n = g.size(0), m = g.numel() / n;
      const int64_t r = std::min<int64_t>({n, m, o_.matrix_approximation_rank});
      const double rate = static_cast<double>(n * m) / static_cast<double>((n + m) * r);
      if (rate < o_.min_compression_rate) {
        uncompressed.push_back(g);
        continue;
      }
      at::Tensor mat = g.view({n, m});
      auto key = std::make_pair(n, m);
      auto found = group_of_shape.find(key);
      if (o_.batch_tensors_with_same_shape && found != group_of_shape.end()) {
        groups[found->second].matrices.push_back(mat);
      } else {
        group_of_shape[key] = groups.size();
        groups.push_back(Group{{mat}, n, m, r});
      }
    }
    int64_t p_total = 0, q_total = 0;
    for (Group& gr : groups) {
      const int64_t k = static_cast<int64_t>(gr.matrices.size());
      gr.p_offset = p_total;
      gr.q_offset = q_total;
      p_total += k * gr.n * gr.r;
      q_total += k * gr.m * gr.r;
    }

    // P and Q memories; Q is drawn afresh unless warm-started.
    bool randomize = !o_.warm_start;
    at::Tensor& p_mem = state_.p[idx];
    at::Tensor& q_mem = state_.q[idx];
    if (!p_mem.defined() || p_mem.numel() != p_total || !q_mem.defined() || q_mem.numel() != q_total) {
      p_mem = at::empty({p_total}, buffer.options());
      q_mem = at::empty({q_total}, buffer.options());
      randomize = true;
    }
    auto P = [&](const Group& gr) {
      return p_mem.narrow(0, gr.p_offset, static_cast<int64_t>(gr.matrices.size()) * gr.n * gr.r)
          .view({static_cast<int64_t>(gr.matrices.size()), gr.n, gr.r});
    };
    auto Q = [&](const Group& gr) {
      return q_mem.narrow(0, gr.q_offset, static_cast<int64_t>(gr.matrices.size()) * gr.m * gr.r)
          .view({static_cast<int64_t>(gr.matrices.size()), gr.m, gr.r});
    };
    if (randomize && !groups.empty()) {
      at::Generator gen = state_.NextGenerator(o_.random_seed);
      for (const Group& gr : groups) {
        at::Tensor q = Q(gr);
        q.copy_(at::randn(q.sizes(), gen, at::kFloat));
      }
    }
    for (const Group& gr : groups) {
      at::Tensor q = Q(gr);
      Orthogonalize(q, o_.orthogonalization_epsilon);
    }

    // 1. Uncompressed tensors, concatenated.
    if (!uncompressed.empty()) {
      std::vector<at::Tensor> flat;
      for (const at::Tensor& t : uncompressed) flat.push_back(t.reshape({-1}));
      at::Tensor packed = at::cat(flat);
      Average(packed, wire_);
      int64_t offset = 0;
      for (at::Tensor& t : uncompressed) {
        t.copy_(packed.narrow(0, offset, t.numel()).view_as(t));
        offset += t.numel();
      }
    }
    if (!groups.empty()) {
      // 2. P = M·Q, summed over ranks, orthogonalized.
      std::vector<at::Tensor> stacked;
      for (const Group& gr : groups) {
        at::Tensor mats = gr.matrices.size() == 1 ? gr.matrices[0].unsqueeze(0) : at::stack(gr.matrices);
        stacked.push_back(mats);
        at::Tensor p = P(gr);
        at::bmm_out(p, mats, Q(gr));
      }
      comm_.AllreduceSum(p_mem, wire_);
      for (const Group& gr : groups) {
        at::Tensor p = P(gr);
        Orthogonalize(p, o_.orthogonalization_epsilon);
      }
      // 3. Q = Mᵀ·P, averaged over ranks.
      for (size_t i = 0; i < groups.size(); ++i) {
        at::Tensor q = Q(groups[i]);
        at::bmm_out(q, stacked[i].transpose(1, 2), P(groups[i]));
      }
      comm_.AllreduceSum(q_mem, wire_);
      q_mem.div_(comm_.world_size());
      // 4. M ≈ P·Qᵀ, written back into the bucket.
      for (const Group& gr : groups) {
        at::Tensor approx = at::bmm(P(gr), Q(gr).transpose(1, 2));
        for (size_t i = 0; i < gr.matrices.size(); ++i) {
          at::Tensor dst = gr.matrices[i];
          dst.copy_(approx[static_cast<int64_t>(i)]);
        }
      }
    }
    if (o_.use_error_feedback) state_.error[idx] = input_copy - buffer;
    FinishBucket(bucket);
    return buffer;
  }
};

// batched_powerSGD_hook: the whole bucket, zero-padded, as one square matrix.
class BatchedPowerSgdHook final : public PowerSgdBase {
 public:
  using PowerSgdBase::PowerSgdBase;

 private:
  at::Tensor Communicate(c10d::GradBucket& bucket) override {
    const size_t idx = bucket.getIndex();
    at::Tensor buffer = bucket.getBufferRef();
    if (AverageBeforeStart(bucket, buffer)) return buffer;
    const int64_t length = buffer.numel();
    const auto side = static_cast<int64_t>(std::ceil(std::sqrt(static_cast<double>(length))));
    const int64_t r = std::min<int64_t>(side, o_.matrix_approximation_rank);
    at::Tensor padded = at::zeros({side * side}, buffer.options());
    padded.narrow(0, 0, length).copy_(buffer);
    at::Tensor input_copy;
    if (o_.use_error_feedback) {
      auto it = state_.error.find(idx);
      if (it != state_.error.end() && it->second.numel() == padded.numel()) {
        padded.add_(it->second);
      }
      input_copy = padded.clone();
    }
    at::Tensor matrix = padded.view({1, side, side});
    at::Tensor& p_mem = state_.p[idx];
    at::Tensor& q_mem = state_.q[idx];
    bool randomize = !o_.warm_start;
    if (!p_mem.defined() || p_mem.numel() != side * r || !q_mem.defined() || q_mem.numel() != side * r) {
      p_mem = at::empty({side * r}, buffer.options());
      q_mem = at::empty({side * r}, buffer.options());
      randomize = true;
    }
    at::Tensor P = p_mem.view({1, side, r});
    at::Tensor Q = q_mem.view({1, side, r});
    if (randomize) {
      at::Generator gen = state_.NextGenerator(o_.random_seed);
      Q.copy_(at::randn(Q.sizes(), gen, at::kFloat));
    }
    at::bmm_out(P, matrix, Q);
    comm_.AllreduceSum(p_mem, wire_);
    Orthogonalize(P, o_.orthogonalization_epsilon);
    at::bmm_out(Q, matrix.transpose(1, 2), P);
    comm_.AllreduceSum(q_mem, wire_);
    q_mem.div_(comm_.world_size());
    at::Tensor approx = at::bmm(P, Q.transpose(1, 2)).reshape({-1});
    if (o_.use_error_feedback) state_.error[idx] = input_copy - approx;
    buffer.copy_(approx.narrow(0, 0, length));
    FinishBucket(bucket);
    return buffer;
  }
};

}  // namespace

GradientComm::GradientComm(c10::intrusive_ptr<c10d::ProcessGroup> pg, CommStats* stats)
    : pg_(std::move(pg)), stats_(stats), world_size_(pg_->getSize()) {}

void GradientComm::AllreduceSum(at::Tensor& t, WireDtype wire) {
  if (!t.is_contiguous() || t.scalar_type() != at::kFloat) {
    throw std::invalid_argument("GradientComm::AllreduceSum takes contiguous fp32 tensors");
  }
  const int64_t n = t.numel();
  if (n == 0) return;
  switch (wire) {
    case WireDtype::kFp32: {
      std::vector<at::Tensor> v = {t};
      pg_->allreduce(v)->wait();
      stats_->wire_bytes += n * 4;
      return;
    }
    case WireDtype::kFp16: {
      std::vector<at::Tensor> v = {t.to(at::kHalf)};
      pg_->allreduce(v)->wait();
      t.copy_(v[0]);
      stats_->wire_bytes += n * 2;
      return;
    }
    case WireDtype::kBf16: {
      // Gloo (in LibTorch 2.x) and NCCL both reduce bf16 natively.
      std::vector<at::Tensor> v = {t.to(at::kBFloat16)};
      pg_->allreduce(v)->wait();
      t.copy_(v[0]);
      stats_->wire_bytes += n * 2;
      return;
    }
  }
}

void OrthogonalizeColumns(at::Tensor& matrices, double epsilon) {
  const int64_t cols = matrices.size(2);
  for (int64_t i = 0; i < cols; ++i) {
    at::Tensor col = matrices.narrow(2, i, 1);
    at::Tensor norm = col.norm(2, {1}, /*keepdim=*/true);
    if (epsilon == 0) {
      norm.masked_fill_(norm == 0, 1.0);  // a zero column stays zero
    } else {
      norm.add_(epsilon);
    }
    col.div_(norm);
    if (i + 1 < cols) {
      at::Tensor rest = matrices.narrow(2, i + 1, cols - i - 1);
      rest.sub_((col * rest).sum({1}, /*keepdim=*/true) * col);
    }
  }
}

void Orthogonalize(at::Tensor& matrices, double epsilon) {
  const at::ScalarType dtype = matrices.scalar_type();
  if (matrices.size(2) <= 2 || dtype == at::kHalf || dtype == at::kBFloat16) {
    OrthogonalizeColumns(matrices, epsilon);
    return;
  }
  matrices.copy_(std::get<0>(at::linalg_qr(matrices)));
}

std::unique_ptr<CommHook> MakeCommHook(const DdpSpec& spec, c10::intrusive_ptr<c10d::ProcessGroup> pg,
                                       CommStats* stats) {
  const WireDtype wire = WireOf(spec.comm_wrapper);
  switch (spec.comm_hook) {
    case CommHookType::kNone: return nullptr;
    case CommHookType::kFp16: return std::make_unique<HalfCompressHook>(std::move(pg), stats, WireDtype::kFp16);
    case CommHookType::kBf16: return std::make_unique<HalfCompressHook>(std::move(pg), stats, WireDtype::kBf16);
    case CommHookType::kPowerSgd: return std::make_unique<PowerSgdHook>(std::move(pg), stats, spec.power_sgd, wire);
    case CommHookType::kBatchedPowerSgd:
      return std::make_unique<BatchedPowerSgdHook>(std::move(pg), stats, spec.power_sgd, wire);
  }
  return nullptr;
}

}  // namespace trainyard
