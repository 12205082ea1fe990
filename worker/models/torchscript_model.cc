#include "worker/models/torchscript_model.h"

#include <torch/torch.h>

#include <torch/script.h>

namespace trainyard {
namespace {

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

std::shared_ptr<Model> MakeTorchScriptModel(const ModelSpec& spec) { return std::make_shared<TorchScriptModel>(spec); }

}  // namespace trainyard
