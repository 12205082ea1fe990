// The FLOPs of training a Llama, counted the two ways public MFU figures
// use: the 6N rule alone (6 × the parameters but the input embedding, per
// token: forward 2N, backward 4N), and with attention's score and value
// products (+ 12 × layers × heads × head_dim × context per token: nanochat's
// estimate_flops, as llm-foundry and PaLM count them).
#ifndef TRAINYARD_BENCH_LLAMA_FLOPS_H_
#define TRAINYARD_BENCH_LLAMA_FLOPS_H_

#include <cstdint>

#include "common/llama_config.h"

namespace trainyard::bench {

struct LlamaTrainingFlops {
  double six_n = 0;           // per token
  double with_attention = 0;  // per token
};

inline LlamaTrainingFlops LlamaFlopsPerToken(const LlamaConfig& c, int64_t context) {
  const double embedding = static_cast<double>(c.vocab_size) * static_cast<double>(c.hidden_size);
  // Tied: the embedding is the output projection too, whose products count.
  const double n = static_cast<double>(c.NumParameters()) - (c.tie_word_embeddings ? 0.0 : embedding);
  LlamaTrainingFlops f;
  f.six_n = 6 * n;
  const double query_width = static_cast<double>(c.num_attention_heads) * static_cast<double>(c.head_dim);
  f.with_attention =
      f.six_n + 12.0 * static_cast<double>(c.num_hidden_layers) * query_width * static_cast<double>(context);
  return f;
}

}  // namespace trainyard::bench

#endif  // TRAINYARD_BENCH_LLAMA_FLOPS_H_
