// The architecture of a Llama-family decoder (Llama 2/3, Mistral, Qwen2), as
// a Hugging Face config.json states it: RMSNorm, rotary position embeddings,
// SwiGLU MLP, grouped-query attention. Torch-free: the coordinator reads it
// at submit to refuse what the engine cannot train, the worker to build the
// model.
#ifndef TRAINYARD_COMMON_LLAMA_CONFIG_H_
#define TRAINYARD_COMMON_LLAMA_CONFIG_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace trainyard {

struct LlamaConfig {
  // "llama", "mistral" or "qwen2" (config.json's model_type).
  std::string model_type = "llama";
  int64_t vocab_size = 32000;
  int64_t hidden_size = 4096;
  int64_t intermediate_size = 11008;
  int64_t num_hidden_layers = 32;
  int64_t num_attention_heads = 32;
  // Grouped-query attention: heads share K and V in groups of
  // num_attention_heads / num_key_value_heads. Default: num_attention_heads.
  int64_t num_key_value_heads = 32;
  // Default: hidden_size / num_attention_heads.
  int64_t head_dim = 128;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  // Rotary scaling: "default" (none) or "llama3" (Llama 3.1's frequency
  // bands, with the four numbers below).
  std::string rope_type = "default";
  double rope_factor = 1.0;
  double rope_low_freq_factor = 1.0;
  double rope_high_freq_factor = 4.0;
  int64_t rope_original_max_position_embeddings = 0;
  int64_t max_position_embeddings = 2048;
  bool tie_word_embeddings = false;
  // Bias in q_proj, k_proj and v_proj (Qwen2: always), and in o_proj
  // (attention_bias of Llama's config sets both).
  bool qkv_bias = false;
  bool o_proj_bias = false;
  bool mlp_bias = false;
  // Attention over at most this many earlier positions (Mistral v0.1's
  // sliding_window; 0: none). A job's context must not exceed it, where
  // windowed attention equals full causal attention.
  int64_t sliding_window = 0;
  // Standard deviation of transformers' _init_weights for Linear and
  // Embedding weights.
  double initializer_range = 0.02;

  // Parameters of the model (embeddings, layers, final norm, and the head
  // unless tied).
  int64_t NumParameters() const;
};

// Reads a config.json's text. `source` names it in errors (a path). Refused,
// by name: another architecture (model_type), a missing or non-positive
// size, heads that do not divide, an activation other than SiLU, a rotary
// scaling other than llama3, attention dropout, and keys this engine does
// not know (a key it ignores is one that does not change the computation:
// token ids, dtype, cache settings, versions).
absl::StatusOr<LlamaConfig> ParseLlamaConfig(std::string_view json_text, std::string_view source);

// The config file `path` names: DIR/config.json, or FILE when it is a file.
std::string LlamaConfigFile(const std::string& path);

// Reads LlamaConfigFile(path): a regular file of at most
// kMaxLlamaConfigBytes (ReadBoundedFile of common/paths.h; NotFound when it
// does not exist).
inline constexpr size_t kMaxLlamaConfigBytes = 1 << 20;
// `beneath`: when not empty, read beneath one of these directories
// (ReadBoundedFile's `beneath`).
absl::StatusOr<LlamaConfig> ReadLlamaConfig(const std::string& path, const std::vector<std::string>& beneath = {});

// A job's sequence length against the model: ≤ max_position_embeddings and,
// with a sliding window, ≤ the window.
absl::Status CheckLlamaContext(const LlamaConfig& config, int64_t context);

// The rotary inverse frequencies, head_dim / 2 of them: theta^(-2i/head_dim),
// rescaled per band for rope_type llama3, as transformers computes them.
std::vector<double> LlamaRopeInverseFrequencies(const LlamaConfig& config);

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_LLAMA_CONFIG_H_
