#include "common/spec/model_traits.h"

#include <algorithm>

namespace trainyard {

bool ModelTraits::Takes(DataKind d) const {
  return d == DataKind::kSynthetic || std::find(data_kinds.begin(), data_kinds.end(), d) != data_kinds.end();
}

const std::vector<ModelTraits>& AllModelTraits() {
  using D = DataKind;
  static const std::vector<ModelTraits> rows = {
      {ModelKind::kMlp, ModelInput::kFlat, {D::kMnist, D::kTensors}, {"Linear"}, std::nullopt},
      {ModelKind::kCnn,
       ModelInput::kImage,
       {D::kMnist, D::kTensors, D::kImageFolder},
       {"Conv2d", "Linear"},
       std::nullopt},
      {ModelKind::kGpt, ModelInput::kTokens, {D::kTokens}, {"Embedding", "Block", "Head"}, "Block", true},
      {ModelKind::kResNet,
       ModelInput::kImage,
       {D::kTensors, D::kImageFolder},
       {"Stem", "BasicBlock", "Linear"},
       "BasicBlock"},
      {ModelKind::kTorchScript,
       ModelInput::kFlat,
       {D::kMnist, D::kTensors},
       {"TorchScript"},
       std::nullopt,
       false,
       /*classifier=*/false},
      {ModelKind::kLlama,
       ModelInput::kTokens,
       {D::kTokens},
       {"Embedding", "LlamaDecoderLayer", "Head"},
       "LlamaDecoderLayer",
       true},
      {ModelKind::kResNet50,
       ModelInput::kImage,
       {D::kTensors, D::kImageFolder},
       {"Stem", "Bottleneck", "Head"},
       "Bottleneck"},
  };
  return rows;
}

const ModelTraits& TraitsOf(ModelKind kind) {
  for (const ModelTraits& t : AllModelTraits()) {
    if (t.kind == kind) return t;
  }
  return AllModelTraits().front();  // unreachable: every kind has a row (model_traits_test)
}

}  // namespace trainyard
