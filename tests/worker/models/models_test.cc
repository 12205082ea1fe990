// The model kinds (mlp, cnn, gpt, resnet, torchscript) training under DDP
// over real Gloo (ranks as threads), their initial weights from PyTorch's
// files (model.init_from), and TorchScript modules from the venv's torch.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "common/model_layers.h"
#include "tests/test_paths.h"
#include "tests/test_util.h"
#include "tests/worker/test_python.h"
#include "tests/worker/trainer_test_util.h"
#include "worker/base/safetensors.h"
#include "worker/models/models.h"
#include "worker/parallel/fsdp.h"

namespace trainyard {
namespace {

// Every model trains (loss falls) under DDP at 2 ranks, with gradients,
// buffers and the control word through shared memory (the default on one
// host) and, for the ResNet's BatchNorm buffers, through Gloo too.
TEST(Models, EachTrainsUnderDdp) {
  const std::vector<std::pair<ModelKind, IntraHostTransport>> runs = {
      {ModelKind::kMlp, IntraHostTransport::kAuto},
      {ModelKind::kCnn, IntraHostTransport::kAuto},
      {ModelKind::kResNet, IntraHostTransport::kAuto},
      {ModelKind::kResNet, IntraHostTransport::kProcessGroup},
      {ModelKind::kGpt, IntraHostTransport::kAuto}};
  for (const auto& [kind, transport] : runs) {
    JobSpec spec;
    spec.model.kind = kind;
    spec.model.channels = 8;
    spec.model.layers = 2;
    spec.model.width = 32;
    spec.model.context = 16;
    spec.model.vocab = 64;
    spec.data.batch_size = kind == ModelKind::kGpt ? 4 : 16;
    spec.data.num_samples = 64;  // a small set each model can fit
    spec.optimizer.lr = 3e-3;
    spec.max_steps = kind == ModelKind::kResNet ? 25 : 40;
    spec.ddp.intra_host_transport = transport;
    Lrs m;
    std::vector<std::vector<at::Tensor>> buffers(2);
    RunTrainers(
        spec, 2,
        [&](int r, Trainer& t) {
          t.Run();
          for (const at::Tensor& b : t.model().buffers()) buffers[r].push_back(b.clone());
        },
        &m);
    const auto [first, last] = FirstLast(m.loss);
    EXPECT_LT(last, 0.8 * first) << ModelKindName(kind) << " " << first << " -> " << last;
    // broadcast_buffers: BatchNorm statistics are rank 0's before each
    // forward, so after the last step they differ by one update at most;
    // the counters are equal.
    ASSERT_EQ(buffers[0].size(), buffers[1].size());
    if (kind == ModelKind::kResNet) {
      EXPECT_FALSE(buffers[0].empty());
      for (size_t i = 0; i < buffers[0].size(); ++i) {
        if (buffers[0][i].scalar_type() == at::kLong) EXPECT_TRUE(torch::equal(buffers[0][i], buffers[1][i]));
      }
    }
  }
}

// Initial weights made by PyTorch (tests/fixtures/init_weights.py) load through
// model.init_from: the loss of the loaded model on a fixed batch equals
// PyTorch's loss of the same module on the same batch — for a plain file, a
// Hugging Face sharded directory under a "model." prefix (one process, DDP
// and FSDP FULL_SHARD on 2 ranks, each rank reading its shard), and a
// TorchScript module given other weights than its own.
class InitFrom : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    const std::string cmd = TestPython() + " " + TRAINYARD_SOURCE_DIR + "/tests/fixtures/init_weights.py " +
                            dir_->path() + " 2> " + dir_->path() + "/python.log";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  static void TearDownTestSuite() { delete dir_; }

  static double Expected(const std::string& file) {
    std::ifstream in(dir_->path() + "/" + file);
    double v = 0;
    in >> v;
    return v;
  }
  // The loss of the trainer's model on a fixed batch (collective under
  // FSDP); language models' logits [B, T, V] against targets [B, T].
  static double Loss(Trainer& t, const std::string& batch = "batch.safetensors") {
    torch::NoGradGuard no_grad;
    const std::string path = dir_->path() + "/" + batch;
    const SafetensorsHeader h = ReadSafetensorsHeader(path);
    const at::Tensor inputs = ReadSafetensor(path, h, "inputs"), targets = ReadSafetensor(path, h, "targets");
    at::Tensor out = t.fsdp() ? t.fsdp()->Forward(inputs) : t.model().forward(inputs);
    if (t.fsdp()) t.fsdp()->FinishBackward();
    return torch::nn::functional::cross_entropy(out.reshape({-1, out.size(-1)}), targets.reshape({-1})).item<double>();
  }
  static JobSpec Mlp(const std::string& init_from, const std::string& prefix = "") {
    JobSpec spec;
    spec.model.hidden = {32, 16};
    spec.model.init_from = init_from;
    spec.model.init_from_prefix = prefix;
    spec.max_steps = 1;
    spec.ddp.intra_host_transport = IntraHostTransport::kProcessGroup;
    return spec;
  }
  static TempDir* dir_;
};
TempDir* InitFrom::dir_ = nullptr;

TEST_F(InitFrom, TheFirstLossIsPyTorchsOnTheSameBatch) {
  const double want = Expected("loss.txt");
  struct Case {
    std::string name;
    JobSpec spec;
    int world;
  };
  std::vector<Case> cases = {{"file", Mlp(dir_->path() + "/mlp.safetensors"), 1},
                             {"sharded dir, prefix", Mlp(dir_->path() + "/prefixed", "model."), 1},
                             {"DDP", Mlp(dir_->path() + "/mlp.safetensors"), 2}};
  JobSpec fsdp = Mlp(dir_->path() + "/prefixed", "model.");
  fsdp.distributed_type = DistributedType::kFsdp;
  fsdp.fsdp.sharding_strategy = ShardingStrategy::kFullShard;
  fsdp.fsdp.auto_wrap_policy = WrapPolicy::kTransformerBased;
  fsdp.fsdp.transformer_layer_cls_to_wrap = {"Linear"};
  cases.push_back({"FSDP FULL_SHARD", fsdp, 2});
  for (Case& c : cases) {
    c.spec.num_processes = c.world;
    if (c.world == 1) c.spec.distributed_type = DistributedType::kNo;
    std::vector<double> loss(c.world);
    std::vector<int64_t> held(c.world);
    RunTrainers(c.spec, c.world, [&](int r, Trainer& t) {
      for (const at::Tensor& p : t.fsdp() ? t.fsdp()->ShardParameters() : t.model().parameters()) {
        held[r] += p.numel();
      }
      loss[r] = Loss(t);
    });
    for (int r = 0; r < c.world; ++r) EXPECT_NEAR(loss[r], want, 1e-5 * std::abs(want)) << c.name << " rank " << r;
    if (c.name == "FSDP FULL_SHARD") EXPECT_LT(held[0], 784 * 32) << "each rank holds a shard";
  }
  // Random initialization is not it: the check can fail.
  JobSpec fresh = Mlp("");
  fresh.distributed_type = DistributedType::kNo;
  RunTrainers(fresh, 1, [&](int, Trainer& t) { EXPECT_GT(std::abs(Loss(t) - want), 1e-3); });
}

// The worker's cnn and gpt against PyTorch reimplementations with the same
// state-dict names (tests/fixtures/init_weights.py), gpt also under FSDP
// FULL_SHARD on 2 ranks with each Block its own unit.
TEST_F(InitFrom, CnnAndGptGiveTheLossOfPyTorchsReimplementations) {
  JobSpec cnn;
  cnn.model.kind = ModelKind::kCnn;
  cnn.model.init_from = dir_->path() + "/cnn.safetensors";
  JobSpec gpt;
  gpt.model.kind = ModelKind::kGpt;
  gpt.model.layers = 2;
  gpt.model.width = 32;
  gpt.model.heads = 4;
  gpt.model.context = 16;
  gpt.model.vocab = 64;
  gpt.model.init_from = dir_->path() + "/gpt.safetensors";
  JobSpec gpt_fsdp = gpt;
  gpt_fsdp.distributed_type = DistributedType::kFsdp;
  gpt_fsdp.fsdp.sharding_strategy = ShardingStrategy::kFullShard;
  gpt_fsdp.fsdp.auto_wrap_policy = WrapPolicy::kTransformerBased;
  gpt_fsdp.fsdp.transformer_layer_cls_to_wrap = {"Block"};
  struct Case {
    const char* name;
    JobSpec spec;
    int world;
  };
  for (Case c : {Case{"cnn", cnn, 1}, Case{"gpt", gpt, 1}, Case{"gpt FSDP", gpt_fsdp, 2}}) {
    c.spec.max_steps = 1;
    c.spec.num_processes = c.world;
    c.spec.ddp.intra_host_transport = IntraHostTransport::kProcessGroup;
    if (c.world == 1) c.spec.distributed_type = DistributedType::kNo;
    const std::string model = c.spec.model.kind == ModelKind::kCnn ? "cnn" : "gpt";
    const double want = Expected(model + "_loss.txt");
    std::vector<double> loss(c.world);
    RunTrainers(c.spec, c.world, [&](int r, Trainer& t) { loss[r] = Loss(t, model + "_batch.safetensors"); });
    for (int r = 0; r < c.world; ++r) EXPECT_NEAR(loss[r], want, 1e-5 * std::abs(want)) << c.name << " rank " << r;
    // Its own initialization gives another loss: the check can fail.
    c.spec.model.init_from.clear();
    RunTrainers(c.spec, c.world, [&](int r, Trainer& t) {
      const double own = Loss(t, model + "_batch.safetensors");
      if (r == 0) EXPECT_GT(std::abs(own - want), 1e-3) << c.name;
    });
  }
}

TEST_F(InitFrom, ATorchScriptModuleTakesOtherWeights) {
  JobSpec spec;
  spec.model.kind = ModelKind::kTorchScript;
  spec.model.path = dir_->path() + "/torchscript.pt";
  spec.model.init_from = dir_->path() + "/torchscript.safetensors";
  spec.max_steps = 1;
  spec.distributed_type = DistributedType::kNo;
  const double want = Expected("torchscript_loss.txt");
  ASSERT_GT(want, 0);
  const std::string file = spec.model.init_from;
  const SafetensorsHeader h = ReadSafetensorsHeader(file);
  ASSERT_EQ(h.tensors.size(), 4u);  // fc1 and fc2, weight and bias
  RunTrainers(spec, 1, [&](int, Trainer& t) {
    // Every parameter is the file's tensor of its name, bit for bit.
    const auto params = t.model().named_parameters();
    EXPECT_EQ(params.size(), h.tensors.size());
    for (const SafetensorsEntry& e : h.tensors) {
      const at::Tensor* p = params.find(e.spec.name);
      ASSERT_NE(p, nullptr) << e.spec.name;
      EXPECT_TRUE(torch::equal(*p, ReadSafetensor(file, h, e.spec.name))) << e.spec.name;
    }
    EXPECT_NEAR(Loss(t), want, 1e-5 * want);
  });
  // The module's own weights (those saved in the .pt) give another loss:
  // the check above can fail.
  spec.model.init_from.clear();
  RunTrainers(spec, 1, [&](int, Trainer& t) { EXPECT_GT(std::abs(Loss(t) - want), 1e-3); });
}

TEST_F(InitFrom, EachMismatchIsNamed) {
  auto error = [&](JobSpec spec) -> std::string {
    spec.distributed_type = DistributedType::kNo;
    try {
      Trainer t(spec, 0, 1, DistContext{}, nullptr, nullptr);
    } catch (const std::exception& e) {
      return e.what();
    }
    return "";
  };
  // Missing and unexpected: the file's names carry a prefix the spec does not remove.
  const std::string prefixed = error(Mlp(dir_->path() + "/prefixed"));
  EXPECT_NE(prefixed.find("missing: fc0.weight, fc0.bias"), std::string::npos) << prefixed;
  EXPECT_NE(prefixed.find("unexpected: model.fc0.bias"), std::string::npos) << prefixed;
  EXPECT_NE(prefixed.find("init_from_prefix"), std::string::npos) << prefixed;
  // Wrong shape: another hidden width.
  JobSpec wide = Mlp(dir_->path() + "/mlp.safetensors");
  wide.model.hidden = {48, 16};
  const std::string shape = error(wide);
  EXPECT_NE(shape.find("fc0.weight is F32[32, 784] in the file, F32[48, 784] in the model"), std::string::npos)
      << shape;
  // Another precision: the same tensors in bf16 load, converted (as a
  // Hugging Face checkpoint shared in bf16); integers do not.
  auto rewrite = [&](at::ScalarType dtype, const std::string& name) {
    const std::string src = dir_->path() + "/mlp.safetensors", dst = dir_->path() + "/" + name;
    const SafetensorsHeader h = ReadSafetensorsHeader(src);
    std::vector<TensorSpec> specs;
    std::vector<at::Tensor> data;
    for (const SafetensorsEntry& e : h.tensors) {
      specs.push_back({e.spec.name, dtype, e.spec.shape});
      data.push_back(ReadSafetensor(src, h, e.spec.name).to(dtype));
    }
    WriteSafetensors(dst, specs, [&](size_t i) { return data[i]; });
    return dst;
  };
  {
    const std::string bf16 = rewrite(at::kBFloat16, "mlp-bf16.safetensors");
    JobSpec spec = Mlp(bf16);
    Trainer t(spec, 0, 1, DistContext{}, nullptr, nullptr);
    const SafetensorsHeader h = ReadSafetensorsHeader(bf16);
    for (const auto& p : t.model().named_parameters()) {
      EXPECT_TRUE(torch::equal(p.value(), ReadSafetensor(bf16, h, p.key()).to(at::kFloat))) << p.key();
    }
    const std::string integers = error(Mlp(rewrite(at::kInt, "mlp-i32.safetensors")));
    EXPECT_NE(integers.find("fc0.bias is I32[32] in the file, F32[32] in the model"), std::string::npos) << integers;
  }
  // Not there at all.
  const std::string none = error(Mlp(dir_->path() + "/nothing.safetensors"));
  EXPECT_NE(none.find("nothing.safetensors: no such file or directory"), std::string::npos) << none;
  // Not strict: missing and unexpected are skipped (here: everything).
  JobSpec lax = Mlp(dir_->path() + "/prefixed");
  lax.model.init_from_strict = false;
  EXPECT_EQ(error(lax), "");
}

// The layer types a spec may name in fsdp_transformer_layer_cls_to_wrap
// (checked at submit from common/model_layers.h) are exactly those the
// worker's models are built of, in order of first appearance.
TEST(Models, LayerTypesAreTheSpecTable) {
  for (ModelKind kind : {ModelKind::kMlp, ModelKind::kCnn, ModelKind::kGpt, ModelKind::kResNet}) {
    ModelSpec m;
    m.kind = kind;
    m.hidden = {8, 8};
    m.channels = 4;
    m.layers = 2;
    m.width = 16;
    m.context = 8;
    m.vocab = 32;
    std::vector<std::string> types;
    for (const Layer& layer : BuildModel(m, 1)->layers()) {
      if (std::find(types.begin(), types.end(), layer.type) == types.end()) types.push_back(layer.type);
    }
    EXPECT_EQ(types, ModelLayerTypes(kind)) << ModelKindName(kind);
  }
}

// A module scripted and saved by the venv's torch (the release the worker
// is built against) trains from C++ under DDP, and the FULL checkpoint's
// weights load back into it in Python: a plain MLP, and an attention model
// (F.scaled_dot_product_attention, LayerNorm, GELU, a buffer).
class TorchScriptModels : public ::testing::TestWithParam<std::string> {};

TEST_P(TorchScriptModels, TrainAndTheirWeightsLoadBackInPython) {
  TempDir dir;
  const std::string pt = dir.path() + "/net.pt";
  const std::string script = std::string(TRAINYARD_SOURCE_DIR) + "/examples/" + GetParam();
  ASSERT_EQ(std::system((TestPython() + " " + script + " " + pt).c_str()), 0);
  JobSpec spec;
  spec.model.kind = ModelKind::kTorchScript;
  spec.model.path = pt;
  for (const Layer& layer : BuildModel(spec.model, 1)->layers()) {
    EXPECT_EQ(std::vector<std::string>{layer.type}, ModelLayerTypes(ModelKind::kTorchScript));
  }
  spec.data.batch_size = 16;
  spec.data.num_samples = 64;
  spec.optimizer.lr = 3e-3;
  spec.max_steps = 40;
  spec.ddp.intra_host_transport = IntraHostTransport::kProcessGroup;
  spec.checkpoint.project_dir = dir.path() + "/project";
  spec.checkpoint.save_final = true;
  Lrs m;
  std::string final_path;
  // The trained module's output on a fixed input, from C++.
  const std::string outputs = dir.path() + "/outputs.safetensors";
  RunTrainers(
      spec, 2,
      [&](int r, Trainer& t) {
        TrainResult res = t.Run();
        if (r != 0) return;
        final_path = res.final_checkpoint;
        torch::NoGradGuard no_grad;
        t.model().eval();
        const at::Tensor out = t.model().forward(torch::linspace(-1, 1, 3 * 784).reshape({3, 784}));
        WriteSafetensors(outputs, {{"out", at::kFloat, out.sizes().vec()}}, [&](size_t) { return out.contiguous(); });
      },
      &m);
  const auto [first, last] = FirstLast(m.loss);
  EXPECT_LT(last, 0.8 * first);
  ASSERT_FALSE(final_path.empty());
  // Python loads the checkpoint into the scripted module (strict: every
  // parameter and buffer by name) and computes the same output (fp32; the
  // same kernels, so far below the 1e-5 allowed).
  const std::string check = TestPython() +
                            " -c \"import sys, torch; from safetensors.torch import load_file; "
                            "m = torch.jit.load(sys.argv[1]); sd = load_file(sys.argv[2] + '/model.safetensors'); "
                            "m.load_state_dict(sd, strict=True); m.eval(); "
                            "assert all(torch.equal(m.state_dict()[k], v) for k, v in sd.items()); "
                            "want = load_file(sys.argv[3])['out']; "
                            "got = m(torch.linspace(-1, 1, 3 * 784).reshape(3, 784)); "
                            "assert got.shape == (3, 10), got.shape; "
                            "torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5); "
                            "print('loaded', len(sd), 'tensors')\" " +
                            pt + " " + final_path + " " + outputs;
  EXPECT_EQ(std::system(check.c_str()), 0) << check;
}

INSTANTIATE_TEST_SUITE_P(Examples, TorchScriptModels, ::testing::Values("export_torchscript.py", "export_attention.py"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param == "export_torchscript.py" ? std::string("Mlp") : std::string("Attention");
                         });

}  // namespace
}  // namespace trainyard
