// The layer types each built-in model is made of and the layer FSDP wraps:
// lookups in the model kinds' traits (common/spec/model_traits.h).
#ifndef TRAINYARD_COMMON_MODEL_LAYERS_H_
#define TRAINYARD_COMMON_MODEL_LAYERS_H_

#include <optional>
#include <string>
#include <vector>

#include "common/spec/model_traits.h"
#include "common/spec/spec_enums.h"

namespace trainyard {

// The distinct layer types of `kind`, in the order they first appear.
inline std::vector<std::string> ModelLayerTypes(ModelKind kind) { return TraitsOf(kind).layer_types; }

// The layer FSDP's TRANSFORMER_BASED_WRAP wraps when a spec names none.
inline std::optional<std::string> ModelWrapLayer(ModelKind kind) { return TraitsOf(kind).wrap_layer; }

// The same by the spec's spelling of the kind ("gpt", "resnet", ...).
inline std::optional<std::string> ModelWrapLayer(const std::string& kind) {
  const std::optional<ModelKind> k = ValueOf(kModelKindNames, kind);
  return k ? ModelWrapLayer(*k) : std::nullopt;
}

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_MODEL_LAYERS_H_
