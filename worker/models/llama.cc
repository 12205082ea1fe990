#include "worker/models/llama.h"

#include <torch/torch.h>

#include <atomic>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "worker/models/attention_backend.h"

namespace trainyard {
namespace {

// transformers' LlamaRMSNorm: normalized in float32, cast back to the
// input's dtype, then scaled.
class LlamaRmsNormImpl final : public torch::nn::Module {
 public:
  LlamaRmsNormImpl(int64_t dim, double eps)
      : dim_(dim), eps_(eps), weight_(register_parameter("weight", torch::ones({dim}))) {}
  at::Tensor forward(const at::Tensor& x) {
    // ATen's form is transformers' whenever the input's dtype is the
    // weight's (the residual stream is float32 under autocast).
    if (fused_ && x.scalar_type() == weight_.scalar_type()) return at::rms_norm(x, {dim_}, weight_, eps_);
    const at::Tensor h = x.to(at::kFloat);
    const at::Tensor normed = h * torch::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + eps_);
    return weight_ * normed.to(x.scalar_type());
  }
  void set_fused(bool on) { fused_ = on; }

 private:
  int64_t dim_;
  double eps_;
  at::Tensor weight_;
  bool fused_ = false;
};
TORCH_MODULE(LlamaRmsNorm);

// cos and sin of the rotary angles [T, head_dim] for positions 0..T-1, in
// float32 as transformers computes them (inverse frequency times position,
// the half repeated), kept per (T, device).
class LlamaRotaryTable {
 public:
  explicit LlamaRotaryTable(const LlamaConfig& config) {
    const std::vector<double> inv = LlamaRopeInverseFrequencies(config);
    std::vector<float> f(inv.begin(), inv.end());
    inv_freq_ = torch::tensor(f, torch::kFloat);
  }

  std::pair<at::Tensor, at::Tensor> Get(int64_t t, const c10::Device& device) {
    std::lock_guard<std::mutex> lock(mu_);
    const auto key = std::make_tuple(t, device.type(), static_cast<int>(device.index()));
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    torch::NoGradGuard no_grad;
    const at::Tensor pos = torch::arange(t, torch::kFloat);
    const at::Tensor freqs = pos.unsqueeze(1) * inv_freq_.unsqueeze(0);  // [T, head_dim / 2]
    const at::Tensor angles = torch::cat({freqs, freqs}, -1);
    auto entry = std::make_pair(angles.cos().to(device), angles.sin().to(device));
    cache_.emplace(key, entry);
    return entry;
  }

 private:
  at::Tensor inv_freq_;
  std::mutex mu_;
  std::map<std::tuple<int64_t, c10::DeviceType, int>, std::pair<at::Tensor, at::Tensor>> cache_;
};

// x [B, H, T, D]: (x1, x2) → (-x2, x1) on the halves of D.
at::Tensor LlamaRotateHalf(const at::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

at::Tensor LlamaApplyRotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const at::Tensor c = cos.to(x.scalar_type()), s = sin.to(x.scalar_type());
  return x * c + LlamaRotateHalf(x) * s;
}

torch::nn::Linear LlamaLinear(int64_t in, int64_t out, bool bias) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(bias));
}

class LlamaAttentionImpl final : public torch::nn::Module {
 public:
  LlamaAttentionImpl(const LlamaConfig& c, std::shared_ptr<std::atomic<int>> backend)
      : backend_(std::move(backend)),
        heads_(c.num_attention_heads),
        kv_heads_(c.num_key_value_heads),
        head_dim_(c.head_dim),
        q_proj_(register_module("q_proj", LlamaLinear(c.hidden_size, heads_ * head_dim_, c.qkv_bias))),
        k_proj_(register_module("k_proj", LlamaLinear(c.hidden_size, kv_heads_ * head_dim_, c.qkv_bias))),
        v_proj_(register_module("v_proj", LlamaLinear(c.hidden_size, kv_heads_ * head_dim_, c.qkv_bias))),
        o_proj_(register_module("o_proj", LlamaLinear(heads_ * head_dim_, c.hidden_size, c.o_proj_bias))) {}

  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
    const int64_t b = x.size(0), t = x.size(1);
    auto split = [&](const at::Tensor& z, int64_t heads) { return z.view({b, t, heads, head_dim_}).transpose(1, 2); };
    const at::Tensor q = LlamaApplyRotary(split(q_proj_->forward(x), heads_), cos, sin);
    const at::Tensor k = LlamaApplyRotary(split(k_proj_->forward(x), kv_heads_), cos, sin);
    const at::Tensor v = split(v_proj_->forward(x), kv_heads_);
    if (backend_->load(std::memory_order_relaxed) < 0) backend_->store(SdpaBackendFor(q, k, v, kv_heads_ != heads_));
    const at::Tensor y = at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0,
                                                          /*is_causal=*/true, /*scale=*/std::nullopt,
                                                          /*enable_gqa=*/kv_heads_ != heads_);
    return o_proj_->forward(y.transpose(1, 2).reshape({b, t, heads_ * head_dim_}));
  }

 private:
  std::shared_ptr<std::atomic<int>> backend_;  // the model's, set by the first forward
  int64_t heads_, kv_heads_, head_dim_;
  torch::nn::Linear q_proj_, k_proj_, v_proj_, o_proj_;
};
TORCH_MODULE(LlamaAttention);

class LlamaMlpImpl final : public torch::nn::Module {
 public:
  explicit LlamaMlpImpl(const LlamaConfig& c)
      : gate_proj_(register_module("gate_proj", LlamaLinear(c.hidden_size, c.intermediate_size, c.mlp_bias))),
        up_proj_(register_module("up_proj", LlamaLinear(c.hidden_size, c.intermediate_size, c.mlp_bias))),
        down_proj_(register_module("down_proj", LlamaLinear(c.intermediate_size, c.hidden_size, c.mlp_bias))) {}

  at::Tensor forward(const at::Tensor& x) {
    return down_proj_->forward(torch::silu(gate_proj_->forward(x)) * up_proj_->forward(x));
  }

 private:
  torch::nn::Linear gate_proj_, up_proj_, down_proj_;
};
TORCH_MODULE(LlamaMlp);

class LlamaDecoderLayerImpl final : public torch::nn::Module {
 public:
  LlamaDecoderLayerImpl(const LlamaConfig& c, std::shared_ptr<std::atomic<int>> backend)
      : self_attn_(register_module("self_attn", LlamaAttention(c, std::move(backend)))),
        mlp_(register_module("mlp", LlamaMlp(c))),
        input_layernorm_(register_module("input_layernorm", LlamaRmsNorm(c.hidden_size, c.rms_norm_eps))),
        post_attention_layernorm_(
            register_module("post_attention_layernorm", LlamaRmsNorm(c.hidden_size, c.rms_norm_eps))) {}

  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
    const at::Tensor h = x + self_attn_->forward(input_layernorm_->forward(x), cos, sin);
    return h + mlp_->forward(post_attention_layernorm_->forward(h));
  }
  void set_fused_norm(bool on) {
    input_layernorm_->set_fused(on);
    post_attention_layernorm_->set_fused(on);
  }

 private:
  LlamaAttention self_attn_;
  LlamaMlp mlp_;
  LlamaRmsNorm input_layernorm_, post_attention_layernorm_;
};
TORCH_MODULE(LlamaDecoderLayer);

class Llama final : public Model {
 public:
  Llama(const LlamaConfig& c, int64_t context)
      : context_(context),
        rotary_(std::make_shared<LlamaRotaryTable>(c)),
        model_(register_module("model", std::make_shared<torch::nn::Module>())),
        embed_tokens_(model_->register_module("embed_tokens", torch::nn::Embedding(c.vocab_size, c.hidden_size))),
        layer_list_(model_->register_module("layers", torch::nn::ModuleList())) {
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
      LlamaDecoderLayer layer(c, attention_backend_);
      layer_list_->push_back(layer);
      decoder_.push_back(layer);
    }
    norm_ = model_->register_module("norm", LlamaRmsNorm(c.hidden_size, c.rms_norm_eps));
    if (!c.tie_word_embeddings) lm_head_ = register_module("lm_head", LlamaLinear(c.hidden_size, c.vocab_size, false));
    InitWeights(c.initializer_range);
    // The modules FSDP sees each stage use (the tied head uses the embedding).
    embed_group_ = std::make_shared<torch::nn::Module>();
    embed_group_->register_module("embed_tokens", embed_tokens_);
    head_group_ = std::make_shared<torch::nn::Module>();
    head_group_->register_module("norm", norm_);
    if (lm_head_) {
      head_group_->register_module("lm_head", lm_head_);
    } else {
      head_group_->register_module("embed_tokens", embed_tokens_);
    }
  }

  std::vector<Layer> layers() override {
    std::vector<Layer> out;
    auto embed = embed_tokens_;
    out.push_back(
        {"Embedding", embed_group_, [embed](const at::Tensor& tokens) mutable { return embed->forward(tokens); }});
    auto rotary = rotary_;
    for (auto& layer : decoder_) {
      LlamaDecoderLayer l = layer;
      out.push_back({"LlamaDecoderLayer", l.ptr(), [l, rotary](const at::Tensor& x) mutable {
                       auto [cos, sin] = rotary->Get(x.size(1), x.device());
                       return l->forward(x, cos, sin);
                     }});
    }
    auto norm = norm_;
    auto head = lm_head_;
    const bool project = !projection_left_to_loss();
    out.push_back({"Head", head_group_, [norm, head, embed, project](const at::Tensor& x) mutable {
                     const at::Tensor h = norm->forward(x);
                     if (!project) return h;
                     return head ? head->forward(h) : torch::matmul(h, embed->weight.t());
                   }});
    return out;
  }

  void UseFusedOps(const FusedOps& ops) override {
    for (auto& layer : decoder_) layer->set_fused_norm(ops.rms_norm);
    norm_->set_fused(ops.rms_norm);
  }

  at::Tensor output_projection() override { return lm_head_ ? lm_head_->weight : embed_tokens_->weight; }

  int attention_backend() const override { return attention_backend_->load(std::memory_order_relaxed); }

  std::vector<int64_t> sample_shape() const override { return {context_}; }

 private:
  // transformers' LlamaPreTrainedModel._init_weights.
  void InitWeights(double std) {
    torch::NoGradGuard no_grad;
    for (auto& m : modules(/*include_self=*/false)) {
      if (auto* linear = m->as<torch::nn::Linear>()) {
        linear->weight.normal_(0.0, std);
        if (linear->bias.defined()) linear->bias.zero_();
      } else if (auto* embedding = m->as<torch::nn::Embedding>()) {
        embedding->weight.normal_(0.0, std);
      }
    }
  }

  int64_t context_;
  std::shared_ptr<std::atomic<int>> attention_backend_ = std::make_shared<std::atomic<int>>(-1);
  std::shared_ptr<LlamaRotaryTable> rotary_;
  std::shared_ptr<torch::nn::Module> model_;
  torch::nn::Embedding embed_tokens_;
  torch::nn::ModuleList layer_list_;
  std::vector<LlamaDecoderLayer> decoder_;
  LlamaRmsNorm norm_{nullptr};
  torch::nn::Linear lm_head_{nullptr};
  std::shared_ptr<torch::nn::Module> embed_group_, head_group_;
};

}  // namespace

std::shared_ptr<Model> BuildLlama(const LlamaConfig& config, int64_t context) {
  return std::make_shared<Llama>(config, context);
}

std::shared_ptr<Model> MakeLlama(const ModelSpec& spec) {
  auto config = ReadLlamaConfig(LlamaConfigSource(spec));
  if (!config.ok()) throw std::invalid_argument("model.config: " + std::string(config.status().message()));
  if (auto s = CheckLlamaContext(*config, spec.context); !s.ok()) {
    throw std::invalid_argument("model.context: " + std::string(s.message()));
  }
  return BuildLlama(*config, spec.context);
}

}  // namespace trainyard
