#include "worker/models/models.h"

#include <torch/torch.h>

#include <mutex>
#include <stdexcept>

#include "worker/models/cnn.h"
#include "worker/models/gpt.h"
#include "worker/models/llama.h"
#include "worker/models/mlp.h"
#include "worker/models/resnet.h"
#include "worker/models/resnet50.h"
#include "worker/models/torchscript_model.h"

namespace trainyard {
namespace {

// The constructor of each model kind: a new kind is its own file pair and
// one row here.
struct ModelFactory {
  ModelKind kind;
  std::shared_ptr<Model> (*make)(const ModelSpec& spec);
};
constexpr ModelFactory kModelFactories[] = {
    {ModelKind::kMlp, &MakeMlp},           {ModelKind::kCnn, &MakeCnn},
    {ModelKind::kGpt, &MakeGpt},           {ModelKind::kResNet, &MakeResNet},
    {ModelKind::kLlama, &MakeLlama},       {ModelKind::kTorchScript, &MakeTorchScriptModel},
    {ModelKind::kResNet50, &MakeResNet50},
};

}  // namespace

std::shared_ptr<Model> BuildModel(const ModelSpec& spec, uint64_t seed) {
  // Module constructors draw from the default generator: seed it, build, and
  // so get the same weights on every rank. The lock keeps ranks that run as
  // threads of one process (tests, benchmarks) from interleaving their draws.
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  torch::manual_seed(seed);
  for (const ModelFactory& factory : kModelFactories) {
    if (factory.kind == spec.kind) return factory.make(spec);
  }
  throw std::invalid_argument("unknown model kind");
}

}  // namespace trainyard
