// The llama model against transformers (tests/fixtures/llama_reference.py):
// the same weights (loaded through init_from) and batch give the same
// logits, loss and parameter gradients — in one process, with activation
// checkpointing, and sharded by FSDP on ranks as threads.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tests/test_paths.h"
#include "tests/test_util.h"
#include "tests/worker/dist_test_util.h"
#include "tests/worker/test_python.h"
#include "tests/worker/trainer_test_util.h"
#include "worker/base/safetensors.h"
#include "worker/checkpoint/checkpoint.h"
#include "worker/collectives/collectives.h"
#include "worker/collectives/process_group.h"
#include "worker/models/activation_checkpoint.h"
#include "worker/models/models.h"
#include "worker/parallel/fsdp.h"

namespace trainyard {
namespace {

struct Reference {
  std::string model_dir;
  std::map<std::string, at::Tensor> tensors;  // inputs, targets, logits, loss, grad.<name>
  const at::Tensor& at(const std::string& name) const { return tensors.at(name); }
};

// transformers' model of `variant` and its results on a batch of `batch`
// rows, made once per process.
const Reference& ReferenceOf(const std::string& variant, int batch = 2) {
  static TempDir* dir = new TempDir();
  static std::map<std::string, Reference> made;
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  const std::string key = variant + "_" + std::to_string(batch);
  if (auto it = made.find(key); it != made.end()) return it->second;
  Reference ref;
  ref.model_dir = dir->path() + "/" + key;
  const std::string file = dir->path() + "/" + key + ".safetensors";
  const std::string cmd = TestPython() + " " + TRAINYARD_SOURCE_DIR + "/tests/fixtures/llama_reference.py " + variant +
                          " " + ref.model_dir + " " + file + " --batch " + std::to_string(batch);
  if (std::system(cmd.c_str()) != 0) throw std::runtime_error("failed: " + cmd);
  const SafetensorsHeader header = ReadSafetensorsHeader(file);
  for (const auto& e : header.tensors) ref.tensors[e.spec.name] = ReadSafetensor(file, header, e.spec.name);
  return made.emplace(key, std::move(ref)).first->second;
}

JobSpec LlamaJob(const Reference& ref) {
  JobSpec spec;
  spec.model.kind = ModelKind::kLlama;
  spec.model.init_from = ref.model_dir;
  spec.model.context = ref.at("inputs").size(1);
  return spec;
}

// The model of `spec`, with the reference's weights loaded as init_from
// loads them (strict: no tensor missing or left over).
std::shared_ptr<Model> Loaded(const JobSpec& spec, bool checkpointing = false) {
  auto model = BuildModel(spec.model, 1);
  if (checkpointing) model->CheckpointActivations("LlamaDecoderLayer");
  TrainingState st;
  st.spec = &spec;
  st.model = model.get();
  LoadInitialWeights(st, spec.model.init_from, /*strict=*/true, "");
  return model;
}

at::Tensor LossOf(const at::Tensor& logits, const at::Tensor& targets) {
  return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}));
}

// Equal within rtol 1e-4, with an absolute floor of 1e-4 of the reference's
// largest magnitude (a gradient's small entries are sums of cancelling
// terms).
::testing::AssertionResult Close(const at::Tensor& got, const at::Tensor& want) {
  if (got.sizes() != want.sizes())
    return ::testing::AssertionFailure() << "shape " << got.sizes() << " vs " << want.sizes();
  const double scale = want.abs().max().item<double>();
  if (torch::allclose(got, want, 1e-4, 1e-4 * scale)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "max diff " << (got - want).abs().max().item<double>() << " (scale " << scale
                                       << ")";
}

class LlamaMatchesTransformers : public ::testing::TestWithParam<std::string> {};

TEST_P(LlamaMatchesTransformers, LogitsLossAndEveryGradient) {
  at::set_num_threads(1);
  const Reference& ref = ReferenceOf(GetParam());
  const JobSpec spec = LlamaJob(ref);
  auto model = Loaded(spec);
  const at::Tensor logits = model->forward(ref.at("inputs"));
  EXPECT_TRUE(Close(logits, ref.at("logits"))) << "logits";
  const at::Tensor loss = LossOf(logits, ref.at("targets"));
  EXPECT_NEAR(loss.item<double>(), ref.at("loss").item<double>(), 1e-4 * ref.at("loss").item<double>());
  loss.backward();
  size_t compared = 0;
  for (const auto& p : model->named_parameters()) {
    const std::string name = "grad." + p.key();
    ASSERT_TRUE(ref.tensors.count(name)) << p.key() << " is not a parameter of transformers' model";
    ASSERT_TRUE(p.value().grad().defined()) << p.key() << " got no gradient";
    EXPECT_TRUE(Close(p.value().grad(), ref.at(name))) << p.key();
    ++compared;
  }
  size_t reference_grads = 0;
  for (const auto& [name, t] : ref.tensors) reference_grads += name.rfind("grad.", 0) == 0;
  EXPECT_EQ(compared, reference_grads) << "parameters of transformers' model missing here";
}

INSTANTIATE_TEST_SUITE_P(Variants, LlamaMatchesTransformers,
                         ::testing::Values("gqa", "tied", "llama3", "qwen2", "mistral", "biases"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// Recomputing each decoder layer in backward changes no bit of the loss or
// of any gradient on CPU, and keeps fewer activations.
TEST(LlamaActivationCheckpointing, BitwiseEqualGradients) {
  at::set_num_threads(1);
  const Reference& ref = ReferenceOf("gqa");
  const JobSpec spec = LlamaJob(ref);
  std::map<std::string, at::Tensor> plain;
  at::Tensor plain_loss;
  for (const bool checkpointing : {false, true}) {
    auto model = Loaded(spec, checkpointing);
    const at::Tensor loss = LossOf(model->forward(ref.at("inputs")), ref.at("targets"));
    loss.backward();
    if (!checkpointing) {
      plain_loss = loss.detach();
      for (const auto& p : model->named_parameters()) plain[p.key()] = p.value().grad().clone();
      continue;
    }
    EXPECT_TRUE(torch::equal(loss.detach(), plain_loss));
    for (const auto& p : model->named_parameters()) {
      ASSERT_TRUE(p.value().grad().defined()) << p.key();
      EXPECT_TRUE(torch::equal(p.value().grad(), plain.at(p.key()))) << p.key();
    }
  }
}

// Checkpointing does recompute: the layer's forward runs again in backward,
// and the graph keeps none of the layer's own operations.
TEST(LlamaActivationCheckpointing, TheLayerRunsAgainInBackward) {
  int calls = 0;
  const at::Tensor w = torch::randn({4, 4}, torch::requires_grad());
  const LayerForward layer = [&](const at::Tensor& x) {
    ++calls;
    return torch::tanh(torch::matmul(x, w));
  };
  const at::Tensor x = torch::randn({3, 4}, torch::requires_grad());
  const at::Tensor y = Checkpointed(layer)(x);
  EXPECT_EQ(calls, 1);
  // The node leads straight to the input: no matmul or tanh kept between.
  ASSERT_EQ(y.grad_fn()->next_edges().size(), 1u);
  EXPECT_EQ(y.grad_fn()->next_edges()[0].function, torch::autograd::impl::grad_accumulator(x));
  y.sum().backward();
  EXPECT_EQ(calls, 2);
  // The gradients are those of the layer run plainly.
  const at::Tensor w2 = w.detach().clone().requires_grad_(true), x2 = x.detach().clone().requires_grad_(true);
  torch::tanh(torch::matmul(x2, w2)).sum().backward();
  EXPECT_TRUE(torch::equal(w.grad(), w2.grad()));
  EXPECT_TRUE(torch::equal(x.grad(), x2.grad()));
}

// Training with checkpointing gives the weights of training without it,
// bit for bit, whether DDP's reducer or FSDP collects the gradients (the
// reducer's hooks fire inside the recomputing backward).
TEST(LlamaActivationCheckpointing, DdpAndFsdpTrainToTheSameWeights) {
  const Reference& ref = ReferenceOf("gqa");
  for (const DistributedType type : {DistributedType::kDdp, DistributedType::kFsdp}) {
    std::vector<at::Tensor> weights[2];
    for (const bool checkpointing : {false, true}) {
      JobSpec spec = LlamaJob(ref);
      spec.num_processes = 2;
      spec.distributed_type = type;
      spec.fsdp.auto_wrap_policy = WrapPolicy::kTransformerBased;
      spec.fsdp.transformer_layer_cls_to_wrap = {"LlamaDecoderLayer"};
      spec.activation_checkpointing = checkpointing;
      spec.data.batch_size = 2;
      spec.optimizer.kind = OptimizerKind::kAdamW;
      spec.checkpoint.save_final = false;
      RunTrainers(spec, 2, [&](int r, Trainer& t) {
        for (int i = 0; i < 3; ++i) t.Step();
        std::vector<at::Tensor> full = t.fsdp() != nullptr ? t.fsdp()->FullParameters() : t.model().parameters();
        if (r == 0) {
          for (const at::Tensor& p : full) weights[checkpointing].push_back(p.detach().clone());
        }
      });
    }
    ASSERT_EQ(weights[0].size(), weights[1].size());
    for (size_t i = 0; i < weights[0].size(); ++i) {
      EXPECT_TRUE(torch::equal(weights[0][i], weights[1][i]))
          << DistributedTypeName(type) << " parameter " << i << " max diff "
          << (weights[0][i] - weights[1][i]).abs().max().item<double>();
    }
  }
}

// The same gradients with the model sharded: one SGD step of lr 1 moves
// every parameter by minus its gradient, so the gathered parameters after
// it are the initial ones minus transformers' gradient on the whole batch
// (each rank takes its rows; FSDP averages).
struct ShardedCase {
  ShardingStrategy strategy;
  int world;
  bool checkpointing;
  const char* name;
};

class LlamaUnderFsdp : public ::testing::TestWithParam<ShardedCase> {};

TEST_P(LlamaUnderFsdp, OneStepMatchesTransformersGradients) {
  at::set_num_threads(1);
  const ShardedCase c = GetParam();
  const Reference& ref = ReferenceOf("gqa", 4);
  const JobSpec spec = LlamaJob(ref);
  const int64_t rows = 4 / c.world;
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::vector<at::Tensor>> after(c.world);
  std::vector<std::string> names;
  std::vector<size_t> units(c.world);
  ASSERT_TRUE(RunThreads(c.world, [&](int r) {
    auto world_group = [&] {
      return MakeCollectives(
          MakeProcessGroup(Backend::kGloo, store, r, c.world, "127.0.0.1", std::chrono::seconds(60)));
    };
    std::unique_ptr<Collectives> shard, replicate;
    if (c.strategy == ShardingStrategy::kHybridShard) {
      HybridGroups h = MakeHybridGroups(store, Backend::kGloo, r, c.world, 2, "127.0.0.1", std::chrono::seconds(60));
      shard = std::move(h.shard);
      replicate = std::move(h.replicate);
    } else {
      shard = world_group();
    }
    auto model = BuildModel(spec.model, 1);
    if (c.checkpointing) model->CheckpointActivations("LlamaDecoderLayer");
    if (r == 0) {
      for (const auto& p : model->named_parameters()) names.push_back(p.key());
    }
    FsdpOptions o;
    o.strategy = c.strategy;
    o.wrap_policy = WrapPolicy::kTransformerBased;
    o.layer_types = {"LlamaDecoderLayer"};
    FullyShardedModel fsdp(model, o, shard.get(), replicate.get(), c.world);
    TrainingState st;
    st.spec = &spec;
    st.model = model.get();
    st.fsdp = &fsdp;
    st.rank = r;
    st.world_size = c.world;
    LoadInitialWeights(st, spec.model.init_from, /*strict=*/true, "");
    torch::optim::SGD sgd(fsdp.ShardParameters(), torch::optim::SGDOptions(1.0));
    sgd.zero_grad();
    const at::Tensor logits = fsdp.Forward(ref.at("inputs").narrow(0, r * rows, rows));
    const at::Tensor loss = LossOf(logits, ref.at("targets").narrow(0, r * rows, rows));
    fsdp.PrepareBackward();
    loss.backward();
    fsdp.FinishBackward();
    sgd.step();
    after[r] = fsdp.FullParameters();
    units[r] = fsdp.units().size();
  }));
  EXPECT_EQ(units[0], 3u);  // the root (embedding, norm, head) and two decoder layers
  // The initial weights, read back with the venv's safetensors' layout.
  const std::string weights = ref.model_dir + "/model.safetensors";
  const SafetensorsHeader header = ReadSafetensorsHeader(weights);
  for (int r = 0; r < c.world; ++r) {
    ASSERT_EQ(after[r].size(), names.size());
    for (size_t i = 0; i < names.size(); ++i) {
      const at::Tensor init = ReadSafetensor(weights, header, names[i]);
      const at::Tensor moved = init - after[r][i];
      EXPECT_TRUE(Close(moved, ref.at("grad." + names[i]))) << c.name << " rank " << r << " " << names[i];
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Strategies, LlamaUnderFsdp,
                         ::testing::Values(ShardedCase{ShardingStrategy::kFullShard, 2, false, "FULL_SHARD_2"},
                                           ShardedCase{ShardingStrategy::kHybridShard, 4, false, "HYBRID_SHARD_2x2"},
                                           ShardedCase{ShardingStrategy::kFullShard, 2, true,
                                                       "FULL_SHARD_2_activation_checkpointing"}),
                         [](const ::testing::TestParamInfo<ShardedCase>& info) { return info.param.name; });

}  // namespace
}  // namespace trainyard
