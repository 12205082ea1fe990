#include "worker/models.h"

#include <torch/script.h>

#include <torch/torch.h>

#include <cmath>

#include <limits>
#include <mutex>
#include "common/llama_config.h"
#include "worker/activation_checkpoint.h"
#include "worker/llama.h"

namespace trainyard {
namespace {

// Multi-layer perceptron: input → hidden... (ReLU) → num_classes.
class Mlp final : public Model {
 public:
  explicit Mlp(const ModelSpec& spec) : input_size_(spec.input_size) {
    int64_t in = spec.input_size;
    for (size_t i = 0; i < spec.hidden.size(); ++i) {
      layers_.push_back(register_module("fc" + std::to_string(i), torch::nn::Linear(in, spec.hidden[i])));
      in = spec.hidden[i];
    }
    layers_.push_back(
        register_module("fc" + std::to_string(spec.hidden.size()), torch::nn::Linear(in, spec.num_classes)));
  }

  std::vector<Layer> layers() override {
    std::vector<Layer> out;
    for (size_t i = 0; i < layers_.size(); ++i) {
      torch::nn::Linear lin = layers_[i];
      const bool first = i == 0, last = i + 1 == layers_.size();
      const int64_t in = input_size_;
      out.push_back({"Linear", lin.ptr(), [lin, first, last, in](const at::Tensor& x) mutable {
                       at::Tensor y = lin->forward(first ? x.reshape({x.size(0), in}) : x);
                       return last ? y : torch::relu(y);
                     }});
    }
    return out;
  }

  std::vector<int64_t> sample_shape() const override { return {input_size_}; }

 private:
  int64_t input_size_;
  std::vector<torch::nn::Linear> layers_;
};

// The classic MNIST CNN: two 3x3 convolutions, max-pool, two linear layers.
class Cnn final : public Model {
 public:
  explicit Cnn(const ModelSpec& spec)
      : conv1_(register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 16, 3)))),
        conv2_(register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 32, 3)))),
        fc1_(register_module("fc1", torch::nn::Linear(32 * 12 * 12, 128))),
        fc2_(register_module("fc2", torch::nn::Linear(128, spec.num_classes))) {}

  std::vector<Layer> layers() override {
    auto c1 = conv1_, c2 = conv2_;
    auto f1 = fc1_, f2 = fc2_;
    return {
        {"Conv2d", c1.ptr(),
         [c1](const at::Tensor& x) mutable {
           return torch::relu(c1->forward(x.reshape({x.size(0), 1, 28, 28})));
         }},
        {"Conv2d", c2.ptr(),
         [c2](const at::Tensor& x) mutable { return torch::max_pool2d(torch::relu(c2->forward(x)), 2).flatten(1); }},
        {"Linear", f1.ptr(), [f1](const at::Tensor& x) mutable { return torch::relu(f1->forward(x)); }},
        {"Linear", f2.ptr(), [f2](const at::Tensor& x) mutable { return f2->forward(x); }},
    };
  }

  std::vector<int64_t> sample_shape() const override { return {1, 28, 28}; }

 private:
  torch::nn::Conv2d conv1_;
  torch::nn::Conv2d conv2_;
  torch::nn::Linear fc1_;
  torch::nn::Linear fc2_;
};

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

// ResNet-18 for 3 x image_size x image_size images (the CIFAR variant: a 3x3
// stem, no max-pool):
// four stages of two BasicBlocks with `channels` x1, x2, x4, x8 channels,
// global average pooling and a linear classifier. BatchNorm's running
// statistics are buffers.
class BasicBlockImpl final : public torch::nn::Module {
 public:
  BasicBlockImpl(int64_t in, int64_t out, int64_t stride)
      : conv1_(register_module(
            "conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false)))),
        bn1_(register_module("bn1", torch::nn::BatchNorm2d(out))),
        conv2_(
            register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(out, out, 3).padding(1).bias(false)))),
        bn2_(register_module("bn2", torch::nn::BatchNorm2d(out))) {
    if (stride != 1 || in != out) {
      down_conv_ = register_module("downsample_conv",
                                   torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 1).stride(stride).bias(false)));
      down_bn_ = register_module("downsample_bn", torch::nn::BatchNorm2d(out));
    }
  }
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor y = torch::relu(bn1_->forward(conv1_->forward(x)));
    y = bn2_->forward(conv2_->forward(y));
    at::Tensor shortcut = down_conv_ ? down_bn_->forward(down_conv_->forward(x)) : x;
    return torch::relu(y + shortcut);
  }

 private:
  torch::nn::Conv2d conv1_;
  torch::nn::BatchNorm2d bn1_;
  torch::nn::Conv2d conv2_;
  torch::nn::BatchNorm2d bn2_;
  torch::nn::Conv2d down_conv_{nullptr};
  torch::nn::BatchNorm2d down_bn_{nullptr};
};
TORCH_MODULE(BasicBlock);

class ResNet final : public Model {
 public:
  explicit ResNet(const ModelSpec& spec)
      : image_size_(spec.image_size),
        stem_(register_module("stem", std::make_shared<torch::nn::Module>())),
        conv_(stem_->register_module(
            "conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, spec.channels, 3).padding(1).bias(false)))),
        bn_(stem_->register_module("bn", torch::nn::BatchNorm2d(spec.channels))),
        fc_(register_module("fc", torch::nn::Linear(8 * spec.channels, spec.num_classes))) {
    int64_t in = spec.channels;
    for (int stage = 0; stage < 4; ++stage) {
      const int64_t out = spec.channels << stage;
      for (int b = 0; b < 2; ++b) {
        const int64_t stride = stage > 0 && b == 0 ? 2 : 1;
        blocks_.push_back(register_module("layer" + std::to_string(stage + 1) + "_" + std::to_string(b),
                                          BasicBlock(in, out, stride)));
        in = out;
      }
    }
  }

  std::vector<Layer> layers() override {
    std::vector<Layer> out;
    auto conv = conv_;
    auto bn = bn_;
    const int64_t side = image_size_;
    out.push_back({"Stem", stem_, [conv, bn, side](const at::Tensor& x) mutable {
                     return torch::relu(bn->forward(conv->forward(x.reshape({x.size(0), 3, side, side}))));
                   }});
    for (auto& block : blocks_) {
      BasicBlock b = block;
      out.push_back({"BasicBlock", b.ptr(), [b](const at::Tensor& x) mutable { return b->forward(x); }});
    }
    auto fc = fc_;
    out.push_back({"Linear", fc.ptr(), [fc](const at::Tensor& x) mutable {
                     return fc->forward(torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1));
                   }});
    return out;
  }

  std::vector<int64_t> sample_shape() const override { return {3, image_size_, image_size_}; }

 private:
  int64_t image_size_;
  std::shared_ptr<torch::nn::Module> stem_;
  torch::nn::Conv2d conv_;
  torch::nn::BatchNorm2d bn_;
  torch::nn::Linear fc_;
  std::vector<BasicBlock> blocks_;
};

// A user's module saved from Python with torch.jit.script(model).save(PATH).
// Its parameters and buffers are registered here under their own dotted
// names (a tree of empty modules mirrors the script module's), so training,
// DDP, FSDP and checkpoints see the script module's very tensors.
class TorchScriptModel final : public Model {
 public:
  TorchScriptModel(const ModelSpec& spec) : path_(spec.path) {
    try {
      script_ = torch::jit::load(spec.path);
    } catch (const c10::Error& e) {
      throw std::runtime_error("model.kind torchscript:" + spec.path + ": cannot load: " + e.what_without_backtrace());
    }
    script_.train();
    Mirror(script_, this);
  }

  std::vector<Layer> layers() override {
    torch::jit::Module script = script_;
    return {{"TorchScript", shared_from_this(),
             [script](const at::Tensor& x) mutable { return script.forward({x}).toTensor(); }}};
  }

  // Whatever the script module takes; the data's own sample shape is used.
  std::vector<int64_t> sample_shape() const override { return {}; }

  void train(bool on) override {
    torch::nn::Module::train(on);
    script_.train(on);
  }

 private:
  static void Mirror(const torch::jit::Module& from, torch::nn::Module* to) {
    for (const auto& p : from.named_parameters(/*recurse=*/false)) to->register_parameter(p.name, p.value);
    for (const auto& b : from.named_buffers(/*recurse=*/false)) to->register_buffer(b.name, b.value);
    for (const auto& child : from.named_children()) {
      auto mirror = std::make_shared<torch::nn::Module>();
      Mirror(child.value, mirror.get());
      to->register_module(child.name, mirror);
    }
  }

  std::string path_;
  torch::jit::Module script_;
};

}  // namespace

std::vector<Layer> Model::stages() {
  std::vector<Layer> out = layers();
  if (checkpointed_type_.empty()) return out;
  for (Layer& layer : out) {
    if (layer.type == checkpointed_type_) layer.forward = Checkpointed(std::move(layer.forward));
  }
  return out;
}

std::shared_ptr<Model> BuildModel(const ModelSpec& spec, uint64_t seed) {
  // Module constructors draw from the default generator: seed it, build, and
  // so get the same weights on every rank. The lock keeps ranks that run as
  // threads of one process (tests, benchmarks) from interleaving their draws.
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  torch::manual_seed(seed);
  switch (spec.kind) {
    case ModelKind::kMlp: return std::make_shared<Mlp>(spec);
    case ModelKind::kCnn: return std::make_shared<Cnn>(spec);
    case ModelKind::kGpt: return std::make_shared<Gpt>(spec);
    case ModelKind::kResNet: return std::make_shared<ResNet>(spec);
    case ModelKind::kTorchScript: return std::make_shared<TorchScriptModel>(spec);
    case ModelKind::kLlama: {
      auto config = ReadLlamaConfig(LlamaConfigSource(spec));
      if (!config.ok()) throw std::invalid_argument("model.config: " + std::string(config.status().message()));
      if (auto s = CheckLlamaContext(*config, spec.context); !s.ok()) {
        throw std::invalid_argument("model.context: " + std::string(s.message()));
      }
      return BuildLlama(*config, spec.context);
    }
  }
  throw std::invalid_argument("unknown model kind");
}

}  // namespace trainyard
