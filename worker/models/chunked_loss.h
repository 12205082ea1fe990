// The chunked loss: mean cross-entropy of hidden states through a language
// model's output projection, computed a chunk of rows at a time so the
// whole [rows, vocab] logits never exist (Liger-Kernel's fused linear
// cross-entropy, written with ATen ops). The gradients of the hidden states
// and of the projection are computed in the forward, chunk by chunk, while
// each chunk's logits are at hand; backward scales them. Targets equal to
// -100 are ignored (PyTorch's default ignore_index).
#ifndef TRAINYARD_WORKER_MODELS_CHUNKED_LOSS_H_
#define TRAINYARD_WORKER_MODELS_CHUNKED_LOSS_H_

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace trainyard {

// Rows per chunk for `rows` hidden states of width `hidden` and a
// vocabulary of `vocab`: Liger-Kernel's rule, which keeps a chunk's logits
// about the size of the hidden states (the next power of two of
// rows / ceil(vocab / hidden)).
int64_t LossChunkRows(int64_t rows, int64_t hidden, int64_t vocab);

// mean over the rows whose target is not -100 of
// cross_entropy(hidden · weightᵀ, targets); hidden [rows, H], weight
// [V, H], targets [rows] (int64). `chunk_rows` 0: LossChunkRows. The
// logits are taken in float32 (or float64 for float64 inputs); the matrix
// products run in the inputs' dtype, or autocast's when it is on.
// Differentiable in hidden and weight.
at::Tensor ChunkedCrossEntropy(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets,
                               int64_t chunk_rows = 0);

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_MODELS_CHUNKED_LOSS_H_
