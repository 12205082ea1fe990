#include "common/spec/model_traits.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "common/spec/job_spec.h"

namespace trainyard {
namespace {

TEST(ModelTraitsTest, OneRowPerKindInOrder) {
  ASSERT_EQ(AllModelTraits().size(), std::size(kModelKindNames));
  for (const auto& [name, kind] : kModelKindNames) {
    const ModelTraits& t = TraitsOf(kind);
    EXPECT_EQ(t.kind, kind) << name;
    EXPECT_FALSE(t.layer_types.empty()) << name;
    if (t.wrap_layer) {
      const auto& types = t.layer_types;
      EXPECT_NE(std::find(types.begin(), types.end(), *t.wrap_layer), types.end()) << name;
    }
    EXPECT_TRUE(t.Takes(DataKind::kSynthetic)) << name;
  }
}

// The submit check refuses exactly the data kinds a model's row leaves out.
TEST(ModelTraitsTest, TheSubmitCheckFollowsTheRows) {
  const char* models[] = {
      "mlp", "cnn", "gpt", "resnet", "resnet50", "torchscript:m.pt", "{kind: llama, config: c.json}"};
  const char* data[] = {"synthetic", "mnist:d", "tokens:t.bin", "tensors:t.st", "image_folder:d"};
  for (const char* m : models) {
    for (const char* d : data) {
      const std::string text = std::string("model: ") + m + "\ndata: {kind: " + d + "}\n";
      auto spec = ParseJobSpec(text);
      auto probe = ParseJobSpec(std::string("model: ") + m + "\n");
      ASSERT_TRUE(probe.ok()) << probe.status();
      const std::string kind = std::string(d).substr(0, std::string(d).find(':'));
      const bool takes = TraitsOf(probe->model.kind).Takes(*ValueOf(kDataKindNames, kind));
      EXPECT_EQ(spec.ok(), takes) << text << (spec.ok() ? "" : spec.status().message());
    }
  }
}

}  // namespace
}  // namespace trainyard
