// The Llama-family decoder (Llama 2/3, Mistral, Qwen2) of a Hugging Face
// config.json: RMSNorm, rotary position embeddings, grouped-query attention
// through at::scaled_dot_product_attention, SwiGLU MLP. Its tensors carry
// transformers' names (model.embed_tokens.weight,
// model.layers.N.self_attn.q_proj.weight, ..., model.norm.weight,
// lm_head.weight), so a Hugging Face directory loads with init_from as it is
// and a FULL checkpoint is one transformers loads.
#ifndef TRAINYARD_WORKER_MODELS_LLAMA_H_
#define TRAINYARD_WORKER_MODELS_LLAMA_H_

#include <memory>

#include "common/job_spec.h"
#include "common/llama_config.h"
#include "worker/models/model.h"

namespace trainyard {

// Token ids [B, T] (T ≤ context) → logits [B, T, vocab_size]. Layers:
// "Embedding", one "LlamaDecoderLayer" per layer, "Head" (final norm and
// the output projection, or the token embedding when tied). Weights as
// transformers' _init_weights draws them: Linear and Embedding
// N(0, initializer_range), biases 0, norms 1 — from the default generator
// (BuildModel seeds it).
std::shared_ptr<Model> BuildLlama(const LlamaConfig& config, int64_t context);

// The model of `spec` (kind llama): its config.json read from model.config
// (or init_from's directory) and checked against model.context. Throws
// std::invalid_argument naming the field when it cannot be built.
std::shared_ptr<Model> MakeLlama(const ModelSpec& spec);

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_MODELS_LLAMA_H_
