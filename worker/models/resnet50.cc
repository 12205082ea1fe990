#include "worker/models/resnet50.h"

#include <torch/torch.h>

namespace trainyard {
namespace {

torch::nn::Conv2d Conv(int64_t in, int64_t out, int64_t kernel, int64_t stride) {
  return torch::nn::Conv2d(
      torch::nn::Conv2dOptions(in, out, kernel).stride(stride).padding((kernel - 1) / 2).bias(false));
}

// torchvision's Bottleneck: 1x1 (in -> planes), 3x3 with the stride
// (planes -> planes), 1x1 (planes -> 4 planes), each with BatchNorm; a
// 1x1 strided projection ("downsample": Sequential(conv, bn)) where the
// shape changes. ReLUs in place, as torchvision's ReLU(inplace=True).
class BottleneckImpl final : public torch::nn::Module {
 public:
  static constexpr int64_t kExpansion = 4;

  BottleneckImpl(int64_t in, int64_t planes, int64_t stride)
      : conv1_(register_module("conv1", Conv(in, planes, 1, 1))),
        bn1_(register_module("bn1", torch::nn::BatchNorm2d(planes))),
        conv2_(register_module("conv2", Conv(planes, planes, 3, stride))),
        bn2_(register_module("bn2", torch::nn::BatchNorm2d(planes))),
        conv3_(register_module("conv3", Conv(planes, planes * kExpansion, 1, 1))),
        bn3_(register_module("bn3", torch::nn::BatchNorm2d(planes * kExpansion))) {
    if (stride != 1 || in != planes * kExpansion) {
      downsample_ = register_module("downsample", torch::nn::Sequential(Conv(in, planes * kExpansion, 1, stride),
                                                                        torch::nn::BatchNorm2d(planes * kExpansion)));
    }
  }

  at::Tensor forward(const at::Tensor& x) {
    at::Tensor y = bn1_->forward(conv1_->forward(x)).relu_();
    y = bn2_->forward(conv2_->forward(y)).relu_();
    y = bn3_->forward(conv3_->forward(y));
    y += downsample_ ? downsample_->forward(x) : x;
    return y.relu_();
  }

 private:
  torch::nn::Conv2d conv1_;
  torch::nn::BatchNorm2d bn1_;
  torch::nn::Conv2d conv2_;
  torch::nn::BatchNorm2d bn2_;
  torch::nn::Conv2d conv3_;
  torch::nn::BatchNorm2d bn3_;
  torch::nn::Sequential downsample_{nullptr};
};
TORCH_MODULE(Bottleneck);

class ResNet50 final : public Model {
 public:
  explicit ResNet50(const ModelSpec& spec)
      : image_size_(spec.image_size),
        conv1_(register_module("conv1",
                               torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 64, 7).stride(2).padding(3).bias(false)))),
        bn1_(register_module("bn1", torch::nn::BatchNorm2d(64))) {
    constexpr int64_t kBlocks[] = {3, 4, 6, 3};
    int64_t in = 64;
    for (int stage = 0; stage < 4; ++stage) {
      auto list = register_module("layer" + std::to_string(stage + 1), torch::nn::ModuleList());
      const int64_t planes = int64_t{64} << stage;
      for (int64_t b = 0; b < kBlocks[stage]; ++b) {
        Bottleneck block(in, planes, stage > 0 && b == 0 ? 2 : 1);
        list->push_back(block);
        blocks_.push_back(block);
        in = planes * BottleneckImpl::kExpansion;
      }
    }
    fc_ = register_module("fc", torch::nn::Linear(in, spec.num_classes));
    InitWeights();
    // The modules FSDP sees the stem and the head use (they are the root's).
    stem_group_ = std::make_shared<torch::nn::Module>();
    stem_group_->register_module("conv1", conv1_);
    stem_group_->register_module("bn1", bn1_);
    head_group_ = std::make_shared<torch::nn::Module>();
    head_group_->register_module("fc", fc_);
  }

  std::vector<Layer> layers() override {
    std::vector<Layer> out;
    auto conv = conv1_;
    auto bn = bn1_;
    const int64_t side = image_size_;
    out.push_back({"Stem", stem_group_, [conv, bn, side](const at::Tensor& x) mutable {
                     at::Tensor y = bn->forward(conv->forward(x.reshape({x.size(0), 3, side, side}))).relu_();
                     return torch::max_pool2d(y, {3, 3}, {2, 2}, {1, 1});
                   }});
    for (auto& block : blocks_) {
      Bottleneck b = block;
      out.push_back({"Bottleneck", b.ptr(), [b](const at::Tensor& x) mutable { return b->forward(x); }});
    }
    auto fc = fc_;
    out.push_back({"Head", head_group_, [fc](const at::Tensor& x) mutable {
                     return fc->forward(torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1));
                   }});
    return out;
  }

  std::vector<int64_t> sample_shape() const override { return {3, image_size_, image_size_}; }

 private:
  // torchvision's ResNet.__init__: He-normal convolutions (fan_out, ReLU
  // gain), BatchNorm weight 1 and bias 0, fc as nn.Linear's default.
  void InitWeights() {
    torch::NoGradGuard no_grad;
    for (auto& m : modules(/*include_self=*/false)) {
      if (auto* conv = m->as<torch::nn::Conv2d>()) {
        torch::nn::init::kaiming_normal_(conv->weight, 0.0, torch::kFanOut, torch::kReLU);
      } else if (auto* bn = m->as<torch::nn::BatchNorm2d>()) {
        bn->weight.fill_(1);
        bn->bias.zero_();
      }
    }
  }

  int64_t image_size_;
  torch::nn::Conv2d conv1_;
  torch::nn::BatchNorm2d bn1_;
  std::vector<Bottleneck> blocks_;
  torch::nn::Linear fc_{nullptr};
  std::shared_ptr<torch::nn::Module> stem_group_, head_group_;
};

}  // namespace

std::shared_ptr<Model> MakeResNet50(const ModelSpec& spec) { return std::make_shared<ResNet50>(spec); }

}  // namespace trainyard
