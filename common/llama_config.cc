#include "common/llama_config.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <numbers>
#include <set>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/paths.h"

namespace trainyard {
namespace {

using nlohmann::json;

// Keys that do not change what the model computes in training: token ids,
// storage dtype, inference and output settings, provenance.
const std::set<std::string, std::less<>>& IgnoredKeys() {
  static const std::set<std::string, std::less<>> keys = {"bos_token_id",
                                                          "eos_token_id",
                                                          "pad_token_id",
                                                          "torch_dtype",
                                                          "dtype",
                                                          "transformers_version",
                                                          "use_cache",
                                                          "output_attentions",
                                                          "output_hidden_states",
                                                          "return_dict",
                                                          "pretraining_tp",
                                                          "tokenizer_class",
                                                          "name_or_path",
                                                          "max_window_layers",
                                                          "id2label",
                                                          "label2id",
                                                          "is_decoder",
                                                          "tie_encoder_decoder",
                                                          "chunk_size_feed_forward",
                                                          "problem_type",
                                                          "torchscript",
                                                          "use_return_dict",
                                                          "cache_implementation",
                                                          "model_name"};
  return keys;
}

// Keys this engine reads.
const std::set<std::string, std::less<>>& ReadKeys() {
  static const std::set<std::string, std::less<>> keys = {
      "architectures",       "model_type",          "vocab_size",
      "hidden_size",         "intermediate_size",   "num_hidden_layers",
      "num_attention_heads", "num_key_value_heads", "head_dim",
      "hidden_act",          "rms_norm_eps",        "rope_theta",
      "rope_scaling",        "rope_parameters",     "max_position_embeddings",
      "tie_word_embeddings", "attention_bias",      "mlp_bias",
      "sliding_window",      "use_sliding_window",  "layer_types",
      "attention_dropout",   "initializer_range"};
  return keys;
}

class Reader {
 public:
  Reader(const json& j, std::string source) : j_(j), source_(std::move(source)) {}

  absl::Status Error(const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat(source_, ": ", what));
  }

  bool Has(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }

  absl::Status Int(const char* key, int64_t& out, bool required) const {
    if (!Has(key)) return required ? Error(absl::StrCat("'", key, "' is missing")) : absl::OkStatus();
    const json& v = j_.at(key);
    if (!v.is_number_integer()) return Error(absl::StrCat("'", key, "' must be an integer, not ", v.dump()));
    out = v.get<int64_t>();
    if (out <= 0) return Error(absl::StrCat("'", key, "' must be positive, not ", out));
    return absl::OkStatus();
  }

  absl::Status Number(const json& obj, const char* key, double& out, bool required) const {
    if (!obj.contains(key) || obj.at(key).is_null()) {
      return required ? Error(absl::StrCat("'", key, "' is missing")) : absl::OkStatus();
    }
    const json& v = obj.at(key);
    if (!v.is_number()) return Error(absl::StrCat("'", key, "' must be a number, not ", v.dump()));
    out = v.get<double>();
    return absl::OkStatus();
  }

  absl::Status Bool(const char* key, bool& out) const {
    if (!Has(key)) return absl::OkStatus();
    const json& v = j_.at(key);
    if (!v.is_boolean()) return Error(absl::StrCat("'", key, "' must be true or false, not ", v.dump()));
    out = v.get<bool>();
    return absl::OkStatus();
  }

 private:
  const json& j_;
  std::string source_;
};

#define TY_RETURN_IF_ERROR(expr)                       \
  do {                                                 \
    if (absl::Status s_ = (expr); !s_.ok()) return s_; \
  } while (0)

// Rotary settings: transformers 4's rope_theta + rope_scaling, or 5's
// rope_parameters (rope_theta inside).
absl::Status ReadRope(const json& j, const Reader& r, LlamaConfig& c) {
  TY_RETURN_IF_ERROR(r.Number(j, "rope_theta", c.rope_theta, false));
  const json* scaling = nullptr;
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    if (j.contains(key) && !j.at(key).is_null()) {
      if (!j.at(key).is_object()) return r.Error(absl::StrCat("'", key, "' must be an object"));
      scaling = &j.at(key);
      break;
    }
  }
  if (scaling == nullptr) return absl::OkStatus();
  const json& s = *scaling;
  TY_RETURN_IF_ERROR(r.Number(s, "rope_theta", c.rope_theta, false));
  std::string type = "default";
  for (const char* key : {"rope_type", "type"}) {
    if (s.contains(key) && s.at(key).is_string()) {
      type = s.at(key).get<std::string>();
      break;
    }
  }
  if (type == "default") return absl::OkStatus();
  if (type != "llama3") {
    return r.Error(absl::StrCat("rotary scaling '", type, "' is not supported (supported: default, llama3)"));
  }
  c.rope_type = "llama3";
  TY_RETURN_IF_ERROR(r.Number(s, "factor", c.rope_factor, true));
  TY_RETURN_IF_ERROR(r.Number(s, "low_freq_factor", c.rope_low_freq_factor, true));
  TY_RETURN_IF_ERROR(r.Number(s, "high_freq_factor", c.rope_high_freq_factor, true));
  double original = 0;
  TY_RETURN_IF_ERROR(r.Number(s, "original_max_position_embeddings", original, true));
  c.rope_original_max_position_embeddings = static_cast<int64_t>(original);
  if (c.rope_factor < 1.0) return r.Error(absl::StrCat("rope factor must be at least 1, not ", c.rope_factor));
  if (!(c.rope_high_freq_factor > c.rope_low_freq_factor) || c.rope_low_freq_factor <= 0) {
    return r.Error("llama3 rope scaling needs 0 < low_freq_factor < high_freq_factor");
  }
  if (c.rope_original_max_position_embeddings <= 0) {
    return r.Error("llama3 rope scaling needs a positive original_max_position_embeddings");
  }
  return absl::OkStatus();
}

}  // namespace

int64_t LlamaConfig::NumParameters() const {
  const int64_t h = hidden_size, q = num_attention_heads * head_dim, kv = num_key_value_heads * head_dim;
  int64_t attention = h * q + 2 * h * kv + q * h;
  if (qkv_bias) attention += q + 2 * kv;
  if (o_proj_bias) attention += h;
  int64_t mlp = 3 * h * intermediate_size;
  if (mlp_bias) mlp += 2 * intermediate_size + h;
  const int64_t layer = attention + mlp + 2 * h;  // + input and post-attention RMSNorm
  const int64_t embeddings = vocab_size * h;
  return embeddings + num_hidden_layers * layer + h + (tie_word_embeddings ? 0 : embeddings);
}

absl::StatusOr<LlamaConfig> ParseLlamaConfig(std::string_view json_text, std::string_view source) {
  const std::string name(source);
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": not JSON: ", e.what()));
  }
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(name, ": not a JSON object"));
  Reader r(j, name);
  LlamaConfig c;

  if (!j.contains("model_type") || !j.at("model_type").is_string()) return r.Error("'model_type' is missing");
  c.model_type = j.at("model_type").get<std::string>();
  if (c.model_type != "llama" && c.model_type != "mistral" && c.model_type != "qwen2") {
    return r.Error(absl::StrCat("model_type '", c.model_type,
                                "' is not a Llama-family decoder (supported: llama, mistral, qwen2)"));
  }
  if (r.Has("architectures")) {
    static const std::set<std::string, std::less<>> kCausal = {"LlamaForCausalLM", "MistralForCausalLM",
                                                               "Qwen2ForCausalLM"};
    if (!j.at("architectures").is_array()) return r.Error("'architectures' must be a list");
    for (const json& a : j.at("architectures")) {
      if (!a.is_string() || !kCausal.contains(a.get<std::string>())) {
        return r.Error(absl::StrCat("architecture ", a.dump(),
                                    " is not supported (supported: LlamaForCausalLM, MistralForCausalLM, "
                                    "Qwen2ForCausalLM)"));
      }
    }
  }

  std::vector<std::string> unknown;
  for (const auto& [key, value] : j.items()) {
    if (key.starts_with("_") || IgnoredKeys().contains(key) || ReadKeys().contains(key)) continue;
    unknown.push_back(key);
  }
  if (!unknown.empty()) {
    return r.Error(absl::StrCat("keys this engine does not support: ", absl::StrJoin(unknown, ", ")));
  }

  TY_RETURN_IF_ERROR(r.Int("vocab_size", c.vocab_size, true));
  TY_RETURN_IF_ERROR(r.Int("hidden_size", c.hidden_size, true));
  TY_RETURN_IF_ERROR(r.Int("intermediate_size", c.intermediate_size, true));
  TY_RETURN_IF_ERROR(r.Int("num_hidden_layers", c.num_hidden_layers, true));
  TY_RETURN_IF_ERROR(r.Int("num_attention_heads", c.num_attention_heads, true));
  c.num_key_value_heads = c.num_attention_heads;
  TY_RETURN_IF_ERROR(r.Int("num_key_value_heads", c.num_key_value_heads, false));
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    return r.Error(absl::StrCat("num_attention_heads (", c.num_attention_heads,
                                ") must be a multiple of num_key_value_heads (", c.num_key_value_heads, ")"));
  }
  if (r.Has("head_dim")) {
    TY_RETURN_IF_ERROR(r.Int("head_dim", c.head_dim, true));
  } else {
    if (c.hidden_size % c.num_attention_heads != 0) {
      return r.Error(absl::StrCat("hidden_size (", c.hidden_size, ") must be a multiple of num_attention_heads (",
                                  c.num_attention_heads, ") when head_dim is not given"));
    }
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  if (c.head_dim % 2 != 0)
    return r.Error(absl::StrCat("head_dim must be even for rotary embeddings, not ", c.head_dim));
  // transformers' defaults when the key is absent.
  c.max_position_embeddings = c.model_type == "mistral" ? 4096 * 32 : c.model_type == "qwen2" ? 32768 : 2048;
  TY_RETURN_IF_ERROR(r.Int("max_position_embeddings", c.max_position_embeddings, false));

  if (r.Has("hidden_act")) {
    const json& act = j.at("hidden_act");
    if (!act.is_string() || act.get<std::string>() != "silu") {
      return r.Error(absl::StrCat("hidden_act ", act.dump(), " is not supported (SwiGLU: silu)"));
    }
  }
  double dropout = 0;
  TY_RETURN_IF_ERROR(r.Number(j, "attention_dropout", dropout, false));
  if (dropout != 0) return r.Error(absl::StrCat("attention_dropout ", dropout, " is not supported (0 only)"));
  TY_RETURN_IF_ERROR(r.Number(j, "rms_norm_eps", c.rms_norm_eps, false));
  if (!(c.rms_norm_eps > 0)) return r.Error("'rms_norm_eps' must be positive");
  TY_RETURN_IF_ERROR(r.Number(j, "initializer_range", c.initializer_range, false));
  if (!(c.initializer_range > 0)) return r.Error("'initializer_range' must be positive");
  TY_RETURN_IF_ERROR(ReadRope(j, r, c));
  if (!(c.rope_theta > 0)) return r.Error("'rope_theta' must be positive");
  TY_RETURN_IF_ERROR(r.Bool("tie_word_embeddings", c.tie_word_embeddings));

  if (c.model_type == "qwen2") {
    c.qkv_bias = true;  // Qwen2's q, k and v projections always have a bias
  }
  bool attention_bias = false;
  TY_RETURN_IF_ERROR(r.Bool("attention_bias", attention_bias));
  if (attention_bias) {
    if (c.model_type != "llama") {
      return r.Error(absl::StrCat("attention_bias is a Llama option; ", c.model_type, " has no such setting"));
    }
    c.qkv_bias = c.o_proj_bias = true;
  }
  TY_RETURN_IF_ERROR(r.Bool("mlp_bias", c.mlp_bias));

  // Sliding windows: Mistral's sliding_window, Qwen2's when
  // use_sliding_window, transformers 5's per-layer layer_types.
  bool windowed = c.model_type == "mistral";
  if (c.model_type == "qwen2") {
    bool use = false;
    TY_RETURN_IF_ERROR(r.Bool("use_sliding_window", use));
    windowed = use;
  }
  if (r.Has("layer_types")) {
    const json& types = j.at("layer_types");
    if (!types.is_array()) return r.Error("'layer_types' must be a list");
    bool any_sliding = false;
    for (const json& t : types) {
      if (!t.is_string()) return r.Error("'layer_types' must list strings");
      const std::string s = t.get<std::string>();
      if (s == "sliding_attention") {
        any_sliding = true;
      } else if (s != "full_attention") {
        return r.Error(absl::StrCat("layer type '", s, "' is not supported (full_attention, sliding_attention)"));
      }
    }
    windowed = windowed || any_sliding;
  }
  if (windowed && r.Has("sliding_window")) TY_RETURN_IF_ERROR(r.Int("sliding_window", c.sliding_window, true));
  return c;
}

std::string LlamaConfigFile(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_directory(path, ec) ? path + "/config.json" : path;
}

absl::StatusOr<LlamaConfig> ReadLlamaConfig(const std::string& path, const std::vector<std::string>& beneath) {
  const std::string file = LlamaConfigFile(path);
  // A config.json is a few kilobytes: a FIFO or a huge file named as one
  // is refused at once instead of read.
  absl::StatusOr<std::string> text = ReadBoundedFile(file, kMaxLlamaConfigBytes, beneath);
  if (!text.ok()) return text.status();
  return ParseLlamaConfig(*text, file);
}

absl::Status CheckLlamaContext(const LlamaConfig& c, int64_t context) {
  if (context > c.max_position_embeddings) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.context ", context, " exceeds the model's max_position_embeddings (", c.max_position_embeddings, ")"));
  }
  if (c.sliding_window > 0 && context > c.sliding_window) {
    return absl::InvalidArgumentError(absl::StrCat("model.context ", context, " exceeds the model's sliding_window (",
                                                   c.sliding_window,
                                                   "): sliding-window attention is not supported; a context "
                                                   "within the window trains the same model"));
  }
  return absl::OkStatus();
}

std::vector<double> LlamaRopeInverseFrequencies(const LlamaConfig& c) {
  std::vector<double> inv(static_cast<size_t>(c.head_dim / 2));
  for (size_t i = 0; i < inv.size(); ++i) {
    inv[i] = 1.0 / std::pow(c.rope_theta, static_cast<double>(2 * i) / static_cast<double>(c.head_dim));
  }
  if (c.rope_type != "llama3") return inv;
  const double old_len = static_cast<double>(c.rope_original_max_position_embeddings);
  const double low_wavelen = old_len / c.rope_low_freq_factor;
  const double high_wavelen = old_len / c.rope_high_freq_factor;
  for (double& f : inv) {
    const double wavelen = 2 * std::numbers::pi / f;
    if (wavelen < high_wavelen) continue;  // high frequencies: kept
    if (wavelen > low_wavelen) {           // low frequencies: divided by the factor
      f /= c.rope_factor;
      continue;
    }
    // In between: interpolated.
    const double smooth =
        (old_len / wavelen - c.rope_low_freq_factor) / (c.rope_high_freq_factor - c.rope_low_freq_factor);
    f = (1 - smooth) * f / c.rope_factor + smooth * f;
  }
  return inv;
}

}  // namespace trainyard
