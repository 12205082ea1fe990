// Llama-family config.json reading. The configs are the published ones of
// Llama 3.1 8B, Mistral 7B v0.1 and Qwen2 0.5B; their parameter counts are
// the published model sizes.
#include "common/llama_config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <numbers>
#include <string>

namespace trainyard {
namespace {

constexpr const char* kLlama31_8B = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "hidden_act": "silu",
  "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
  "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "transformers_version": "4.43.0.dev0", "use_cache": true, "vocab_size": 128256})";

constexpr const char* kMistral7B = R"({
  "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
  "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 32768,
  "model_type": "mistral", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16", "transformers_version": "4.34.0.dev0", "use_cache": true, "vocab_size": 32000})";

constexpr const char* kQwen2_05B = R"({
  "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
  "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02,
  "intermediate_size": 4864, "max_position_embeddings": 131072, "max_window_layers": 24, "model_type": "qwen2",
  "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0, "sliding_window": 131072, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
  "transformers_version": "4.40.1", "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})";

TEST(LlamaConfigTest, Llama31EightB) {
  auto c = ParseLlamaConfig(kLlama31_8B, "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_EQ(c->num_key_value_heads, 8);
  EXPECT_EQ(c->rope_type, "llama3");
  EXPECT_EQ(c->rope_original_max_position_embeddings, 8192);
  EXPECT_DOUBLE_EQ(c->rope_theta, 500000.0);
  EXPECT_DOUBLE_EQ(c->rms_norm_eps, 1e-5);
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_FALSE(c->qkv_bias);
  EXPECT_EQ(c->sliding_window, 0);
  EXPECT_EQ(c->NumParameters(), 8'030'261'248);  // Meta's Llama 3.1 8B
}

TEST(LlamaConfigTest, Mistral7BHasASlidingWindow) {
  auto c = ParseLlamaConfig(kMistral7B, "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->sliding_window, 4096);
  EXPECT_EQ(c->rope_type, "default");
  EXPECT_EQ(c->NumParameters(), 7'241'732'096);  // Mistral 7B v0.1
  EXPECT_TRUE(CheckLlamaContext(*c, 4096).ok());
  auto too_long = CheckLlamaContext(*c, 4097);
  ASSERT_FALSE(too_long.ok());
  EXPECT_NE(too_long.message().find("sliding_window"), std::string::npos) << too_long;
  auto past_positions = CheckLlamaContext(*c, 40000);
  EXPECT_FALSE(past_positions.ok());
}

TEST(LlamaConfigTest, Qwen2HasQkvBiasAndTiedEmbeddings) {
  auto c = ParseLlamaConfig(kQwen2_05B, "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->qkv_bias);
  EXPECT_FALSE(c->o_proj_bias);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_EQ(c->sliding_window, 0) << "use_sliding_window: false";
  EXPECT_EQ(c->NumParameters(), 494'032'768);  // Qwen2-0.5B
  auto past = CheckLlamaContext(*c, 131073);
  ASSERT_FALSE(past.ok());
  EXPECT_NE(past.message().find("max_position_embeddings"), std::string::npos) << past;
}

TEST(LlamaConfigTest, TransformersFiveRopeParameters) {
  auto c = ParseLlamaConfig(R"({"model_type": "llama", "vocab_size": 256, "hidden_size": 64,
      "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
      "max_position_embeddings": 512, "dtype": "float32", "layer_types": ["full_attention", "full_attention"],
      "rope_parameters": {"rope_type": "llama3", "rope_theta": 50000.0, "factor": 8.0, "low_freq_factor": 1.0,
                          "high_freq_factor": 4.0, "original_max_position_embeddings": 128}})",
                            "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_DOUBLE_EQ(c->rope_theta, 50000.0);
  EXPECT_EQ(c->rope_type, "llama3");
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->sliding_window, 0);
}

TEST(LlamaConfigTest, Llama3RopeKeepsHighDividesLowAndBlendsBetween) {
  auto c = ParseLlamaConfig(kLlama31_8B, "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  const auto scaled = LlamaRopeInverseFrequencies(*c);
  LlamaConfig plain = *c;
  plain.rope_type = "default";
  const auto base = LlamaRopeInverseFrequencies(plain);
  ASSERT_EQ(scaled.size(), 64u);
  ASSERT_EQ(base.size(), 64u);
  EXPECT_DOUBLE_EQ(base[1], 1.0 / std::pow(500000.0, 2.0 / 128.0));
  int kept = 0, divided = 0, blended = 0;
  for (size_t i = 0; i < base.size(); ++i) {
    const double wavelen = 2 * std::numbers::pi / base[i];
    if (wavelen < 8192.0 / 4) {
      EXPECT_DOUBLE_EQ(scaled[i], base[i]) << i;
      ++kept;
    } else if (wavelen > 8192.0) {
      EXPECT_DOUBLE_EQ(scaled[i], base[i] / 8) << i;
      ++divided;
    } else {
      EXPECT_GT(scaled[i], base[i] / 8) << i;
      EXPECT_LT(scaled[i], base[i]) << i;
      ++blended;
    }
    if (i > 0) EXPECT_LT(scaled[i], scaled[i - 1]) << "frequencies fall with the index, " << i;
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(blended, 0);
}

struct Refusal {
  const char* json;
  const char* names;
};

class LlamaConfigRefuses : public testing::TestWithParam<Refusal> {};

TEST_P(LlamaConfigRefuses, NamingWhatIsWrong) {
  auto c = ParseLlamaConfig(GetParam().json, "/m/config.json");
  ASSERT_FALSE(c.ok()) << GetParam().json;
  EXPECT_NE(c.status().message().find(GetParam().names), std::string::npos) << c.status();
  EXPECT_NE(c.status().message().find("/m/config.json"), std::string::npos) << c.status();
}

#define SIZES R"("vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, )"
INSTANTIATE_TEST_SUITE_P(
    Configs, LlamaConfigRefuses,
    testing::Values(
        Refusal{R"({"model_type": "bert", "hidden_size": 768})", "bert"},
        Refusal{"{\"model_type\": \"llama\", " SIZES "\"num_attention_heads\": 4, \"architectures\": [\"LlamaModel\"]}",
                "LlamaModel"},
        Refusal{"{\"model_type\": \"llama\", " SIZES "\"num_attention_heads\": 4, \"num_key_value_heads\": 3}",
                "num_key_value_heads"},
        Refusal{"{\"model_type\": \"llama\", " SIZES "\"num_attention_heads\": 5}", "num_attention_heads"},
        Refusal{"{\"model_type\": \"llama\", \"vocab_size\": 256, \"hidden_size\": 64, \"num_hidden_layers\": 2, "
                "\"num_attention_heads\": 4}",
                "intermediate_size"},
        Refusal{"{\"model_type\": \"llama\", " SIZES "\"num_attention_heads\": 4, \"hidden_act\": \"gelu\"}", "gelu"},
        Refusal{"{\"model_type\": \"llama\", " SIZES
                "\"num_attention_heads\": 4, \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0}}",
                "yarn"},
        Refusal{"{\"model_type\": \"llama\", " SIZES
                "\"num_attention_heads\": 4, \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0}}",
                "low_freq_factor"},
        Refusal{"{\"model_type\": \"llama\", " SIZES "\"num_attention_heads\": 4, \"attention_dropout\": 0.1}",
                "attention_dropout"},
        Refusal{"{\"model_type\": \"llama\", " SIZES "\"num_attention_heads\": 4, \"quantization_config\": {}}",
                "quantization_config"},
        Refusal{"{\"model_type\": \"llama\", " SIZES "\"num_attention_heads\": 4, \"layer_types\": [\"chunked\"]}",
                "chunked"},
        Refusal{"{\"model_type\": \"llama\", " SIZES "\"num_attention_heads\": 4, \"head_dim\": 15}", "head_dim"},
        Refusal{"{\"model_type\": \"llama\", " SIZES "\"num_attention_heads\": 4, \"hidden_size\": 64.5}",
                "hidden_size"},
        Refusal{"{\"model_type\": \"mistral\", " SIZES "\"num_attention_heads\": 4, \"attention_bias\": true}",
                "attention_bias"},
        Refusal{"[1, 2]", "not a JSON object"}, Refusal{"{\"model_type\": ", "not JSON"}));
#undef SIZES

TEST(LlamaConfigTest, ReadsADirectorysConfigJson) {
  const auto dir = std::filesystem::path(testing::TempDir()) / "llama-config-test";
  std::filesystem::create_directories(dir);
  { std::ofstream(dir / "config.json") << kQwen2_05B; }
  auto c = ReadLlamaConfig(dir.string());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model_type, "qwen2");
  auto missing = ReadLlamaConfig((dir / "nope").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("nope"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace trainyard
