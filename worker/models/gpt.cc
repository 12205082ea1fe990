#include "worker/models/gpt.h"

#include <torch/torch.h>

#include <cmath>
#include <limits>

namespace trainyard {
namespace {

// GPT-2 style pre-norm transformer block: causal self-attention and a 4x MLP.
class BlockImpl final : public torch::nn::Module {
 public:
  BlockImpl(int64_t width, int64_t heads)
      : heads_(heads),
        ln1_(register_module("ln_1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({width})))),
        qkv_(register_module("attn_c_attn", torch::nn::Linear(width, 3 * width))),
        proj_(register_module("attn_c_proj", torch::nn::Linear(width, width))),
        ln2_(register_module("ln_2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({width})))),
        fc_(register_module("mlp_c_fc", torch::nn::Linear(width, 4 * width))),
        fc_proj_(register_module("mlp_c_proj", torch::nn::Linear(4 * width, width))) {}

  at::Tensor forward(const at::Tensor& x) {
    const int64_t b = x.size(0), t = x.size(1), c = x.size(2), d = c / heads_;
    auto qkv = qkv_->forward(ln1_->forward(x)).split(c, 2);
    auto heads = [&](const at::Tensor& z) { return z.view({b, t, heads_, d}).transpose(1, 2); };
    at::Tensor q = heads(qkv[0]), k = heads(qkv[1]), v = heads(qkv[2]);
    at::Tensor att = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(d));
    at::Tensor mask = torch::ones({t, t}, torch::kBool).tril();
    att = torch::softmax(att.masked_fill(mask.logical_not(), -std::numeric_limits<float>::infinity()), -1);
    at::Tensor y = torch::matmul(att, v).transpose(1, 2).contiguous().view({b, t, c});
    at::Tensor h = x + proj_->forward(y);
    return h + fc_proj_->forward(torch::gelu(fc_->forward(ln2_->forward(h))));
  }

 private:
  int64_t heads_;
  torch::nn::LayerNorm ln1_;
  torch::nn::Linear qkv_, proj_;
  torch::nn::LayerNorm ln2_;
  torch::nn::Linear fc_, fc_proj_;
};
TORCH_MODULE(Block);

// A small decoder-only transformer on token ids [B, T] → logits [B, T, vocab].
// Layers: "Embedding" (token + position), one "Block" per layer, "Head"
// (final LayerNorm and the output projection, tied to the token embedding by
// default).
class Gpt final : public Model {
 public:
  explicit Gpt(const ModelSpec& spec)
      : context_(spec.context),
        wte_(register_module("wte", torch::nn::Embedding(spec.vocab, spec.width))),
        wpe_(register_module("wpe", torch::nn::Embedding(spec.context, spec.width))),
        ln_f_(register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({spec.width})))) {
    for (int64_t i = 0; i < spec.layers; ++i) {
      blocks_.push_back(register_module("h" + std::to_string(i), Block(spec.width, spec.heads)));
    }
    if (!spec.tied_head) {
      head_ =
          register_module("lm_head", torch::nn::Linear(torch::nn::LinearOptions(spec.width, spec.vocab).bias(false)));
    }
    {
      // GPT-2's initialization of the embeddings (std 0.02): with the tied
      // head, N(0, 1) embeddings would start from logits of std sqrt(width).
      torch::NoGradGuard no_grad;
      wte_->weight.normal_(0.0, 0.02);
      wpe_->weight.normal_(0.0, 0.02);
    }
    // Embedding and head in one module so FSDP sees which parameters they use.
    embed_ = std::make_shared<torch::nn::Module>();
    embed_->register_module("wte", wte_);
    embed_->register_module("wpe", wpe_);
    head_group_ = std::make_shared<torch::nn::Module>();
    head_group_->register_module("ln_f", ln_f_);
    if (head_) {
      head_group_->register_module("lm_head", head_);
    } else {
      head_group_->register_module("wte", wte_);
    }
  }

  std::vector<Layer> layers() override {
    std::vector<Layer> out;
    auto wte = wte_, wpe = wpe_;
    out.push_back({"Embedding", embed_, [wte, wpe](const at::Tensor& tokens) mutable {
                     at::Tensor pos = torch::arange(tokens.size(1), torch::kLong);
                     return wte->forward(tokens) + wpe->forward(pos).unsqueeze(0);
                   }});
    for (auto& block : blocks_) {
      Block b = block;
      out.push_back({"Block", b.ptr(), [b](const at::Tensor& x) mutable { return b->forward(x); }});
    }
    auto ln_f = ln_f_;
    auto head = head_;
    out.push_back({"Head", head_group_, [ln_f, head, wte](const at::Tensor& x) mutable {
                     at::Tensor h = ln_f->forward(x);
                     return head ? head->forward(h) : torch::matmul(h, wte->weight.t());
                   }});
    return out;
  }

  std::vector<int64_t> sample_shape() const override { return {context_}; }

 private:
  int64_t context_;
  torch::nn::Embedding wte_, wpe_;
  torch::nn::LayerNorm ln_f_;
  std::vector<Block> blocks_;
  torch::nn::Linear head_{nullptr};
  std::shared_ptr<torch::nn::Module> embed_, head_group_;
};

}  // namespace

std::shared_ptr<Model> MakeGpt(const ModelSpec& spec) { return std::make_shared<Gpt>(spec); }

}  // namespace trainyard
