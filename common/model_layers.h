// The layer types each built-in model is made of: the names a spec may give
// in fsdp_transformer_layer_cls_to_wrap. The worker's models (worker/models.cc)
// name their layers with these; a worker test builds each model and checks
// that its layers' types are exactly this table's row.
#ifndef TRAINYARD_COMMON_MODEL_LAYERS_H_
#define TRAINYARD_COMMON_MODEL_LAYERS_H_

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
  }
  return {};
}

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_MODEL_LAYERS_H_
