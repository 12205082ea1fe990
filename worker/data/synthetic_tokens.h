// SyntheticTokens: learnable fake token sequences for language models.
#ifndef TRAINYARD_WORKER_DATA_SYNTHETIC_TOKENS_H_
#define TRAINYARD_WORKER_DATA_SYNTHETIC_TOKENS_H_

#include <cstdint>
#include <vector>

#include "worker/data/data.h"

namespace trainyard {

// Deterministic token sequences for language models: sample i is a sequence
// of context + 1 tokens drawn from a generator seeded by (seed, i), where each
// next token follows a fixed random affine rule of the previous one
// (next = (a·prev + b) mod vocab) with probability 0.9 and is uniform
// otherwise — learnable, and far from trivial at the start. inputs are the
// first `context` tokens, targets the next ones ([B, T] int64 each).
class SyntheticTokens final : public Dataset {
 public:
  SyntheticTokens(int64_t context, int64_t vocab, int64_t num_samples, uint64_t seed);
  int64_t size() const override { return num_samples_; }
  Batch Get(const std::vector<int64_t>& indices) const override;

 private:
  int64_t context_, vocab_, num_samples_;
  uint64_t seed_;
  int64_t a_, b_;
};

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_DATA_SYNTHETIC_TOKENS_H_
