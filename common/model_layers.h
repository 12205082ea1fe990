// The layer types each built-in model is made of: the names a spec may give
// in fsdp_transformer_layer_cls_to_wrap. The worker's models (worker/models.cc)
// name their layers with these; a worker test builds each model and checks
// that its layers' types are exactly this table's row.
#ifndef TRAINYARD_COMMON_MODEL_LAYERS_H_
#define TRAINYARD_COMMON_MODEL_LAYERS_H_

#include <optional>
#include <string>
#include <vector>

#include "common/spec_enums.h"

namespace trainyard {

// The distinct layer types of `kind`, in the order they first appear.
inline std::vector<std::string> ModelLayerTypes(ModelKind kind) {
  switch (kind) {
    case ModelKind::kMlp: return {"Linear"};
    case ModelKind::kCnn: return {"Conv2d", "Linear"};
    case ModelKind::kGpt: return {"Embedding", "Block", "Head"};
    case ModelKind::kResNet: return {"Stem", "BasicBlock", "Linear"};
    case ModelKind::kTorchScript: return {"TorchScript"};
    case ModelKind::kLlama: return {"Embedding", "LlamaDecoderLayer", "Head"};
  }
  return {};
}

// The layer FSDP's TRANSFORMER_BASED_WRAP wraps when a spec names none (as
// Accelerate takes a model's transformer layer from the model): the
// repeated block of the gpt, llama and resnet models; none for the others.
inline std::optional<std::string> ModelWrapLayer(ModelKind kind) {
  switch (kind) {
    case ModelKind::kGpt: return "Block";
    case ModelKind::kResNet: return "BasicBlock";
    case ModelKind::kLlama: return "LlamaDecoderLayer";
    default: return std::nullopt;
  }
}

// The same by the spec's spelling of the kind ("gpt", "resnet", ...).
inline std::optional<std::string> ModelWrapLayer(const std::string& kind) {
  const std::optional<ModelKind> k = ValueOf(kModelKindNames, kind);
  return k ? ModelWrapLayer(*k) : std::nullopt;
}

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_MODEL_LAYERS_H_
