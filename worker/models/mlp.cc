#include "worker/models/mlp.h"

#include <torch/torch.h>

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

}  // namespace

std::shared_ptr<Model> MakeMlp(const ModelSpec& spec) { return std::make_shared<Mlp>(spec); }

}  // namespace trainyard
