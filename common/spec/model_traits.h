// ModelTraits: what the spec checks, the worker's data and its FSDP wrap
// policy need to know of a model kind, one row per kind (model_traits.cc).
// The submit check (job_spec.cc), the worker's data check (worker/
// job_data.cc), the FSDP wrap layer (the spec's default
// fsdp_transformer_layer_cls_to_wrap, worker/trainer.cc's activation
// checkpointing) and the Accelerate config reader read these rows instead of
// switching on the kind. A new model kind is its model file pair plus one
// row. No LibTorch.
#ifndef TRAINYARD_COMMON_SPEC_MODEL_TRAITS_H_
#define TRAINYARD_COMMON_SPEC_MODEL_TRAITS_H_

#include <optional>
#include <string>
#include <vector>

#include "common/spec/spec_enums.h"

namespace trainyard {

// What a model's forward takes.
enum class ModelInput {
  kFlat,    // a vector of input_size values (mlp, torchscript)
  kImage,   // C x H x W images (cnn: 1x28x28, resnet and resnet50: 3 x image_size^2)
  kTokens,  // token ids, context per sample (gpt, llama)
};

struct ModelTraits {
  ModelKind kind;
  ModelInput input;
  // The data kinds that feed it (synthetic feeds every model).
  std::vector<DataKind> data_kinds;
  // Its distinct layer types, in the order they first appear: the names a
  // spec may give in fsdp_transformer_layer_cls_to_wrap. The worker's models
  // name their layers with these (a worker test checks each model's).
  std::vector<std::string> layer_types;
  // The layer FSDP's TRANSFORMER_BASED_WRAP wraps when a spec names none
  // (its repeated block, as Accelerate takes a model's transformer layer).
  std::optional<std::string> wrap_layer;
  // Whether activation checkpointing may recompute wrap_layer (a transformer
  // layer; resnet's BasicBlock and resnet50's Bottleneck would update their
  // BatchNorm statistics twice).
  bool recomputes_wrap_layer = false;
  // A built-in classifier (logits over num_classes): mse loss is refused.
  bool classifier = true;

  bool Takes(DataKind d) const;
};

// The row of `kind`.
const ModelTraits& TraitsOf(ModelKind kind);

// Every row, in ModelKind order.
const std::vector<ModelTraits>& AllModelTraits();

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_SPEC_MODEL_TRAITS_H_
