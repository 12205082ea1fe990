#include "worker/models/chunked_loss.h"

#include <torch/torch.h>

#include <algorithm>

namespace trainyard {
namespace {

constexpr int64_t kIgnoreIndex = -100;

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

class ChunkedCrossEntropyFunction : public torch::autograd::Function<ChunkedCrossEntropyFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& hidden, const at::Tensor& weight,
                            const at::Tensor& targets, int64_t chunk, bool grads) {
    const int64_t rows = hidden.size(0);
    const at::ScalarType acc = hidden.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
    const bool grad_hidden = grads && hidden.requires_grad();
    const bool grad_weight = grads && weight.requires_grad();
    at::Tensor dh = grad_hidden ? at::empty_like(hidden) : at::Tensor();
    at::Tensor dw = grad_weight ? at::zeros(weight.sizes(), weight.options().dtype(acc)) : at::Tensor();
    at::Tensor total = at::zeros({}, hidden.options().dtype(acc));
    for (int64_t start = 0; start < rows; start += chunk) {
      const int64_t n = std::min(chunk, rows - start);
      const at::Tensor h = hidden.narrow(0, start, n);
      const at::Tensor t = targets.narrow(0, start, n);
      const at::Tensor logits = at::matmul(h, weight.t()).to(acc);  // [n, V]
      const at::Tensor keep = t.ne(kIgnoreIndex);
      const at::Tensor index = t.clamp_min(0).unsqueeze(1);
      const at::Tensor lse = logits.logsumexp(-1);
      total.add_(((lse - logits.gather(1, index).squeeze(1)) * keep).sum());
      if (!grad_hidden && !grad_weight) continue;
      // d(sum of the chunk's losses)/d(logits): softmax minus the target's
      // one-hot, zero on ignored rows.
      at::Tensor g = (logits - lse.unsqueeze(1)).exp_();
      g.scatter_add_(1, index, keep.to(acc).neg().unsqueeze(1));
      g.mul_(keep.unsqueeze(1));
      const at::Tensor gc = g.to(hidden.scalar_type());
      if (grad_hidden) dh.narrow(0, start, n).copy_(at::matmul(gc, weight));
      if (grad_weight) dw.add_(at::matmul(gc.t(), h));
    }
    const at::Tensor count = targets.ne(kIgnoreIndex).sum().to(acc);
    ctx->save_for_backward({dh, dw, count});
    ctx->saved_data["weight_dtype"] = static_cast<int64_t>(weight.scalar_type());
    return total / count;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor scale = grad_outputs[0] / saved[2];
    const auto weight_dtype = static_cast<at::ScalarType>(ctx->saved_data["weight_dtype"].toInt());
    at::Tensor dh = saved[0].defined() ? saved[0] * scale.to(saved[0].scalar_type()) : at::Tensor();
    at::Tensor dw = saved[1].defined() ? (saved[1] * scale).to(weight_dtype) : at::Tensor();
    return {dh, dw, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

int64_t LossChunkRows(int64_t rows, int64_t hidden, int64_t vocab) {
  const int64_t factor = std::max<int64_t>(1, (vocab + hidden - 1) / std::max<int64_t>(1, hidden));
  const int64_t want = std::max<int64_t>(1, (rows + factor - 1) / factor);
  int64_t pow2 = 1;
  while (pow2 < want) pow2 <<= 1;
  return pow2;
}

at::Tensor ChunkedCrossEntropy(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets,
                               int64_t chunk_rows) {
  TORCH_CHECK(hidden.dim() == 2 && weight.dim() == 2 && hidden.size(1) == weight.size(1),
              "ChunkedCrossEntropy: hidden [rows, H] and weight [V, H], got ", hidden.sizes(), " and ", weight.sizes());
  TORCH_CHECK(targets.dim() == 1 && targets.size(0) == hidden.size(0), "ChunkedCrossEntropy: targets [rows]");
  const int64_t chunk = chunk_rows > 0 ? chunk_rows : LossChunkRows(hidden.size(0), hidden.size(1), weight.size(0));
  return ChunkedCrossEntropyFunction::apply(hidden, weight, targets.to(at::kLong), chunk, at::GradMode::is_enabled());
}

}  // namespace trainyard
