#include "worker/models/resnet.h"

#include <torch/torch.h>

namespace trainyard {
namespace {

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

}  // namespace

std::shared_ptr<Model> MakeResNet(const ModelSpec& spec) { return std::make_shared<ResNet>(spec); }

}  // namespace trainyard
