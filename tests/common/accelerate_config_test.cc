#include "common/accelerate_config.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/test_paths.h"

namespace trainyard {
namespace {

// The default_config.yaml that `accelerate config` wrote for FSDP, verbatim
// (Hugging Face transformers' FSDP guide), as examples/ ships it.
const std::string& SeedConfig() {
  static const std::string text = [] {
    std::ifstream in(std::filesystem::path(TRAINYARD_SOURCE_DIR) / "examples" / "accelerate_fsdp_config.yaml");
    std::stringstream ss;
    ss << in.rdbuf();
    if (ss.str().find("distributed_type: FSDP") == std::string::npos) {
      throw std::runtime_error("examples/accelerate_fsdp_config.yaml is missing or not the FSDP config");
    }
    return ss.str();
  }();
  return text;
}

constexpr char kGptSpec[] = R"(name: accel
model: {kind: gpt, layers: 2, width: 32, heads: 4, context: 16, vocab: 64}
data: {kind: synthetic, batch_size: 2, num_samples: 200}
max_steps: 20
)";

// `config` nested under the spec's accelerate_config key.
std::string Embedded(const std::string& spec, const std::string& config) {
  std::stringstream in(config);
  std::string out = spec + "accelerate_config:\n";
  for (std::string line; std::getline(in, line);) out += "  " + line + "\n";
  return out;
}

bool AnyContains(const std::vector<std::string>& lines, const std::string& needle) {
  for (const std::string& l : lines) {
    if (l.find(needle) != std::string::npos) return true;
  }
  return false;
}

TEST(AccelerateConfigTest, TheSeedConfigAppliesToAGptSpec) {
  std::vector<std::string> warnings;
  auto spec = ParseJobSpecWithAccelerateConfig(kGptSpec, SeedConfig(), {}, &warnings);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name, "accel");
  EXPECT_EQ(spec->max_steps, 20);
  EXPECT_EQ(spec->distributed_type, DistributedType::kFsdp);
  EXPECT_EQ(spec->num_processes, 2);
  EXPECT_EQ(spec->mixed_precision, MixedPrecision::kBf16);
  EXPECT_EQ(spec->device, Device::kCpu);  // use_cpu: false leaves the spec's device
  EXPECT_EQ(spec->gradient_accumulation_steps, 1);
  const FsdpSpec& f = spec->fsdp;
  EXPECT_EQ(f.sharding_strategy, ShardingStrategy::kFullShard);
  EXPECT_EQ(f.auto_wrap_policy, WrapPolicy::kTransformerBased);
  EXPECT_EQ(f.transformer_layer_cls_to_wrap, (std::vector<std::string>{"Block"}));
  EXPECT_EQ(f.backward_prefetch, BackwardPrefetch::kBackwardPre);
  EXPECT_TRUE(f.cpu_ram_efficient_loading);
  EXPECT_FALSE(f.forward_prefetch);
  EXPECT_TRUE(f.offload_params);
  EXPECT_EQ(f.state_dict_type, StateDictType::kShardedStateDict);
  EXPECT_TRUE(f.sync_module_states);
  EXPECT_TRUE(f.use_orig_params);

  const std::string all = absl::StrJoin(warnings, "\n");
  for (const char* key : {"compute_environment", "debug", "downcast_bf16", "main_training_function", "rdzv_backend",
                          "same_network", "tpu_env", "tpu_use_cluster", "tpu_use_sudo"}) {
    EXPECT_TRUE(AnyContains(warnings, absl::StrCat("accelerate_config.", key, " is ignored: "))) << key << "\n" << all;
  }
  EXPECT_TRUE(AnyContains(warnings, "BertLayer → the gpt model's Block")) << all;
  // machine_rank 0, num_machines 1 and use_cpu false change nothing and say nothing.
  EXPECT_EQ(warnings.size(), 10u) << all;
}

TEST(AccelerateConfigTest, AnEmbeddedConfigGivesTheSameSpec) {
  std::vector<std::string> separate_warnings, embedded_warnings;
  auto separate = ParseJobSpecWithAccelerateConfig(kGptSpec, SeedConfig(), {}, &separate_warnings);
  auto embedded = ParseJobSpecWithAccelerateConfig(Embedded(kGptSpec, SeedConfig()), "", {}, &embedded_warnings);
  ASSERT_TRUE(separate.ok()) << separate.status();
  ASSERT_TRUE(embedded.ok()) << embedded.status();
  EXPECT_EQ(JobSpecToJson(*embedded), JobSpecToJson(*separate));
  EXPECT_EQ(embedded_warnings, separate_warnings);
  // The canonical JSON parses back to itself (what the workers receive).
  auto again = ParseJobSpec(JobSpecToJson(*embedded));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(JobSpecToJson(*again), JobSpecToJson(*embedded));
}

TEST(AccelerateConfigTest, AJsonSpecTakesAConfigToo) {
  const std::string json = R"({"name": "j", "model": {"kind": "gpt", "layers": 2, "width": 32, "heads": 4,
    "context": 16, "vocab": 64}, "accelerate_config": {"distributed_type": "FSDP", "num_processes": 2,
    "fsdp_config": {"fsdp_sharding_strategy": "SHARD_GRAD_OP"}}})";
  auto spec = ParseJobSpecWithAccelerateConfig(json, "", {}, nullptr);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->distributed_type, DistributedType::kFsdp);
  EXPECT_EQ(spec->fsdp.sharding_strategy, ShardingStrategy::kShardGradOp);
}

TEST(AccelerateConfigTest, MultiCpuMapsToDdpOnCpu) {
  std::vector<std::string> warnings;
  auto spec = ParseJobSpecWithAccelerateConfig(
      "name: m\ndevice: cuda\n",
      "distributed_type: MULTI_CPU\nnum_processes: 2\ngradient_accumulation_steps: 4\nuse_cpu: true\n", {}, &warnings);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->distributed_type, DistributedType::kDdp);
  EXPECT_EQ(spec->num_processes, 2);
  EXPECT_EQ(spec->gradient_accumulation_steps, 4);
  EXPECT_EQ(spec->device, Device::kCpu);
  EXPECT_EQ(warnings,
            (std::vector<std::string>{"accelerate_config.use_cpu (true) overrides the spec's device (cuda)"}));
}

TEST(AccelerateConfigTest, MachinesAreSlurmNodes) {
  std::vector<std::string> warnings;
  auto spec = ParseJobSpecWithAccelerateConfig(
      "name: m\nlauncher: slurm\n", "distributed_type: MULTI_CPU\nnum_processes: 8\nnum_machines: 2\n", {}, &warnings);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->num_processes, 8);  // Accelerate's num_processes is the whole world
  EXPECT_EQ(spec->slurm.nodes, 2);
  EXPECT_TRUE(warnings.empty());
}

// MULTI_GPU asks for GPUs: the job is a CUDA job (a server without GPUs
// refuses it at submit), unless the config says use_cpu.
TEST(AccelerateConfigTest, MultiGpuMeansCudaUnlessUseCpu) {
  std::vector<std::string> warnings;
  auto spec =
      ParseJobSpecWithAccelerateConfig("name: g\n", "distributed_type: MULTI_GPU\nnum_processes: 2\n", {}, &warnings);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->distributed_type, DistributedType::kDdp);
  EXPECT_EQ(spec->device, Device::kCuda);
  EXPECT_TRUE(warnings.empty()) << absl::StrJoin(warnings, "\n");

  warnings.clear();
  spec = ParseJobSpecWithAccelerateConfig("name: g\n", "distributed_type: MULTI_GPU\nnum_processes: 2\nuse_cpu: true\n",
                                          {}, &warnings);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->device, Device::kCpu);
  EXPECT_EQ(
      warnings,
      (std::vector<std::string>{"accelerate_config.distributed_type MULTI_GPU runs as DDP on the spec's device cpu"}));
}

// FSDP2 (fsdp_version 2): reshard_after_forward is FULL_SHARD or
// SHARD_GRAD_OP; offload, state dict type and wrapping mean what they mean
// under FSDP1; FSDP1-only options are dropped with a warning each.
TEST(AccelerateConfigTest, Fsdp2OptionsMapOntoTheSharding) {
  for (const auto& [reshard, strategy] :
       {std::pair{"true", ShardingStrategy::kFullShard}, std::pair{"false", ShardingStrategy::kShardGradOp}}) {
    std::vector<std::string> warnings;
    auto spec = ParseJobSpecWithAccelerateConfig(
        kGptSpec,
        absl::StrCat("distributed_type: FSDP\nnum_processes: 2\nfsdp_config:\n  fsdp_version: 2\n"
                     "  fsdp_reshard_after_forward: ",
                     reshard,
                     "\n  fsdp_offload_params: true\n"
                     "  fsdp_state_dict_type: SHARDED_STATE_DICT\n  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n"
                     "  fsdp_cpu_ram_efficient_loading: true\n  fsdp_backward_prefetch: BACKWARD_POST\n"
                     "  fsdp_use_orig_params: true\n"),
        {}, &warnings);
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_EQ(spec->distributed_type, DistributedType::kFsdp);
    EXPECT_EQ(spec->fsdp.sharding_strategy, strategy) << reshard;
    EXPECT_TRUE(spec->fsdp.offload_params);
    EXPECT_EQ(spec->fsdp.state_dict_type, StateDictType::kShardedStateDict);
    EXPECT_TRUE(spec->fsdp.cpu_ram_efficient_loading);
    EXPECT_TRUE(spec->fsdp.sync_module_states);                               // FSDP2 loads on rank 0 and broadcasts
    EXPECT_EQ(spec->fsdp.backward_prefetch, BackwardPrefetch::kBackwardPre);  // dropped: FSDP1's only
    // Accelerate infers the layer class from the model: the gpt model's Block.
    EXPECT_EQ(spec->fsdp.transformer_layer_cls_to_wrap, std::vector<std::string>{"Block"});
    const std::string all = absl::StrJoin(warnings, "\n");
    EXPECT_TRUE(AnyContains(warnings, "accelerate_config.fsdp_config.fsdp_version 2")) << all;
    EXPECT_TRUE(AnyContains(warnings, "accelerate_config.fsdp_config.fsdp_backward_prefetch is ignored: FSDP2")) << all;
    EXPECT_TRUE(AnyContains(warnings, "accelerate_config.fsdp_config.fsdp_use_orig_params is ignored: FSDP2")) << all;
    EXPECT_TRUE(AnyContains(warnings, "fsdp_transformer_layer_cls_to_wrap is not given: the gpt model's layer Block"))
        << all;
  }
}

// Without a layer class, TRANSFORMER_BASED_WRAP wraps the model's repeated
// block (gpt: Block, resnet: BasicBlock); a model without one is refused
// with its layer types named.
TEST(AccelerateConfigTest, TheLayerClassIsInferredFromTheModel) {
  auto gpt = ParseJobSpec(std::string(kGptSpec) +
                          "distributed_type: FSDP\nfsdp_config: {fsdp_auto_wrap_policy: "
                          "TRANSFORMER_BASED_WRAP}\n");
  ASSERT_TRUE(gpt.ok()) << gpt.status();
  EXPECT_EQ(gpt->fsdp.transformer_layer_cls_to_wrap, std::vector<std::string>{"Block"});
  auto resnet = ParseJobSpec(
      "name: r\nmodel: {kind: resnet, channels: 8}\ndistributed_type: FSDP\n"
      "fsdp_config: {fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP}\n");
  ASSERT_TRUE(resnet.ok()) << resnet.status();
  EXPECT_EQ(resnet->fsdp.transformer_layer_cls_to_wrap, std::vector<std::string>{"BasicBlock"});
  auto mlp = ParseJobSpec(
      "name: m\ndistributed_type: FSDP\nfsdp_config: {fsdp_auto_wrap_policy: "
      "TRANSFORMER_BASED_WRAP}\n");
  ASSERT_FALSE(mlp.ok());
  EXPECT_NE(mlp.status().message().find("spec field 'fsdp_config.fsdp_transformer_layer_cls_to_wrap'"),
            std::string::npos)
      << mlp.status();
  EXPECT_NE(mlp.status().message().find("its layer types: Linear"), std::string::npos) << mlp.status();
}

TEST(AccelerateConfigTest, WithoutAConfigItIsParseJobSpec) {
  std::vector<std::string> warnings;
  auto spec = ParseJobSpecWithAccelerateConfig(kGptSpec, "", {}, &warnings);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(JobSpecToJson(*spec), JobSpecToJson(*ParseJobSpec(kGptSpec)));
  EXPECT_TRUE(warnings.empty()) << "no note (APlainSpecGetsNoNoteAboutAnAccelerateConfig)";
  auto bad = ParseJobSpecWithAccelerateConfig("max_steps: 0\n", "", {}, &warnings);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), ParseJobSpec("max_steps: 0\n").status().message());
}

TEST(AccelerateConfigTest, TheConfigWinsOverTheSpecWithAWarning) {
  const std::string spec_text = std::string(kGptSpec) +
                                "num_processes: 4\ndistributed_type: DDP\n"
                                "fsdp_config: {fsdp_min_num_params: 1000, fsdp_backward_prefetch: BACKWARD_POST,\n"
                                "              fsdp_offload_params: false, fsdp_state_dict_type: SHARDED_STATE_DICT}\n";
  std::vector<std::string> warnings;
  auto spec = ParseJobSpecWithAccelerateConfig(spec_text, SeedConfig(), {}, &warnings);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->num_processes, 2);
  EXPECT_EQ(spec->distributed_type, DistributedType::kFsdp);
  EXPECT_EQ(spec->fsdp.min_num_params, 1000);  // merged key by key: the spec's own key stays
  EXPECT_EQ(spec->fsdp.backward_prefetch, BackwardPrefetch::kBackwardPre);
  EXPECT_TRUE(spec->fsdp.offload_params);
  const std::string all = absl::StrJoin(warnings, "\n");
  for (const char* w : {"accelerate_config.num_processes (2) overrides the spec's num_processes (4)",
                        "accelerate_config.distributed_type (FSDP) overrides the spec's distributed_type (DDP)",
                        "accelerate_config.fsdp_config.fsdp_backward_prefetch_policy (BACKWARD_PRE) overrides the "
                        "spec's fsdp_config.fsdp_backward_prefetch (BACKWARD_POST)",
                        "accelerate_config.fsdp_config.fsdp_offload_params (true) overrides the spec's "
                        "fsdp_config.fsdp_offload_params (false)"}) {
    EXPECT_TRUE(AnyContains(warnings, w)) << w << "\n" << all;
  }
  // The same value under another spelling is no override.
  EXPECT_FALSE(AnyContains(warnings, "fsdp_state_dict_type")) << all;
  std::vector<std::string> quiet;
  ASSERT_TRUE(ParseJobSpecWithAccelerateConfig("name: q\ndistributed_type: DDP\nnum_processes: 2\n",
                                               "distributed_type: MULTI_CPU\nnum_processes: 2\n", {}, &quiet)
                  .ok());
  EXPECT_TRUE(quiet.empty()) << absl::StrJoin(quiet, "\n");
}

TEST(AccelerateConfigTest, ConditionallyIgnoredKeys) {
  std::vector<std::string> warnings;
  auto spec = ParseJobSpecWithAccelerateConfig(
      kGptSpec,
      "distributed_type: FSDP\nnum_processes: 2\nmachine_rank: 1\ndeepspeed_config: {}\nmegatron_lm_config: {}\n"
      "dynamo_config: {dynamo_backend: INDUCTOR}\nmain_process_port: 29500\n"
      "fsdp_config: {fsdp_version: 1}\n",
      {}, &warnings);
  ASSERT_TRUE(spec.ok()) << spec.status();
  const std::string all = absl::StrJoin(warnings, "\n");
  for (const char* key :
       {"machine_rank", "deepspeed_config", "megatron_lm_config", "dynamo_config", "main_process_port"}) {
    EXPECT_TRUE(AnyContains(warnings, absl::StrCat("accelerate_config.", key, " is ignored: "))) << key << "\n" << all;
  }
}

// fsdp_activation_checkpointing is the spec's activation_checkpointing.
TEST(AccelerateConfigTest, ActivationCheckpointing) {
  for (const bool on : {true, false}) {
    auto spec = ParseJobSpecWithAccelerateConfig(
        kGptSpec,
        absl::StrCat("distributed_type: FSDP\nnum_processes: 2\nfsdp_config: {fsdp_activation_checkpointing: ",
                     on ? "true" : "false", "}\n"),
        {}, nullptr);
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_EQ(spec->activation_checkpointing, on);
  }
  auto mlp = ParseJobSpecWithAccelerateConfig(
      "name: mlp\nmodel: {kind: mlp}\n", "distributed_type: FSDP\nfsdp_config: {fsdp_activation_checkpointing: true}\n",
      {}, nullptr);
  ASSERT_FALSE(mlp.ok());
  EXPECT_NE(mlp.status().message().find("activation_checkpointing"), std::string::npos) << mlp.status();
}

TEST(AccelerateConfigTest, WarningsAreBounded) {
  std::string config;
  for (int i = 0; i < 200; ++i) config += absl::StrCat("tpu_x", i, ": 1\n");
  std::vector<std::string> warnings;
  ASSERT_TRUE(ParseJobSpecWithAccelerateConfig("name: w\n", config, {}, &warnings).ok());
  ASSERT_EQ(warnings.size(), 65u);
  EXPECT_EQ(warnings.back(), "136 further accelerate_config warnings omitted");
}

TEST(AccelerateConfigTest, HuggingFaceLayersAreKeptForOtherModels) {
  auto spec = ParseJobSpecWithAccelerateConfig("name: mlp\nmodel: {kind: mlp}\n", SeedConfig(), {}, nullptr);
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find("'accelerate_config.fsdp_config.fsdp_transformer_layer_cls_to_wrap'"),
            std::string::npos)
      << spec.status();
  EXPECT_NE(spec.status().message().find("BertLayer"), std::string::npos) << spec.status();
}

TEST(AccelerateConfigTest, TheSpecsOwnErrorsKeepTheirField) {
  auto spec =
      ParseJobSpecWithAccelerateConfig(std::string(kGptSpec) + "optimizer: {lr: -1}\n", SeedConfig(), {}, nullptr);
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(spec.status().message().find("spec field 'optimizer.lr'"), std::string::npos) << spec.status();
}

TEST(AccelerateConfigTest, BothAnEmbeddedAndASeparateConfigIsAnError) {
  auto spec = ParseJobSpecWithAccelerateConfig(Embedded(kGptSpec, SeedConfig()), SeedConfig(), {}, nullptr);
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(spec.status().message().find("spec field 'accelerate_config'"), std::string::npos) << spec.status();
  EXPECT_NE(spec.status().message().find("give one"), std::string::npos) << spec.status();
}

// Configs written by the venv's accelerate package itself (its ClusterConfig,
// as `accelerate config` writes them): every distributed type, mixed
// precision and FSDP version, with and without layer classes. Each is
// accepted, except FSDP with fp16 on the CPU: LibTorch has no fp16 matrix
// kernels on the CPU, so it is refused naming mixed_precision.
TEST(AccelerateConfigTest, EveryConfigAccelerateWrites) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("accelerate-configs-" + std::to_string(::getpid()));
  const std::string python =
      std::getenv("TRAINYARD_TEST_PYTHON") ? std::getenv("TRAINYARD_TEST_PYTHON") : TRAINYARD_TEST_PYTHON;
  const std::string cmd = python + " " + TRAINYARD_SOURCE_DIR + "/tests/fixtures/accelerate_configs.py " +
                          dir.string() + " > " + (dir.string() + ".list");
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream list(dir.string() + ".list");
  int seen = 0;
  for (std::string name; std::getline(list, name);) {
    ++seen;
    std::ifstream in(dir / (name + ".yaml"));
    std::stringstream text;
    text << in.rdbuf();
    std::vector<std::string> warnings;
    auto spec = ParseJobSpecWithAccelerateConfig(kGptSpec, text.str(), {}, &warnings);
    const bool fsdp = name.rfind("fsdp", 0) == 0;
    const bool fp16 = name.size() > 5 && name.substr(name.size() - 5) == "-fp16";
    if (fsdp && fp16) {
      ASSERT_FALSE(spec.ok()) << name;
      EXPECT_NE(spec.status().message().find("spec field 'accelerate_config.mixed_precision'"), std::string::npos)
          << name << ": " << spec.status();
      continue;
    }
    ASSERT_TRUE(spec.ok()) << name << ": " << spec.status() << "\n" << text.str();
    if (name.rfind("multi_gpu-", 0) == 0) {
      EXPECT_EQ(spec->device, Device::kCuda) << name;
    } else {
      EXPECT_EQ(spec->device, Device::kCpu) << name;
    }
    if (name.rfind("no-", 0) == 0) EXPECT_EQ(spec->distributed_type, DistributedType::kNo) << name;
    if (fsdp) {
      EXPECT_EQ(spec->distributed_type, DistributedType::kFsdp) << name;
      EXPECT_EQ(spec->fsdp.transformer_layer_cls_to_wrap, std::vector<std::string>{"Block"}) << name;
      EXPECT_EQ(spec->fsdp.state_dict_type, StateDictType::kShardedStateDict) << name;
      EXPECT_EQ(spec->fsdp.sharding_strategy, ShardingStrategy::kFullShard) << name;
    }
    // Nothing Accelerate writes is unknown here: each key is used or
    // ignored with a warning that names it.
    for (const std::string& w : warnings) EXPECT_EQ(w.rfind("accelerate_config.", 0), 0u) << name << ": " << w;
  }
  EXPECT_EQ(seen, 24);
  std::filesystem::remove_all(dir);
  std::filesystem::remove(dir.string() + ".list");
}

struct BadConfig {
  std::string config;
  std::vector<std::string> expected;  // substrings of the error
};

class BadConfigTest : public ::testing::TestWithParam<BadConfig> {};

// Each bad config is refused the same way, given separately or embedded.
TEST_P(BadConfigTest, IsRejectedNamingTheField) {
  const BadConfig& c = GetParam();
  for (bool embedded : {false, true}) {
    auto spec = embedded ? ParseJobSpecWithAccelerateConfig(Embedded(kGptSpec, c.config), "", {}, nullptr)
                         : ParseJobSpecWithAccelerateConfig(kGptSpec, c.config, {}, nullptr);
    ASSERT_FALSE(spec.ok()) << "accepted (embedded " << embedded << "): " << c.config;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    for (const std::string& e : c.expected) {
      EXPECT_NE(spec.status().message().find(e), std::string::npos)
          << "embedded " << embedded << ": '" << e << "' not in: " << spec.status().message();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Configs, BadConfigTest,
    ::testing::Values(
        BadConfig{"distributed_type: FSDP\nfsdp_plugin: {}\n",
                  {"spec field 'accelerate_config.fsdp_plugin'", "unknown key", "compute_environment"}},
        BadConfig{"distributed_type: FSDP\nfsdp_config: {fsdp_sharding_strategy: 9}\n",
                  {"spec field 'accelerate_config.fsdp_config.fsdp_sharding_strategy'", "FULL_SHARD (1)"}},
        BadConfig{"fsdp_config: {fsdp_offload: true}\n",
                  {"spec field 'accelerate_config.fsdp_config.fsdp_offload'", "unknown key"}},
        BadConfig{"num_processes: 0\n", {"spec field 'accelerate_config.num_processes'", "between 1"}},
        BadConfig{"distributed_type: DEEPSPEED\n",
                  {"spec field 'accelerate_config.distributed_type'", "'DEEPSPEED' is not supported",
                   "NO, MULTI_CPU, MULTI_GPU, FSDP"}},
        BadConfig{"distributed_type: XLA\n", {"spec field 'accelerate_config.distributed_type'", "not supported"}},
        BadConfig{"distributed_type: MULTI_QPU\n",
                  {"spec field 'accelerate_config.distributed_type'", "unknown value 'MULTI_QPU'"}},
        BadConfig{"num_machines: 0\n", {"spec field 'accelerate_config.num_machines'", "at least 1"}},
        BadConfig{"num_processes: 3\nnum_machines: 2\n", {"accelerate_config.num_machines", "divide num_processes"}},
        BadConfig{"num_machines: two\n", {"spec field 'accelerate_config.num_machines'", "integer"}},
        BadConfig{"mixed_precision: fp8\n", {"spec field 'accelerate_config.mixed_precision'", "'fp8'"}},
        BadConfig{"mixed_precision: fp32\n",
                  {"spec field 'accelerate_config.mixed_precision'", "unknown value 'fp32'"}},
        BadConfig{"use_cpu: maybe\n", {"spec field 'accelerate_config.use_cpu'", "true or false"}},
        BadConfig{"machine_rank: -1\n", {"spec field 'accelerate_config.machine_rank'", ">= 0"}},
        BadConfig{"deepspeed_config: {zero_stage: 2}\n",
                  {"spec field 'accelerate_config.deepspeed_config'", "DeepSpeed is not supported"}},
        BadConfig{"fsdp_config: {fsdp_version: 3}\n",
                  {"spec field 'accelerate_config.fsdp_config.fsdp_version'", "accepted: 1, 2"}},
        BadConfig{"distributed_type: FSDP\nfsdp_config: {fsdp_version: 2, fsdp_reshard_after_forward: 2}\n",
                  {"spec field 'accelerate_config.fsdp_config.fsdp_reshard_after_forward'", "smaller group"}},
        BadConfig{"distributed_type: FSDP\nfsdp_config: {fsdp_version: 2, fsdp_sharding_strategy: FULL_SHARD, "
                  "fsdp_reshard_after_forward: false}\n",
                  {"spec field 'accelerate_config.fsdp_config.fsdp_reshard_after_forward'", "contradicts"}},
        BadConfig{"fsdp_config: {fsdp_ignored_modules: [embed]}\n",
                  {"spec field 'accelerate_config.fsdp_config.fsdp_ignored_modules'", "only null"}},
        BadConfig{"parallelism_config: {parallelism_config_tp_size: 2}\n",
                  {"spec field 'accelerate_config.parallelism_config'", "not supported"}},
        BadConfig{"fsdp_config: [1]\n", {"spec field 'accelerate_config.fsdp_config'", "mapping"}},
        // FSDP's fp16 needs CUDA: the config's mixed_precision is named.
        BadConfig{"distributed_type: FSDP\nmixed_precision: fp16\n",
                  {"spec field 'accelerate_config.mixed_precision'", "cuda"}},
        BadConfig{"- distributed_type\n", {"spec field 'accelerate_config'", "mapping"}}));

TEST(AccelerateConfigTest, UnreadableInputs) {
  auto yaml = ParseJobSpecWithAccelerateConfig(kGptSpec, "distributed_type: [FSDP\n", {}, nullptr);
  ASSERT_FALSE(yaml.ok());
  EXPECT_NE(yaml.status().message().find("accelerate config is not valid YAML"), std::string::npos) << yaml.status();
  SpecLimits small;
  small.max_spec_bytes = 64;
  auto big = ParseJobSpecWithAccelerateConfig("name: b\n", SeedConfig(), small, nullptr);
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("the limit is 64"), std::string::npos) << big.status();
  auto null_embedded = ParseJobSpecWithAccelerateConfig("name: n\naccelerate_config:\n", "", {}, nullptr);
  ASSERT_FALSE(null_embedded.ok());
  EXPECT_NE(null_embedded.status().message().find("spec field 'accelerate_config'"), std::string::npos)
      << null_embedded.status();
}

// Every example in examples/ is a valid job spec (the accelerate one with
// its config file).
TEST(Examples, EveryExampleSpecParses) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(TRAINYARD_SOURCE_DIR) / "examples";
  auto read = [](const fs::path& p) {
    std::ifstream in(p);
    std::stringstream buf;
    buf << in.rdbuf();
    return buf.str();
  };
  int checked = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".yaml" || e.path().filename() == "accelerate_fsdp_config.yaml") continue;
    const std::string config =
        e.path().filename() == "accelerate-fsdp.yaml" ? read(dir / "accelerate_fsdp_config.yaml") : "";
    std::vector<std::string> warnings;
    auto spec = ParseJobSpecWithAccelerateConfig(read(e.path()), config, {}, &warnings);
    EXPECT_TRUE(spec.ok()) << e.path() << ": " << spec.status();
    ++checked;
  }
  EXPECT_GE(checked, 5);
}

}  // namespace
}  // namespace trainyard

namespace trainyard {
namespace {

// A plain native spec without num_processes runs one process and gets no
// note about an Accelerate config it never named (its "launching 1 rank"
// says so).
TEST(AccelerateConfigTest, APlainSpecGetsNoNoteAboutAnAccelerateConfig) {
  for (const char* text : {"name: g\nmax_steps: 5\n", "name: g\nnum_processes: 1\n", "name: g\ndistributed_type: NO\n",
                           "name: g\nscript: {path: train.py}\n"}) {
    std::vector<std::string> warnings;
    auto spec = ParseJobSpecWithAccelerateConfig(text, "", {}, &warnings);
    ASSERT_TRUE(spec.ok()) << text << spec.status();
    EXPECT_EQ(spec->num_processes, 1);
    EXPECT_TRUE(warnings.empty()) << text << absl::StrJoin(warnings, "\n");
  }
}

// A script's embedded accelerate_config that is not a mapping (a config
// file's path, a natural guess) is refused at submit naming the field, not
// by Accelerate in every rank at run time.
TEST(AccelerateConfigTest, AScriptsAccelerateConfigMustBeAMapping) {
  for (const char* config : {"cpu.yaml", "[a, b]", "3"}) {
    auto spec = ParseJobSpecWithAccelerateConfig(
        std::string("name: g\nscript: {path: train.py}\naccelerate_config: ") + config + "\n", "", {}, nullptr);
    ASSERT_FALSE(spec.ok()) << config;
    EXPECT_NE(spec.status().message().find("accelerate_config"), std::string::npos) << spec.status();
    EXPECT_NE(spec.status().message().find("must be a mapping of Accelerate's keys"), std::string::npos)
        << spec.status();
  }
  auto path = ParseJobSpecWithAccelerateConfig("name: g\nscript: {path: train.py}\naccelerate_config: cpu.yaml\n", "",
                                               {}, nullptr);
  EXPECT_NE(path.status().message().find("trainctl submit --accelerate-config FILE"), std::string::npos)
      << path.status();
}

}  // namespace
}  // namespace trainyard
