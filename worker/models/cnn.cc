#include "worker/models/cnn.h"

#include <torch/torch.h>

namespace trainyard {
namespace {

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

}  // namespace

std::shared_ptr<Model> MakeCnn(const ModelSpec& spec) { return std::make_shared<Cnn>(spec); }

}  // namespace trainyard
