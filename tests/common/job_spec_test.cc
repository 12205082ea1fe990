#include "common/job_spec.h"
#include "common/listen_socket.h"
#include "common/placement.h"
#include "tests/test_paths.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

namespace trainyard {
namespace {

std::string ErrorOf(const std::string& text) {
  auto spec = ParseJobSpec(text);
  EXPECT_FALSE(spec.ok()) << "accepted: " << text;
  if (spec.ok()) return "";
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(spec.status().message());
}

// Every job spec in examples/ (not the Accelerate config files) is valid,
// with the name its file has.
TEST(JobSpecTest, EveryExampleSpecParses) {
  int specs = 0;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(TRAINYARD_SOURCE_DIR) + "/examples")) {
    const std::string file = entry.path().filename().string();
    if (entry.path().extension() != ".yaml" || file.find("_config") != std::string::npos) continue;
    std::ifstream in(entry.path());
    std::stringstream buf;
    buf << in.rdbuf();
    auto spec = ParseJobSpec(buf.str());
    ASSERT_TRUE(spec.ok()) << file << ": " << spec.status();
    EXPECT_EQ(spec->name + ".yaml", file);
    ++specs;
  }
  EXPECT_GE(specs, 9);
}

TEST(JobSpecTest, ParsesTheExample) {
  std::ifstream in(std::string(TRAINYARD_SOURCE_DIR) + "/examples/mnist-ddp.yaml");
  ASSERT_TRUE(in) << "examples/mnist-ddp.yaml missing";
  std::stringstream buf;
  buf << in.rdbuf();
  auto spec = ParseJobSpec(buf.str());
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name, "mnist-ddp");
  EXPECT_EQ(spec->num_processes, 2);
  EXPECT_EQ(spec->model.kind, ModelKind::kMlp);
  EXPECT_EQ(spec->model.hidden, (std::vector<int64_t>{512, 256}));
  EXPECT_EQ(spec->optimizer.kind, OptimizerKind::kAdamW);
  EXPECT_DOUBLE_EQ(spec->optimizer.weight_decay, 0.01);
  EXPECT_EQ(spec->distributed_type, DistributedType::kDdp);
}

TEST(JobSpecTest, ParsesTheFsdpExample) {
  std::ifstream in(std::string(TRAINYARD_SOURCE_DIR) + "/examples/gpt-fsdp.yaml");
  ASSERT_TRUE(in) << "examples/gpt-fsdp.yaml missing";
  std::stringstream buf;
  buf << in.rdbuf();
  auto spec = ParseJobSpec(buf.str());
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->distributed_type, DistributedType::kFsdp);
  EXPECT_EQ(spec->model.kind, ModelKind::kGpt);
  EXPECT_EQ(spec->fsdp.transformer_layer_cls_to_wrap, (std::vector<std::string>{"Block"}));
}

TEST(JobSpecTest, ParsesTheScriptExample) {
  std::ifstream in(std::string(TRAINYARD_SOURCE_DIR) + "/examples/accelerate_script/job.yaml");
  ASSERT_TRUE(in) << "examples/accelerate_script/job.yaml missing";
  std::stringstream buf;
  buf << in.rdbuf();
  auto spec = ParseJobSpec(buf.str());
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_FALSE(spec->script.empty());
  EXPECT_EQ(spec->script.path, "examples/accelerate_script/train.py");
  EXPECT_EQ(spec->script.args, (std::vector<std::string>{"--steps", "300", "--checkpoint-every", "100"}));
  EXPECT_EQ(spec->ddp.comm_hook, CommHookType::kFp16);
  EXPECT_EQ(spec->checkpoint.total_limit, 2);
  auto with_env = ParseJobSpec("name: s\nscript: {path: t.py, env: {HF_HOME: /data/hf}, working_dir: /w}\n");
  ASSERT_TRUE(with_env.ok()) << with_env.status();
  EXPECT_EQ(with_env->script.env.at("HF_HOME"), "/data/hf");
  EXPECT_EQ(with_env->script.working_dir, "/w");
  // The canonical JSON (what the store keeps and the workers parse) is a
  // valid script spec too.
  auto round = ParseJobSpec(JobSpecToJson(*with_env));
  ASSERT_TRUE(round.ok()) << round.status() << "\n" << JobSpecToJson(*with_env);
  EXPECT_EQ(round->script.env, with_env->script.env);
  EXPECT_EQ(round->script.path, "t.py");
  EXPECT_EQ(JobSpecToJson(*round), JobSpecToJson(*with_env));
}

TEST(JobSpecTest, DefaultsForAMinimalSpec) {
  auto spec = ParseJobSpec("name: tiny\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  JobSpec d;
  EXPECT_EQ(spec->max_steps, d.max_steps);
  EXPECT_EQ(spec->num_processes, 1);
  EXPECT_EQ(spec->data.batch_size, 64);
  EXPECT_EQ(spec->device, Device::kCpu);
}

// Replica mode takes shared memory: each membership builds its own segment.
TEST(JobSpecTest, ReplicasMayAskForSharedMemory) {
  auto spec = ParseJobSpec("num_processes: 2\nfault_tolerance: {mode: replica}\nddp: {intra_host_transport: shm}\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(spec->replicas());
  EXPECT_EQ(spec->ddp.intra_host_transport, IntraHostTransport::kSharedMemory);
}

// Under HYBRID sharding a shard group (a node's ranks) is one replica.
TEST(JobSpecTest, HybridShardGroupsAreReplicas) {
  auto spec = ParseJobSpec(
      "num_processes: 4\ndistributed_type: FSDP\n"
      "fsdp_config: {fsdp_sharding_strategy: HYBRID_SHARD, ranks_per_node: 2}\n"
      "fault_tolerance: {mode: replica, min_replicas: 2}\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->ranks_per_replica(), 2);
  spec = ParseJobSpec(
      "num_processes: 3\ndistributed_type: FSDP\nfsdp_config: {fsdp_sharding_strategy: NO_SHARD}\n"
      "fault_tolerance: {mode: replica}\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->ranks_per_replica(), 1);
  spec = ParseJobSpec("num_processes: 3\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->ranks_per_replica(), 1);
}

TEST(JobSpecTest, JsonAndYamlAreEquivalentAndRoundTrip) {
  auto yaml = ParseJobSpec(
      "name: a\nmodel: {kind: cnn}\noptimizer: {kind: sgd, lr: 0.1, momentum: 0.9}\nmax_steps: 7\n"
      "num_processes: 2\nddp: {bucket_cap_mb: 1.5, gradient_as_bucket_view: true}\n");
  ASSERT_TRUE(yaml.ok()) << yaml.status();
  const std::string json = JobSpecToJson(*yaml);
  auto again = ParseJobSpec(json);
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << json;
  EXPECT_EQ(JobSpecToJson(*again), json);
  EXPECT_EQ(again->model.kind, ModelKind::kCnn);
  EXPECT_DOUBLE_EQ(again->optimizer.momentum, 0.9);
  EXPECT_DOUBLE_EQ(again->ddp.bucket_cap_mb, 1.5);
  EXPECT_TRUE(again->ddp.gradient_as_bucket_view);
}

TEST(JobSpecTest, ModelShorthandAndAccelerateNames) {
  auto spec = ParseJobSpec("model: cnn\ndistributed_type: MULTI_CPU\nnum_processes: 4\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->model.kind, ModelKind::kCnn);
  EXPECT_EQ(spec->distributed_type, DistributedType::kDdp);
}

struct BadSpec {
  std::string text;
  std::vector<std::string> expected;  // substrings the message must contain
  friend void PrintTo(const BadSpec& b, std::ostream* os) { *os << b.text; }
};

class JobSpecRejects : public ::testing::TestWithParam<BadSpec> {};

TEST_P(JobSpecRejects, NamesTheField) {
  const std::string msg = ErrorOf(GetParam().text);
  for (const auto& part : GetParam().expected) EXPECT_NE(msg.find(part), std::string::npos) << msg;
}

INSTANTIATE_TEST_SUITE_P(
    Validation, JobSpecRejects,
    ::testing::Values(
        BadSpec{"modle: {kind: mlp}\n", {"'modle'", "unknown key", "model"}},
        BadSpec{"num_processes: 2\nelastic: {min_processes: 1}\n",
                {"'elastic.min_processes'", "needs fault_tolerance.mode replica"}},
        BadSpec{"num_processes: 3\nfault_tolerance: {mode: replica, min_replicas: 2}\nelastic: {min_processes: 1}\n",
                {"'elastic.min_processes'", "at least fault_tolerance.min_replicas (2)"}},
        BadSpec{"num_processes: 2\nfault_tolerance: {mode: replica}\nelastic: {min_processes: 3}\n",
                {"'elastic.min_processes'", "at most num_processes (2)"}},
        BadSpec{"num_processes: 1\nfault_tolerance: {mode: replica}\n", {"'fault_tolerance.mode'", "at least 2"}},
        BadSpec{"num_processes: 4\ndistributed_type: FSDP\nfault_tolerance: {mode: replica}\n",
                {"'fsdp_config.fsdp_sharding_strategy'", "HYBRID_SHARD", "one replica"}},
        BadSpec{"num_processes: 4\ndistributed_type: FSDP\nfsdp_config: {fsdp_sharding_strategy: HYBRID_SHARD}\n"
                "fault_tolerance: {mode: replica}\n",
                {"'fsdp_config.fsdp_sharding_strategy'", "ranks_per_node below num_processes (4)"}},
        BadSpec{"num_processes: 4\ndistributed_type: FSDP\nfsdp_config: {fsdp_sharding_strategy: HYBRID_SHARD, "
                "ranks_per_node: 2}\nfault_tolerance: {mode: replica, min_replicas: 3}\n",
                {"'fault_tolerance.min_replicas'", "number of shard groups (2"}},
        BadSpec{"num_processes: 4\ndistributed_type: FSDP\nfsdp_config: {fsdp_sharding_strategy: HYBRID_SHARD, "
                "ranks_per_node: 2}\nfault_tolerance: {mode: replica}\nelastic: {min_processes: 3}\n",
                {"'elastic.min_processes'", "multiple of fsdp_config.ranks_per_node (2)"}},
        BadSpec{"model: {kind: mlp, depth: 3}\n", {"'model.depth'", "unknown key", "hidden"}},
        BadSpec{"model: {kind: transformer}\n", {"'model.kind'", "transformer", "mlp, cnn"}},
        BadSpec{"model: {kind: resnet, hidden: [3]}\n", {"'model.hidden'", "does not apply"}},
        BadSpec{"model: {kind: cnn, channels: 3}\n", {"'model.channels'", "resnet"}},
        BadSpec{"model: {kind: llama}\n", {"'model.config'", "init_from"}},
        BadSpec{"model: {kind: llama, config: c.json, width: 64}\n", {"'model.width'", "config.json"}},
        BadSpec{"model: {kind: llama, config: c.json, hidden: [8]}\n", {"'model.hidden'", "llama"}},
        BadSpec{"model: {kind: mlp, config: c.json}\n", {"'model.config'", "llama model only"}},
        BadSpec{"model: {kind: mlp, context: 64}\n", {"'model.context'", "gpt and llama"}},
        BadSpec{"model: {kind: llama, config: c.json}\ndata: {kind: 'mnist:/x'}\n", {"'data.kind'", "token ids"}},
        BadSpec{"model: {kind: llama, config: c.json}\ndata: {kind: 'tokens:/x', token_dtype: int8}\n",
                {"'data.token_dtype'", "uint16, uint32"}},
        BadSpec{"data: {kind: synthetic, token_dtype: uint32}\n", {"'data.token_dtype'", "tokens"}},
        BadSpec{"model: mlp\nactivation_checkpointing: true\n", {"'activation_checkpointing'", "no layer"}},
        BadSpec{"model: resnet\nactivation_checkpointing: true\n", {"'activation_checkpointing'", "BatchNorm"}},
        BadSpec{"model: gpt\nactivation_checkpointing: false\nfsdp_config: {fsdp_activation_checkpointing: true}\n",
                {"'fsdp_config.fsdp_activation_checkpointing'", "contradicts"}},
        BadSpec{"data: {kind: 'ftp:x'}\n", {"'data.kind'", "mnist:DIR"}},
        BadSpec{"data: {kind: 'image_folder:/x'}\n", {"'data.kind'", "image models (resnet, resnet50, cnn), not mlp"}},
        BadSpec{"data: {kind: synthetic, random_flip: true}\n", {"'data.random_flip'", "image_folder"}},
        BadSpec{"model: resnet\ndata: {kind: 'image_folder:/x', mean: [0.5, 0.5, 0.5]}\n", {"'data.std'", "together"}},
        BadSpec{"model: resnet\ndata: {kind: 'image_folder:/x', std: [0.5, 0.5]}\n", {"'data.std'", "list of 3"}},
        BadSpec{"model: resnet\ndata: {kind: 'image_folder:/x', crop_size: 48}\n",
                {"'data.crop_size'", "32x32", "model.image_size"}},
        BadSpec{"model: cnn\ndata: {kind: 'image_folder:/x', crop_size: 32}\n", {"'data.crop_size'", "28x28"}},
        BadSpec{"model: {kind: mlp, image_size: 64}\n", {"'model.image_size'", "resnet"}},
        BadSpec{"model: {kind: resnet50, channels: 16}\n", {"'model.channels'", "resnet50", "torchvision"}},
        BadSpec{"model: {kind: resnet50, input_size: 784}\n", {"'model.input_size'", "does not apply", "resnet50"}},
        BadSpec{"model: resnet50\nactivation_checkpointing: true\n", {"'activation_checkpointing'", "BatchNorm"}},
        BadSpec{"model: {kind: resnet50, image_size: 64}\ndata: {kind: 'image_folder:/x', crop_size: 48}\n",
                {"'data.crop_size'", "resnet50 model takes 64x64", "model.image_size"}},
        BadSpec{"model: {kind: resnet50}\ndata: {kind: 'mnist:/d'}\n", {"'data.kind'", "784 pixels"}},
        BadSpec{"model: resnet\neval_every_steps: 5\ndata: {kind: 'image_folder:/x'}\n",
                {"'data.eval_fraction'", "image_folder data needs eval_fraction or eval_path"}},
        BadSpec{"model: {kind: torchscript}\n", {"'model.kind'", "torchscript:PATH needs the path"}},
        BadSpec{"scheduler: {kind: step}\n", {"'scheduler.kind'", "constant, linear, cosine"}},
        BadSpec{"max_steps: 10\nscheduler: {kind: linear, warmup_steps: 11}\n",
                {"'scheduler.warmup_steps'", "max_steps"}},
        BadSpec{"gradient_accumulation_steps: 0\n", {"'gradient_accumulation_steps'", "between 1"}},
        BadSpec{"loss: mse\n", {"'loss'", "torchscript"}},
        BadSpec{"script: {args: [--x]}\n", {"'script.path'", "is required"}},
        BadSpec{"script: {path: t.py, args: --x}\n", {"'script.args'", "list of strings"}},
        BadSpec{"script: {path: t.py, env: {TRAINYARD_JOB_ID: x}}\n", {"'script.env.TRAINYARD_JOB_ID'", "set by"}},
        BadSpec{"script: {path: t.py, env: {1X: y}}\n", {"'script.env'", "not starting with a digit", "'1X'"}},
        BadSpec{"script: {path: t.py, interpreter: py}\n", {"'script.interpreter'", "unknown key", "working_dir"}},
        BadSpec{"script: {path: t.py, progress: 'iter (\\d+'}\n", {"'script.progress'", "not a regular expression"}},
        BadSpec{"script: {path: t.py, progress: 'iter (?P<it>\\d+)'}\n", {"'script.progress'", "group named step"}},
        BadSpec{"script: {path: t.py}\nmodel: gpt\n", {"'model'", "script sets it"}},
        BadSpec{"script: {path: t.py}\nmax_steps: 5\n", {"'max_steps'", "script.args"}},
        BadSpec{"script: {path: t.py}\nmixed_precision: bf16\n", {"'mixed_precision'", "Accelerate config"}},
        BadSpec{"step_timeout_s: -1\n", {"'step_timeout_s'", "between 0"}},
        BadSpec{"data: {kind: 'tokens:/x.bin'}\n", {"'data.kind'", "token models (gpt, llama) only"}},
        BadSpec{"model: {kind: resnet}\ndata: {kind: 'mnist:/d'}\n", {"'data.kind'", "784 pixels"}},
        BadSpec{"distributed_type: FSDP\nmixed_precision: fp16\n", {"'mixed_precision'", "cuda"}},
        BadSpec{"model: {kind: resnet}\ndistributed_type: FSDP\nfsdp_config: {fsdp_auto_wrap_policy: "
                "TRANSFORMER_BASED_WRAP, "
                "fsdp_transformer_layer_cls_to_wrap: Block}\n",
                {"'fsdp_config.fsdp_transformer_layer_cls_to_wrap'", "BasicBlock"}},
        BadSpec{"preemptible: sometimes\n", {"'preemptible'", "true or false"}},
        BadSpec{"launcher: kubernetes\n", {"'launcher'", "local, slurm, external"}},
        BadSpec{"num_processes: 3\nslurm: {nodes: 2}\n", {"'slurm.nodes'", "divide num_processes"}},
        BadSpec{"slurm: {partition: 'gpu; rm -rf /'}\n", {"'slurm.partition'", "may contain only"}},
        BadSpec{"slurm: {extra_args: ['-N 2']}\n", {"'slurm.extra_args'", "starting with --"}},
        // Options that would run the user's code as the service account.
        BadSpec{"slurm: {extra_args: ['--export=ALL,PATH=/home/mallory/bin']}\n",
                {"'slurm.extra_args'", "--export is not an sbatch option a job may pass", "--slurm-sbatch-arg"}},
        BadSpec{"slurm: {extra_args: ['--chdir=/tmp']}\n", {"--chdir is not an sbatch option"}},
        BadSpec{"slurm: {extra_args: ['--output=/etc/x']}\n", {"--output is not an sbatch option"}},
        BadSpec{"slurm: {extra_args: ['--wrap=id']}\n", {"--wrap is not an sbatch option"}},
        BadSpec{"slurm: {extra_args: '--exclusive'}\n", {"'slurm.extra_args'", "list"}},
        BadSpec{"slurm: {gres: 'gpu:1'}\n", {"'slurm.gres'", "unknown key"}},
        BadSpec{"owner: alice\n", {"'owner'", "cannot name one"}}, BadSpec{"priority: [high]\n", {"'priority'"}},
        BadSpec{"preemption_grace_s: 0\n", {"'preemption_grace_s'", "between 1"}},
        BadSpec{"model: {kind: gpt, width: 30, heads: 4}\n", {"'model.heads'", "divide width"}},
        BadSpec{"model: {kind: gpt, hidden: [3]}\n", {"'model.hidden'", "gpt"}},
        BadSpec{"model: {kind: mlp, layers: 3}\n", {"'model.layers'", "gpt model only"}},
        BadSpec{"model: {hidden: [10, -1]}\n", {"'model.hidden[1]'", "between 1 and"}},
        BadSpec{"model: {hidden: 10}\n", {"'model.hidden'", "list"}},
        BadSpec{"num_processes: 0\n", {"'num_processes'", "between 1 and"}},
        BadSpec{"num_processes: two\n", {"'num_processes'", "integer", "'two'"}},
        BadSpec{"num_processes: 1.5\n", {"'num_processes'", "integer"}},
        BadSpec{"max_steps: 0\n", {"'max_steps'", "between 1 and"}},
        BadSpec{"optimizer: {kind: adamw, lr: -0.1}\n", {"'optimizer.lr'", "between 0 and"}},
        BadSpec{"optimizer: {kind: adam}\n", {"'optimizer.kind'", "sgd, adamw"}},
        BadSpec{"optimizer: {kind: sgd, betas: [0.9, 0.99]}\n", {"'optimizer.betas'", "adamw only"}},
        BadSpec{"optimizer: {kind: adamw, betas: [0.9]}\n", {"'optimizer.betas'", "two numbers"}},
        BadSpec{"optimizer: {kind: adamw, momentum: 0.9}\n", {"'optimizer.momentum'", "sgd only"}},
        BadSpec{"optimizer: {kind: sgd, eps: 0.000001}\n", {"'optimizer.eps'", "adamw only"}},
        BadSpec{"optimizer: {lr: .inf}\n", {"'optimizer.lr'", "finite"}},
        BadSpec{"data: {kind: synthetic, batch_size: 0}\n", {"'data.batch_size'"}},
        BadSpec{"data: {kind: imagenet}\n", {"'data.kind'", "synthetic"}},
        BadSpec{"data: {shuffle: maybe}\n", {"'data.shuffle'", "true or false"}},
        BadSpec{"device: tpu\n", {"'device'", "cpu, cuda"}},
        BadSpec{"max_grad_norm: -1\n", {"'max_grad_norm'", "between 0"}},
        BadSpec{"distributed_type: DeepSpeed\n", {"'distributed_type'", "FSDP"}},
        BadSpec{"fsdp_config: {fsdp_sharding_strategy: 7}\n",
                {"'fsdp_config.fsdp_sharding_strategy'", "FULL_SHARD (1)"}},
        BadSpec{"fsdp_config: {fsdp_sharding_strategy: HALF_SHARD}\n",
                {"'fsdp_config.fsdp_sharding_strategy'", "HALF_SHARD"}},
        BadSpec{"fsdp_config: {fsdp_auto_wrap_policy: LAYER_WRAP}\n",
                {"'fsdp_config.fsdp_auto_wrap_policy'", "TRANSFORMER_BASED_WRAP"}},
        BadSpec{"fsdp_config: {fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP}\n",
                {"'fsdp_config.fsdp_transformer_layer_cls_to_wrap'", "required"}},
        BadSpec{"fsdp_config: {fsdp_min_num_params: 0}\n", {"'fsdp_config.fsdp_min_num_params'"}},
        BadSpec{"model: gpt\nfsdp_config: {fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP, "
                "fsdp_transformer_layer_cls_to_wrap: GPT2Block}\n",
                {"'fsdp_config.fsdp_transformer_layer_cls_to_wrap'", "GPT2Block", "Embedding, Block, Head"}},
        BadSpec{"fsdp_config: {fsdp_offload_params: sometimes}\n", {"'fsdp_config.fsdp_offload_params'"}},
        BadSpec{"fsdp_config: {fsdp_backward_prefetch: BACKWARD_LATER}\n",
                {"'fsdp_config.fsdp_backward_prefetch'", "BACKWARD_PRE"}},
        BadSpec{"fsdp_config: {fsdp_backward_prefetch: NO_PREFETCH, fsdp_backward_prefetch_policy: NO_PREFETCH}\n",
                {"'fsdp_config.fsdp_backward_prefetch_policy'", "not both"}},
        BadSpec{"fsdp_config: {fsdp_state_dict_type: LOCAL_STATE_DICT}\n",
                {"'fsdp_config.fsdp_state_dict_type'", "not supported"}},
        BadSpec{"fsdp_config: {fsdp_sync_module_states: false}\n",
                {"'fsdp_config.fsdp_sync_module_states'", "cpu_ram_efficient_loading"}},
        BadSpec{"fsdp_config: {fsdp_sharding: FULL_SHARD}\n", {"'fsdp_config.fsdp_sharding'", "unknown key"}},
        BadSpec{"num_processes: 4\nfsdp_config: {ranks_per_node: 3}\n", {"'fsdp_config.ranks_per_node'", "divide"}},
        BadSpec{"distributed_type: FSDP\nddp: {comm_hook: fp16}\n", {"'ddp.comm_hook'", "not FSDP"}},
        BadSpec{"mixed_precision: fp8\n", {"'mixed_precision'", "accepted: no"}},
        BadSpec{"ddp: {comm_hook: zip}\n", {"'ddp.comm_hook'", "unknown value"}},
        BadSpec{"ddp: {comm_state_option: {matrix_approximation_rank: 2}}\n", {"'ddp.comm_state_option'", "stateless"}},
        BadSpec{"ddp: {comm_hook: fp16, comm_state_option: {warm_start: false}}\n",
                {"'ddp.comm_state_option'", "'fp16' is stateless"}},
        BadSpec{"ddp: {comm_hook: power_sgd, comm_state_option: {rank: 2}}\n",
                {"'ddp.comm_state_option.rank'", "unknown key", "matrix_approximation_rank"}},
        BadSpec{"ddp: {comm_hook: power_sgd, comm_state_option: {matrix_approximation_rank: two}}\n",
                {"'ddp.comm_state_option.matrix_approximation_rank'", "integer"}},
        BadSpec{"ddp: {comm_hook: power_sgd, comm_state_option: {matrix_approximation_rank: 0}}\n",
                {"'ddp.comm_state_option.matrix_approximation_rank'", "between 1 and"}},
        BadSpec{"ddp: {comm_hook: power_sgd, comm_state_option: {use_error_feedback: maybe}}\n",
                {"'ddp.comm_state_option.use_error_feedback'", "true or false"}},
        BadSpec{"ddp: {comm_hook: power_sgd, comm_state_option: {min_compression_rate: -1}}\n",
                {"'ddp.comm_state_option.min_compression_rate'"}},
        BadSpec{"ddp: {comm_hook: power_sgd, comm_state_option: {start_powerSGD_iter: 1}}\n",
                {"'ddp.comm_state_option.start_powerSGD_iter'", "> 1"}},
        BadSpec{"ddp: {comm_hook: batched_power_sgd, comm_state_option: {batch_tensors_with_same_shape: true}}\n",
                {"'ddp.comm_state_option.batch_tensors_with_same_shape'", "power_sgd"}},
        BadSpec{"ddp: {comm_hook: power_sgd, comm_state_option: [1, 2]}\n", {"'ddp.comm_state_option'", "mapping"}},
        BadSpec{"ddp: {comm_hook: fp16, comm_wrapper: fp16}\n", {"'ddp.comm_wrapper'", "stateful hook"}},
        BadSpec{"ddp: {comm_hook: bf16, comm_wrapper: fp16}\n", {"'ddp.comm_wrapper'", "bf16"}},
        BadSpec{"ddp: {comm_wrapper: bf16}\n", {"'ddp.comm_wrapper'", "comm_hook 'no'"}},
        BadSpec{"ddp: {comm_wrapper: fp8, comm_hook: power_sgd}\n", {"'ddp.comm_wrapper'", "no, fp16, bf16, none"}},
        BadSpec{"ddp: {comm_hook: power_sgd, intra_host_transport: shm}\n",
                {"'ddp.intra_host_transport'", "comm_hook"}},
        BadSpec{"ddp: {intra_host_transport: tcp}\n", {"'ddp.intra_host_transport'", "auto, shm, process_group"}},
        BadSpec{"ddp: {bucket_cap_mb: 0}\n", {"'ddp.bucket_cap_mb'"}},
        BadSpec{"distributed_type: NO\nnum_processes: 2\n", {"'num_processes'", "NO"}},
        BadSpec{"name: 'a b'\n", {"'name'", "letters"}}, BadSpec{"name: ''\n", {"'name'", "empty"}},
        BadSpec{"model: {kind: cnn, input_size: 100}\n", {"'model.input_size'", "784"}},
        BadSpec{"- just\n- a list\n", {"must be a mapping"}}, BadSpec{"name: [unclosed\n", {"not valid YAML or JSON"}},
        BadSpec{"", {"empty"}},
        BadSpec{"checkpoint: {every: 5}\n", {"'checkpoint.every'", "unknown key", "every_steps"}},
        BadSpec{"checkpoint: {every_steps: -1}\n", {"'checkpoint.every_steps'", "between 0"}},
        BadSpec{"checkpoint: {max_shard_size: 5XB}\n", {"'checkpoint.max_shard_size'", "unknown unit"}},
        BadSpec{"checkpoint: {max_shard_size: lots}\n", {"'checkpoint.max_shard_size'", "expected a number"}},
        BadSpec{"checkpoint: {type: zipped}\n", {"'checkpoint.type'", "auto, full, sharded"}},
        BadSpec{"checkpoint: {total_limit: 1.5}\n", {"'checkpoint.total_limit'", "integer"}},
        BadSpec{"checkpoint: [1]\n", {"'checkpoint'", "mapping"}}));

TEST(JobSpecTest, CheckpointSectionRoundTrips) {
  auto spec = ParseJobSpec(
      "checkpoint: {project_dir: /data/run1, every_steps: 50, total_limit: 3, resume_from: latest,\n"
      "             max_shard_size: 500MB, type: sharded, save_final: false}\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  const CheckpointSpec& c = spec->checkpoint;
  EXPECT_EQ(c.project_dir, "/data/run1");
  EXPECT_EQ(c.every_steps, 50);
  EXPECT_EQ(c.total_limit, 3);
  EXPECT_EQ(c.resume_from, "latest");
  EXPECT_EQ(ParseSize(c.max_shard_size), 500000000);
  EXPECT_EQ(c.type, CheckpointType::kSharded);
  EXPECT_FALSE(c.save_final);
  auto again = ParseJobSpec(JobSpecToJson(*spec));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(JobSpecToJson(*again), JobSpecToJson(*spec));
  // Defaults: Accelerate's save_model shard size, final save on.
  auto defaults = ParseJobSpec("name: x\n");
  EXPECT_EQ(defaults->checkpoint.max_shard_size, "10GB");
  EXPECT_TRUE(defaults->checkpoint.save_final);
  EXPECT_EQ(defaults->checkpoint.every_steps, 0);
}

TEST(JobSpecTest, PowerSgdOptionsWithPyTorchDefaults) {
  auto spec = ParseJobSpec("ddp: {comm_hook: power_sgd, comm_wrapper: bf16}\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  const PowerSgdOptions& o = spec->ddp.power_sgd;
  EXPECT_EQ(o.matrix_approximation_rank, 1);
  EXPECT_EQ(o.start_powerSGD_iter, 1000);
  EXPECT_DOUBLE_EQ(o.min_compression_rate, 2.0);
  EXPECT_TRUE(o.use_error_feedback);
  EXPECT_TRUE(o.warm_start);
  EXPECT_DOUBLE_EQ(o.orthogonalization_epsilon, 0.0);
  EXPECT_EQ(o.random_seed, 0u);
  EXPECT_FALSE(o.batch_tensors_with_same_shape);
  EXPECT_EQ(spec->ddp.comm_wrapper, CommWrapper::kBf16);

  auto full = ParseJobSpec(
      "ddp:\n  comm_hook: power_sgd\n  comm_wrapper: fp16\n  comm_state_option:\n"
      "    matrix_approximation_rank: 2\n    start_powerSGD_iter: 10\n    min_compression_rate: 1.5\n"
      "    use_error_feedback: false\n    warm_start: false\n    orthogonalization_epsilon: 1.0e-8\n"
      "    random_seed: 7\n    batch_tensors_with_same_shape: true\n");
  ASSERT_TRUE(full.ok()) << full.status();
  auto again = ParseJobSpec(JobSpecToJson(*full));
  ASSERT_TRUE(again.ok()) << again.status();
  const PowerSgdOptions& f = again->ddp.power_sgd;
  EXPECT_EQ(f.matrix_approximation_rank, 2);
  EXPECT_EQ(f.start_powerSGD_iter, 10);
  EXPECT_DOUBLE_EQ(f.min_compression_rate, 1.5);
  EXPECT_FALSE(f.use_error_feedback);
  EXPECT_FALSE(f.warm_start);
  EXPECT_DOUBLE_EQ(f.orthogonalization_epsilon, 1e-8);
  EXPECT_EQ(f.random_seed, 7u);
  EXPECT_TRUE(f.batch_tensors_with_same_shape);
  EXPECT_EQ(again->ddp.comm_hook, CommHookType::kPowerSgd);
  EXPECT_EQ(again->ddp.comm_wrapper, CommWrapper::kFp16);

  // Without error feedback and warm start, PowerSGD may start at once.
  EXPECT_TRUE(ParseJobSpec("ddp: {comm_hook: power_sgd, comm_state_option: {start_powerSGD_iter: 0, "
                           "use_error_feedback: false, warm_start: false}}\n")
                  .ok());
}

TEST(JobSpecTest, AccelerateFsdpConfigKeysVerbatim) {
  auto spec = ParseJobSpec(
      "model: {kind: gpt, layers: 2, width: 64, heads: 4, context: 32, vocab: 128}\n"
      "distributed_type: FSDP\nnum_processes: 4\n"
      "fsdp_config:\n"
      "  fsdp_sharding_strategy: 4\n"
      "  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n"
      "  fsdp_transformer_layer_cls_to_wrap: Block\n"
      "  fsdp_backward_prefetch_policy: BACKWARD_POST\n"
      "  fsdp_forward_prefetch: true\n"
      "  fsdp_offload_params: false\n"
      "  fsdp_state_dict_type: SHARDED_STATE_DICT\n"
      "  fsdp_sync_module_states: true\n"
      "  fsdp_use_orig_params: true\n"
      "  fsdp_cpu_ram_efficient_loading: true\n"
      "  fsdp_min_num_params: 1000\n"
      "  ranks_per_node: 2\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->distributed_type, DistributedType::kFsdp);
  EXPECT_EQ(spec->fsdp.sharding_strategy, ShardingStrategy::kHybridShard);
  EXPECT_EQ(spec->fsdp.auto_wrap_policy, WrapPolicy::kTransformerBased);
  EXPECT_EQ(spec->fsdp.transformer_layer_cls_to_wrap, (std::vector<std::string>{"Block"}));
  EXPECT_EQ(spec->fsdp.backward_prefetch, BackwardPrefetch::kBackwardPost);
  EXPECT_EQ(spec->fsdp.state_dict_type, StateDictType::kShardedStateDict);
  EXPECT_EQ(spec->fsdp.ranks_per_node, 2);
  EXPECT_EQ(spec->model.kind, ModelKind::kGpt);
  auto again = ParseJobSpec(JobSpecToJson(*spec));
  ASSERT_TRUE(again.ok()) << again.status() << JobSpecToJson(*spec);
  EXPECT_EQ(JobSpecToJson(*again), JobSpecToJson(*spec));
  auto names = ParseJobSpec(
      "model: cnn\nfsdp_config: {fsdp_sharding_strategy: shard_grad_op, "
      "fsdp_transformer_layer_cls_to_wrap: 'Conv2d, Linear', "
      "fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP}\n");
  ASSERT_TRUE(names.ok()) << names.status();
  EXPECT_EQ(names->fsdp.sharding_strategy, ShardingStrategy::kShardGradOp);
  EXPECT_EQ(names->fsdp.transformer_layer_cls_to_wrap, (std::vector<std::string>{"Conv2d", "Linear"}));
}

TEST(JobSpecTest, LauncherAndSlurmSectionRoundTrip) {
  auto spec = ParseJobSpec(
      "num_processes: 4\nlauncher: slurm\nslurm: {nodes: 2, partition: gpu, account: ml, qos: high, "
      "time_limit: '1-00:00:00', constraint: 'a100|h100', extra_args: ['--exclusive', '--mem=8G']}\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->launcher, LauncherKind::kSlurm);
  EXPECT_EQ(spec->slurm.nodes, 2);
  EXPECT_EQ(spec->slurm.time_limit, "1-00:00:00");
  EXPECT_EQ(spec->slurm.extra_args, (std::vector<std::string>{"--exclusive", "--mem=8G"}));
  auto again = ParseJobSpec(JobSpecToJson(*spec));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(JobSpecToJson(*again), JobSpecToJson(*spec));
  auto plain = ParseJobSpec("num_processes: 1\n");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->launcher, LauncherKind::kDefault);
  EXPECT_EQ(ParseJobSpec("launcher: EXTERNAL\n")->launcher, LauncherKind::kExternal);
}

TEST(PlacementTest, FirstHostOfASlurmHostList) {
  EXPECT_EQ(FirstSlurmHost("vm"), "vm");
  EXPECT_EQ(FirstSlurmHost("node[07-09,12]"), "node07");
  EXPECT_EQ(FirstSlurmHost("gpu[3,5-6]"), "gpu3");
  EXPECT_EQ(FirstSlurmHost("a1,b[2-3]"), "a1");
  EXPECT_EQ(FirstSlurmHost("n[1-2]-ib,m1"), "n1-ib");
  EXPECT_EQ(FirstSlurmHost(""), "");
}

TEST(PlacementTest, RankFromTheEnvironmentThatStartedTheWorker) {
  for (const char* v : {"TRAINYARD_RANK", "SLURM_PROCID", "RANK", "JOB_COMPLETION_INDEX"}) unsetenv(v);
  EXPECT_FALSE(RankFromEnvironment().has_value());
  setenv("JOB_COMPLETION_INDEX", "3", 1);  // Kubernetes Indexed Job
  std::string source;
  EXPECT_EQ(RankFromEnvironment(&source), 3);
  EXPECT_EQ(source, "JOB_COMPLETION_INDEX");
  setenv("SLURM_PROCID", "5", 1);  // Slurm wins over Kubernetes' and torchrun's
  EXPECT_EQ(RankFromEnvironment(&source), 5);
  EXPECT_EQ(source, "SLURM_PROCID");
  setenv("TRAINYARD_RANK", "x", 1);  // not a number: ignored
  EXPECT_EQ(RankFromEnvironment(), 5);
  setenv("TRAINYARD_RANK", "1", 1);
  EXPECT_EQ(RankFromEnvironment(), 1);
  for (const char* v : {"TRAINYARD_RANK", "SLURM_PROCID", "JOB_COMPLETION_INDEX"}) unsetenv(v);
}

TEST(PlacementTest, AddressesAndHostParts) {
  EXPECT_EQ(HostPart("10.0.0.1:50051"), "10.0.0.1");
  EXPECT_EQ(HostPart("[::1]:50051"), "::1");
  EXPECT_EQ(HostPart("trainyard.svc:50051"), "trainyard.svc");
  EXPECT_EQ(LocalAddressToward("127.0.0.1"), "127.0.0.1");
  EXPECT_TRUE(IsLoopback("127.0.0.1"));
  EXPECT_FALSE(IsLoopback("10.231.0.1"));
}

TEST(PlacementTest, APickedPortIsFreeAndOutsideTheEphemeralRange) {
  // Outgoing connections take their local ports from the ephemeral range; a
  // rendezvous port drawn from it can be held by one on the rank 0's host.
  EXPECT_EQ(ListeningPortRange({32768, 60999}).low, 10000);
  EXPECT_EQ(ListeningPortRange({32768, 60999}).high, 32767);
  EXPECT_EQ(ListeningPortRange({10000, 20000}).low, 20001);
  EXPECT_EQ(ListeningPortRange({10000, 20000}).high, 65535);
  const PortRange none = ListeningPortRange({1024, 65535});
  EXPECT_LT(none.high, none.low);
  const PortRange ephemeral = EphemeralPortRange();
  for (int i = 0; i < 20; ++i) {
    const int port = PickFreePortOn("127.0.0.1");
    ASSERT_GT(port, 0);
    EXPECT_TRUE(port < ephemeral.low || port > ephemeral.high) << port;
    std::string error;
    const int fd = ListenOn("127.0.0.1", port, &error);
    EXPECT_GE(fd, 0) << error;
    if (fd >= 0) close(fd);
  }
}

TEST(PlacementTest, APickedPortIsNoneOfThoseHandedOutAlready) {
  // Ports given to attempts whose rank 0 listens on another host look free
  // here; the coordinator passes them to be avoided.
  const PortRange range = ListeningPortRange(EphemeralPortRange());
  ASSERT_LE(range.low, range.high);
  std::set<int> avoid;
  for (int p = range.low; p <= range.high; ++p) avoid.insert(p);
  avoid.erase(range.low + 7);
  for (int i = 0; i < 5; ++i) {
    const int port = PickFreePortOn("127.0.0.1", avoid);
    ASSERT_GT(port, 0);
    EXPECT_EQ(avoid.count(port), 0u) << port;
  }
}

TEST(JobSpecTest, InitFromRoundTripsAndNeedsAPath) {
  auto spec = ParseJobSpec(
      "name: f\nmodel: {kind: mlp, init_from: w/model.safetensors, init_from_strict: false, "
      "init_from_prefix: model.}\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->model.init_from, "w/model.safetensors");
  EXPECT_FALSE(spec->model.init_from_strict);
  EXPECT_EQ(spec->model.init_from_prefix, "model.");
  auto again = ParseJobSpec(JobSpecToJson(*spec));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(JobSpecToJson(*again), JobSpecToJson(*spec));
  auto bad = ParseJobSpec("name: f\nmodel: {kind: mlp, init_from_prefix: model.}\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'model.init_from_prefix'"), std::string::npos) << bad.status();
}

TEST(JobSpecTest, LlamaRoundTrips) {
  auto spec = ParseJobSpec(
      "name: l\nmodel: {kind: llama, init_from: hf/llama, config: hf/other.json, context: 256}\n"
      "data: {kind: tokens, path: corpus, token_dtype: uint32}\nactivation_checkpointing: true\n"
      "distributed_type: FSDP\nnum_processes: 2\n"
      "fsdp_config: {fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP, fsdp_transformer_layer_cls_to_wrap: "
      "Qwen2DecoderLayer}\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->model.kind, ModelKind::kLlama);
  EXPECT_EQ(LlamaConfigSource(spec->model), "hf/other.json");
  EXPECT_EQ(spec->model.context, 256);
  EXPECT_EQ(spec->data.token_dtype, TokenDtype::kUint32);
  EXPECT_TRUE(spec->activation_checkpointing);
  EXPECT_EQ(spec->fsdp.transformer_layer_cls_to_wrap, std::vector<std::string>{"LlamaDecoderLayer"});
  auto again = ParseJobSpec(JobSpecToJson(*spec));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(JobSpecToJson(*again), JobSpecToJson(*spec));
  // Without config, init_from's directory gives the architecture.
  auto hf = ParseJobSpec("name: l\nmodel: {kind: llama, init_from: hf/llama}\n");
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(LlamaConfigSource(hf->model), "hf/llama");
  // TRANSFORMER_BASED_WRAP without a layer: the decoder layer, as Accelerate infers it.
  auto inferred = ParseJobSpec(
      "name: l\nmodel: {kind: llama, init_from: hf}\ndistributed_type: FSDP\nnum_processes: 2\n"
      "fsdp_config: {fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP}\n");
  ASSERT_TRUE(inferred.ok()) << inferred.status();
  EXPECT_EQ(inferred->fsdp.transformer_layer_cls_to_wrap, std::vector<std::string>{"LlamaDecoderLayer"});
}

TEST(JobSpecTest, ImageFolderRoundTrips) {
  auto spec = ParseJobSpec(
      "name: f\nmodel: {kind: resnet, image_size: 64}\ndata: {kind: image_folder, path: imgs, resize: 72, "
      "crop_size: 64, random_crop: true, random_flip: true, mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225], "
      "eval_fraction: 0.1}\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->data.kind, DataKind::kImageFolder);
  EXPECT_EQ(spec->data.path, "imgs");
  EXPECT_EQ(spec->model.image_size, 64);
  EXPECT_EQ(spec->data.resize, 72);
  EXPECT_EQ(spec->data.crop_size, 64);
  EXPECT_TRUE(spec->data.random_crop);
  EXPECT_TRUE(spec->data.random_flip);
  EXPECT_EQ(spec->data.mean, (std::vector<double>{0.485, 0.456, 0.406}));
  EXPECT_EQ(spec->data.std, (std::vector<double>{0.229, 0.224, 0.225}));
  auto again = ParseJobSpec(JobSpecToJson(*spec));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(JobSpecToJson(*again), JobSpecToJson(*spec));
}

// resnet50 is torchvision's: image_size and num_classes are its fields, and
// FSDP wraps its Bottleneck blocks when the spec names no layer.
TEST(JobSpecTest, ResNet50RoundTripsAndWrapsItsBottlenecks) {
  auto spec = ParseJobSpec(
      "name: r\nmodel: {kind: resnet50, image_size: 64, num_classes: 100}\ndistributed_type: FSDP\n"
      "num_processes: 2\nfsdp_config: {fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP}\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->model.kind, ModelKind::kResNet50);
  EXPECT_EQ(spec->model.image_size, 64);
  EXPECT_EQ(spec->model.num_classes, 100);
  EXPECT_EQ(spec->fsdp.transformer_layer_cls_to_wrap, std::vector<std::string>{"Bottleneck"});
  const std::string json = JobSpecToJson(*spec);
  EXPECT_NE(json.find("\"resnet50\""), std::string::npos) << json;
  auto again = ParseJobSpec(json);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(JobSpecToJson(*again), json);
}

TEST(JobSpecTest, RejectsOversizedSpec) {
  SpecLimits limits;
  limits.max_spec_bytes = 100;
  auto spec = ParseJobSpec("name: x\n" + std::string(200, '#'), limits);
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(std::string(spec.status().message()).find("limit"), std::string::npos);
}

TEST(JobSpecTest, RespectsProcessLimit) {
  SpecLimits limits;
  limits.max_num_processes = 8;
  auto spec = ParseJobSpec("num_processes: 9\n", limits);
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(std::string(spec.status().message()).find("between 1 and 8"), std::string::npos);
}

// What a coordinator accepted under its own caps, a worker accepts: the
// worker's limits are the ceiling of every coordinator's, not the default.
TEST(JobSpecTest, AWorkerAcceptsWhatItsCoordinatorAccepted) {
  SpecLimits coordinator;
  coordinator.max_num_processes = 16384;  // trainyard-server --max-num-processes 16384
  const std::string text = "num_processes: 12000\nlauncher: external\n";
  auto accepted = ParseJobSpec(text, coordinator);
  ASSERT_TRUE(accepted.ok()) << accepted.status();
  EXPECT_FALSE(ParseJobSpec(JobSpecToJson(*accepted)).ok()) << "the default limit refuses 12,000 ranks";
  auto in_worker = ParseJobSpec(JobSpecToJson(*accepted), AcceptedSpecLimits());
  ASSERT_TRUE(in_worker.ok()) << in_worker.status();
  EXPECT_EQ(in_worker->num_processes, 12000);
}

// fused.cuda_graph: on is refused at submit wherever the step cannot be
// captured, naming the field and why; auto takes every spec (the worker
// then captures only where it applies).
TEST(JobSpecTest, ACapturedStepIsRefusedWhereItCannotApply) {
  const std::string gpu = "model: {kind: llama, config: /m}\ndevice: cuda\nmixed_precision: bf16\n";
  auto ok = ParseJobSpec(gpu + "fused: {cuda_graph: on}\n");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->fused.cuda_graph, StepCapture::kOn);
  ASSERT_TRUE(ParseJobSpec(gpu + "num_processes: 2\nfused: {cuda_graph: on}\n").ok());  // DDP over NCCL
  const std::pair<std::string, std::string> refused[] = {
      {"model: {kind: llama, config: /m}\n", "device is cpu"},
      {gpu + "num_processes: 2\nbackend: gloo\n", "backend gloo"},
      {gpu + "num_processes: 2\ndistributed_type: FSDP\n", "distributed_type FSDP"},
      {"model: {kind: llama, config: /m}\ndevice: cuda\nmixed_precision: fp16\n", "mixed_precision fp16"},
      {gpu + "optimizer: {kind: sgd}\n", "only fused AdamW"},
      {gpu + "fused: {optimizer: false}\n", "only fused AdamW"},
      {gpu + "num_processes: 2\nddp: {find_unused_parameters: true}\n", "ddp.find_unused_parameters"},
      {gpu + "num_processes: 2\nddp: {comm_hook: bf16}\n", "ddp.comm_hook"},
  };
  for (const auto& [text, why] : refused) {
    std::string spec = text;
    if (spec.find("fused:") == std::string::npos) {
      spec += "fused: {cuda_graph: on}\n";
    } else {
      spec.replace(spec.find("}\n", spec.find("fused:")), 2, ", cuda_graph: on}\n");
    }
    const std::string error = ErrorOf(spec);
    EXPECT_NE(error.find("fused.cuda_graph"), std::string::npos) << spec << "\n" << error;
    EXPECT_NE(error.find(why), std::string::npos) << spec << "\n" << error;
    // auto takes it: the step runs uncaptured.
    std::string automatic = spec;
    automatic.replace(automatic.find("cuda_graph: on"), 14, "cuda_graph: auto");
    EXPECT_TRUE(ParseJobSpec(automatic).ok()) << automatic;
  }
  EXPECT_NE(ErrorOf(gpu + "fused: {cuda_graph: always}\n").find("fused.cuda_graph"), std::string::npos);
}

// yaml-cpp keeps the first of two equal keys and ignores the second; a
// repeated key is refused instead, naming it and both lines (as kubectl).
TEST(JobSpecTest, ARepeatedKeyIsRefusedNamingItAndItsLines) {
  auto spec = ParseJobSpec("name: tiny\nmax_steps: 10\ndata: {batch_size: 8}\nmax_steps: 5000\n");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().message(), "spec: key 'max_steps' appears twice (lines 2 and 4); give it once");
  auto nested = ParseJobSpec("name: tiny\ndata:\n  batch_size: 8\n  batch_size: 16\n");
  ASSERT_FALSE(nested.ok());
  EXPECT_NE(nested.status().message().find("key 'data.batch_size' appears twice (lines 3 and 4)"), std::string::npos)
      << nested.status();
  auto json = ParseJobSpec(R"({"name": "a", "max_steps": 1, "max_steps": 2})");
  ASSERT_FALSE(json.ok());
  EXPECT_NE(json.status().message().find("key 'max_steps' appears twice"), std::string::npos) << json.status();
}

}  // namespace
}  // namespace trainyard
