#include "worker/train/captured_step.h"

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <stdexcept>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "worker/models/fused_adamw.h"
#include "worker/parallel/ddp.h"
#include "worker/parallel/parallel_model.h"
#include "worker/train/trainer_parts.h"

#ifdef TRAINYARD_WITH_CUDA
#include <ATen/autocast_mode.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace trainyard {

#ifdef TRAINYARD_WITH_CUDA
namespace {

using Note = std::function<void(const std::string&)>;

std::string Shape(const at::Tensor& t) { return absl::StrCat("[", absl::StrJoin(t.sizes(), ", "), "]"); }

// The autocast cache off while capturing (its casts would be freed when
// the autocast region ends, under the graph), as it was after.
class AutocastCacheOff {
 public:
  AutocastCacheOff() : was_(at::autocast::is_autocast_cache_enabled()) {
    at::autocast::set_autocast_cache_enabled(false);
  }
  ~AutocastCacheOff() { at::autocast::set_autocast_cache_enabled(was_); }
  AutocastCacheOff(const AutocastCacheOff&) = delete;
  AutocastCacheOff& operator=(const AutocastCacheOff&) = delete;

 private:
  const bool was_;
};

class CapturedStep final : public StepEngine {
 public:
  CapturedStep(TrainerParts* parts, std::unique_ptr<StepEngine> eager, Note note)
      : parts_(*parts),
        eager_(std::move(eager)),
        note_(std::move(note)),
        optimizer_(dynamic_cast<FusedAdamW*>(&parts->model->optimizer())),
        stream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, parts->device.index())),
        warmup_left_(parts->model->ddp() != nullptr ? 11 : 3) {
    if (optimizer_ == nullptr) throw std::logic_error("a captured step needs fused AdamW");
    // A graph is captured on a stream other than the default; the eager
    // steps before it warm up on that same stream.
    c10::cuda::setCurrentCUDAStream(stream_);
    lr_ = at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(parts->device));
  }

  StepWork Run(const std::vector<Batch>& batches, double lr, const BeforeApply& before_apply, StepSample* times,
               ModelMemory* mem) override {
    if (eager_only_ || warmup_left_ > 0) {
      if (warmup_left_ > 0) --warmup_left_;
      return eager_->Run(batches, lr, before_apply, times, mem);
    }
    if (!SameShapes(batches)) {
      // An epoch's last, smaller batch: this step runs uncaptured. Its
      // gradients are its own (the graph keeps the ones it writes).
      if (!other_shape_noted_) {
        other_shape_noted_ = true;
        note_(absl::StrCat("step ", parts_.step + 1, " runs uncaptured: its batch has inputs ",
                           Shape(batches.front().inputs), ", the captured step's ",
                           graph_ ? Shape(inputs_.front()) : std::string("a full batch's"),
                           " (a CUDA graph replays one shape; said once)"));
      }
      parts_.model->ReleaseGradients();
      return eager_->Run(batches, lr, before_apply, times, mem);
    }
    if (graph_) {
      if (optimizer_->Storages() != storages_) {
        graph_.reset();
        note_("the step is captured again: its parameters or optimizer state were replaced");
      }
    }
    if (!graph_) {
      try {
        Capture(batches);
      } catch (const std::exception& e) {
        // A DDP Reducer left mid-iteration cannot step eagerly either.
        if (parts_.spec.fused.cuda_graph == StepCapture::kOn || parts_.model->ddp() != nullptr) {
          throw std::runtime_error(absl::StrCat("fused.cuda_graph: capturing the step as a CUDA graph failed (",
                                                e.what(), "); fused.cuda_graph: off runs it uncaptured"));
        }
        eager_only_ = true;
        parts_.model->ReleaseGradients();
        note_(absl::StrCat("the step runs uncaptured: capturing it as a CUDA graph failed: ", e.what()));
        return eager_->Run(batches, lr, before_apply, times, mem);
      }
    }
    for (size_t i = 0; i < batches.size(); ++i) {
      inputs_[i].copy_(batches[i].inputs, /*non_blocking=*/true);
      targets_[i].copy_(batches[i].targets, /*non_blocking=*/true);
    }
    lr_.fill_(lr);
    before_apply(lr, /*finite=*/true);
    const auto t0 = std::chrono::steady_clock::now();
    graph_->replay();
    optimizer_->CountReplayedStep();
    if (DistributedDataParallel* ddp = parts_.model->ddp()) ddp->CountReplayedStep();
    StepWork work;
    work.loss_sum = loss_sum_.item<double>();  // waits for the replay
    work.grad_norm = grad_norm_.defined() ? grad_norm_.item<double>() : std::nan("");
    const auto took = std::chrono::steady_clock::now() - t0;
    times->forward = took;
    times->compute = took;
    times->optimizer = {};
    if (mem != nullptr) *mem = parts_.model->Memory();
    return work;
  }

 private:
  // Whether `batches` fit the graph's buffers (before the capture: whether
  // each is a full batch, so the graph is not made for a smaller one).
  bool SameShapes(const std::vector<Batch>& batches) const {
    if (!graph_) {
      for (const Batch& b : batches) {
        if (b.inputs.size(0) != parts_.spec.data.batch_size) return false;
      }
      return true;
    }
    if (batches.size() != inputs_.size()) return false;
    for (size_t i = 0; i < batches.size(); ++i) {
      const Batch& b = batches[i];
      if (b.inputs.sizes() != inputs_[i].sizes() || b.targets.sizes() != targets_[i].sizes() ||
          b.inputs.scalar_type() != inputs_[i].scalar_type() || b.targets.scalar_type() != targets_[i].scalar_type()) {
        return false;
      }
    }
    return true;
  }

  void Capture(const std::vector<Batch>& batches) {
    inputs_.clear();
    targets_.clear();
    for (const Batch& b : batches) {
      inputs_.push_back(b.inputs.clone());
      targets_.push_back(b.targets.clone());
    }
    // The captured backward writes gradients it allocates in the graph's
    // pool (DDP's bucket views are the Reducer's): the same on every replay.
    parts_.model->ReleaseGradients();
    c10::cuda::device_synchronize();
    AutocastCacheOff no_cache;
    graph_ = std::make_unique<at::cuda::CUDAGraph>();
    graph_->capture_begin();
    try {
      Body();
    } catch (...) {
      try {
        graph_->capture_end();
      } catch (...) {  // the capture was invalidated: its error is the body's
      }
      graph_.reset();
      throw;
    }
    graph_->capture_end();
    storages_ = optimizer_->Storages();
    note_(absl::StrCat("the step is captured as a CUDA graph at step ", parts_.step + 1,
                       " and replayed from then on (fused.cuda_graph ",
                       parts_.spec.fused.cuda_graph == StepCapture::kOn ? "on" : "auto", ")"));
  }

  // The step's kernels, as the eager step issues them, with no host read.
  void Body() {
    ParallelModel& model = *parts_.model;
    const size_t accum = inputs_.size();
    at::Tensor total;
    for (size_t micro = 0; micro < accum; ++micro) {
      const bool sync = micro + 1 == accum;
      const at::Tensor output = model.Forward(inputs_[micro], sync);
      const at::Tensor loss = parts_.Loss(output, targets_[micro]);
      const at::Tensor value = loss.detach().to(at::kFloat);
      total = total.defined() ? total + value : value;
      model.Backward(accum > 1 ? loss / static_cast<double>(accum) : loss, output, sync);
    }
    loss_sum_ = total;
    torch::NoGradGuard no_grad;
    std::vector<at::Tensor> grads;
    for (const at::Tensor& g : model.Gradients()) {
      if (g.defined()) grads.push_back(g);
    }
    grad_norm_ = at::Tensor();
    const double max_norm = parts_.spec.max_grad_norm;
    if (max_norm > 0 && !grads.empty()) {
      // torch.nn.utils.clip_grad_norm_(foreach=True): the coefficient
      // clamped on the device instead of compared on the host.
      std::vector<at::Tensor> norms = at::_foreach_norm(grads, 2);
      for (at::Tensor& n : norms) n = n.to(at::kFloat);
      grad_norm_ = at::linalg_vector_norm(at::stack(norms), 2);
      at::_foreach_mul_(grads, (max_norm / (grad_norm_ + 1e-6)).clamp_max(1.0));
    }
    if (const double v = parts_.spec.clip_grad_value; v > 0 && !grads.empty()) {
      at::_foreach_clamp_min_(grads, -v);
      at::_foreach_clamp_max_(grads, v);
    }
    optimizer_->StepWithLr(lr_);
  }

  TrainerParts& parts_;
  std::unique_ptr<StepEngine> eager_;
  Note note_;
  FusedAdamW* optimizer_;
  c10::cuda::CUDAStream stream_;
  int warmup_left_;
  bool eager_only_ = false;         // auto, after a failed capture
  bool other_shape_noted_ = false;  // a batch of another shape was said
  std::unique_ptr<at::cuda::CUDAGraph> graph_;
  std::vector<at::Tensor> inputs_, targets_;  // the graph's input buffers, per micro-batch
  at::Tensor lr_;                             // the learning rate the graph reads
  at::Tensor loss_sum_, grad_norm_;           // what the graph writes
  std::vector<const void*> storages_;         // the optimizer's tensors when captured
};

}  // namespace

std::unique_ptr<StepEngine> MakeCapturedStep(TrainerParts* parts, std::unique_ptr<StepEngine> eager,
                                             const std::function<void(const std::string&)>& note) {
  return std::make_unique<CapturedStep>(parts, std::move(eager), note);
}

#else  // a build without CUDA

std::unique_ptr<StepEngine> MakeCapturedStep(TrainerParts* parts, std::unique_ptr<StepEngine> eager,
                                             const std::function<void(const std::string&)>& note) {
  if (parts->spec.fused.cuda_graph == StepCapture::kOn) {
    throw std::invalid_argument("fused.cuda_graph on: this trainyard-worker was built without CUDA");
  }
  note("the step is not captured as a CUDA graph: this trainyard-worker was built without CUDA");
  return eager;
}

#endif

}  // namespace trainyard
