#include "worker/models.h"

#include <torch/torch.h>

#include <mutex>

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
    layers_.push_back(register_module("fc" + std::to_string(spec.hidden.size()), torch::nn::Linear(in, spec.num_classes)));
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
        {"Conv2d", c1.ptr(), [c1](const at::Tensor& x) mutable { return torch::relu(c1->forward(x.reshape({x.size(0), 1, 28, 28}))); }},
        {"Conv2d", c2.ptr(), [c2](const at::Tensor& x) mutable { return torch::max_pool2d(torch::relu(c2->forward(x)), 2).flatten(1); }},
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

}  // namespace

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
  }
  throw std::invalid_argument("unknown model kind");
}

}  // namespace trainyard
