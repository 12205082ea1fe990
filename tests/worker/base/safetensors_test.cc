// safetensors writer/reader: round trips, the Hugging Face sharded layout,
// and an independent Python reader of the files (tests/fixtures/safetensors_check.py).
#include "worker/base/safetensors.h"
#include "common/job_spec.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/test_paths.h"
#include "tests/test_util.h"

namespace trainyard {
namespace {

// arange(numel) in each dtype: exact in bf16 for the sizes used here (< 256).
std::vector<TensorSpec> Specs() {
  return {{"embed.weight", at::kFloat, {10, 12}},
          {"layer.0.bias", at::kFloat, {7}},
          {"layer.0.weight", at::kBFloat16, {4, 8}},
          {"step", at::kLong, {1}},
          {"mask", at::kByte, {3, 3}},
          {"scalar", at::kDouble, {}}};
}

at::Tensor Make(const TensorSpec& s) {
  int64_t n = 1;
  for (int64_t d : s.shape) n *= d;
  return torch::arange(n, torch::kDouble).to(s.dtype).reshape(s.shape);
}

int RunChecker(const std::string& dir) {
  const std::string cmd = std::string(TRAINYARD_TEST_PYTHON) + " " + std::string(TRAINYARD_SOURCE_DIR) +
                          "/tests/fixtures/safetensors_check.py " + dir;
  return std::system(cmd.c_str());
}

TEST(SafetensorsTest, RoundTripsEveryDtype) {
  TempDir dir;
  const std::string path = dir.path() + "/model.safetensors";
  auto specs = Specs();
  WriteSafetensors(path, specs, [&](size_t i) { return Make(specs[i]); }, {{"format", "pt"}});
  SafetensorsHeader h = ReadSafetensorsHeader(path);
  ASSERT_EQ(h.tensors.size(), specs.size());
  EXPECT_EQ(h.metadata.at("format"), "pt");
  EXPECT_EQ(h.data_start % 8, 0);
  for (const auto& s : specs) {
    at::Tensor t = ReadSafetensor(path, h, s.name);
    EXPECT_EQ(t.scalar_type(), s.dtype) << s.name;
    EXPECT_TRUE(torch::equal(t, Make(s))) << s.name;
  }
  EXPECT_THROW(ReadSafetensor(path, h, "missing"), std::out_of_range);
  EXPECT_EQ(RunChecker(dir.path()), 0);
}

TEST(SafetensorsTest, ShardsFollowTheHuggingFaceLayout) {
  TempDir dir;
  auto specs = Specs();
  // 480 + 28 + 64 + 8 + 9 + 8 bytes with a 500-byte limit: the first tensor
  // alone, then the rest.
  auto files = WriteShardedSafetensors(
      dir.path(), specs, [&](size_t i) { return Make(specs[i]); }, 500);
  ASSERT_EQ(files.size(), 3u);
  EXPECT_EQ(files[0], "model-00001-of-00002.safetensors");
  EXPECT_EQ(files[1], "model-00002-of-00002.safetensors");
  EXPECT_EQ(files[2], "model.safetensors.index.json");
  std::ifstream in(dir.path() + "/model.safetensors.index.json");
  auto index = nlohmann::json::parse(in);
  EXPECT_EQ(index["metadata"]["total_size"].get<int64_t>(), 480 + 28 + 64 + 8 + 9 + 8);
  EXPECT_EQ(index["weight_map"]["embed.weight"], "model-00001-of-00002.safetensors");
  EXPECT_EQ(index["weight_map"]["scalar"], "model-00002-of-00002.safetensors");
  EXPECT_EQ(RunChecker(dir.path()), 0);

  TempDir single;
  files = WriteShardedSafetensors(
      single.path(), specs, [&](size_t i) { return Make(specs[i]); }, int64_t{1} << 30);
  EXPECT_EQ(files, (std::vector<std::string>{"model.safetensors"}));
  EXPECT_EQ(RunChecker(single.path()), 0);
}

TEST(SafetensorsTest, RejectsCorruptFilesAndMismatchedTensors) {
  TempDir dir;
  const std::string path = dir.path() + "/bad.safetensors";
  std::ofstream(path) << "not a safetensors file at all";
  EXPECT_THROW(ReadSafetensorsHeader(path), std::runtime_error);
  std::vector<TensorSpec> specs = {{"w", at::kFloat, {2, 2}}};
  EXPECT_THROW(WriteSafetensors(path, specs, [](size_t) { return torch::zeros({3}); }), std::invalid_argument);
}

TEST(SafetensorsTest, ParsesSizesAsAccelerateDoes) {
  EXPECT_EQ(ParseSize("1GB"), 1000000000);
  EXPECT_EQ(ParseSize("500MB"), 500000000);
  EXPECT_EQ(ParseSize("10KiB"), 10240);
  EXPECT_EQ(ParseSize("2GiB"), int64_t{2} << 30);
  EXPECT_EQ(ParseSize("123"), 123);
  EXPECT_THROW(ParseSize("lots"), std::invalid_argument);
  EXPECT_THROW(ParseSize("5XB"), std::invalid_argument);
  EXPECT_THROW(ParseSize("0"), std::invalid_argument);
  EXPECT_THROW(ParseSize("99999999999TB"), std::invalid_argument);
}

}  // namespace
}  // namespace trainyard
