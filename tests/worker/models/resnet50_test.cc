// The resnet50 model against torchvision's resnet50
// (tests/fixtures/resnet50_reference.py): given torchvision's weights through
// model.init_from, the same batch gives the same logits (eval and train
// mode), loss, parameter gradients and updated running statistics in
// float64; and the checkpoint a 2-rank DDP job saves loads into torchvision
// with load_state_dict(strict=True) and computes the same output there.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <string>

#include "common/model_layers.h"
#include "tests/test_paths.h"
#include "tests/test_util.h"
#include "tests/worker/test_python.h"
#include "tests/worker/trainer_test_util.h"
#include "worker/base/safetensors.h"
#include "worker/checkpoint/checkpoint.h"
#include "worker/models/models.h"

namespace trainyard {
namespace {

std::string ResNet50Reference() {
  return TestPython() + " " + TRAINYARD_SOURCE_DIR + "/tests/fixtures/resnet50_reference.py";
}

std::map<std::string, at::Tensor> ReadTensors(const std::string& file) {
  std::map<std::string, at::Tensor> out;
  const SafetensorsHeader header = ReadSafetensorsHeader(file);
  for (const auto& e : header.tensors) out[e.spec.name] = ReadSafetensor(file, header, e.spec.name);
  return out;
}

// Equal in float64 within 1e-10 of the reference's largest magnitude: both
// sides run ATen's float64 kernels on the same numbers, so only the order
// of summation may differ (a wrong layer is off by far more).
::testing::AssertionResult Close64(const at::Tensor& got, const at::Tensor& want) {
  if (got.sizes() != want.sizes()) {
    return ::testing::AssertionFailure() << "shape " << got.sizes() << " vs " << want.sizes();
  }
  if (got.scalar_type() != at::kDouble) return ::testing::AssertionFailure() << "dtype " << got.scalar_type();
  const double scale = std::max(want.abs().max().item<double>(), 1e-30);
  const double diff = (got - want).abs().max().item<double>();
  if (diff <= 1e-10 * scale) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "max diff " << diff << " (scale " << scale << ")";
}

TEST(ResNet50, MatchesTorchvisionInFloat64) {
  at::set_num_threads(1);
  TempDir dir;
  const std::string weights = dir.path() + "/resnet50.safetensors", ref_file = dir.path() + "/ref.safetensors";
  const std::string cmd =
      ResNet50Reference() + " make " + weights + " " + ref_file + " --image-size 32 --batch 2 --classes 10";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const std::map<std::string, at::Tensor> ref = ReadTensors(ref_file);

  JobSpec spec;
  spec.model.kind = ModelKind::kResNet50;
  spec.model.image_size = 32;
  spec.model.num_classes = 10;
  auto model = BuildModel(spec.model, 1);
  // torchvision's file loads strictly: every parameter and buffer by its name.
  TrainingState st;
  st.spec = &spec;
  st.model = model.get();
  LoadInitialWeights(st, weights, /*strict=*/true, "");
  model->to(at::kDouble);
  EXPECT_EQ(model->named_parameters().size(), 161u);  // torchvision's resnet50
  EXPECT_EQ(model->named_buffers().size(), 159u);     // 53 BatchNorms x 3

  const at::Tensor inputs = ref.at("inputs");
  model->eval();
  {
    torch::NoGradGuard no_grad;
    EXPECT_TRUE(Close64(model->forward(inputs), ref.at("eval_logits"))) << "eval-mode logits";
  }
  model->train();
  const at::Tensor logits = model->forward(inputs);
  EXPECT_TRUE(Close64(logits, ref.at("train_logits"))) << "train-mode logits";
  const at::Tensor loss = torch::nn::functional::cross_entropy(logits, ref.at("targets"));
  EXPECT_TRUE(Close64(loss.reshape({1}), ref.at("loss"))) << "loss";
  loss.backward();
  size_t compared = 0;
  for (const auto& p : model->named_parameters()) {
    ASSERT_TRUE(ref.count("grad." + p.key())) << p.key() << " is not a parameter of torchvision's resnet50";
    ASSERT_TRUE(p.value().grad().defined()) << p.key() << " got no gradient";
    EXPECT_TRUE(Close64(p.value().grad(), ref.at("grad." + p.key()))) << p.key();
    ++compared;
  }
  for (const auto& b : model->named_buffers()) {
    ASSERT_TRUE(ref.count("buffer." + b.key())) << b.key() << " is not a buffer of torchvision's resnet50";
    const at::Tensor& want = ref.at("buffer." + b.key());
    if (want.scalar_type() == at::kLong) {
      EXPECT_TRUE(torch::equal(b.value(), want)) << b.key() << ": " << b.value() << " vs " << want;
    } else {
      EXPECT_TRUE(Close64(b.value(), want)) << b.key();
    }
    ++compared;
  }
  size_t reference = 0;
  for (const auto& [name, t] : ref) reference += name.rfind("grad.", 0) == 0 || name.rfind("buffer.", 0) == 0;
  EXPECT_EQ(compared, reference) << "tensors of torchvision's resnet50 missing here";
}

// Stages as the spec's table names them: a stem, 16 Bottlenecks, a head.
TEST(ResNet50, LayersAreTheStemSixteenBottlenecksAndTheHead) {
  ModelSpec m;
  m.kind = ModelKind::kResNet50;
  auto model = BuildModel(m, 1);
  std::vector<std::string> types;
  int bottlenecks = 0;
  int64_t params = 0;
  for (const Layer& layer : model->layers()) {
    if (std::find(types.begin(), types.end(), layer.type) == types.end()) types.push_back(layer.type);
    bottlenecks += layer.type == "Bottleneck";
    for (const at::Tensor& p : layer.module->parameters()) params += p.numel();
  }
  EXPECT_EQ(types, ModelLayerTypes(ModelKind::kResNet50));
  EXPECT_EQ(bottlenecks, 16);
  int64_t all = 0;
  for (const at::Tensor& p : model->parameters()) all += p.numel();
  EXPECT_EQ(params, all) << "every parameter belongs to exactly one stage";
  EXPECT_EQ(all, 23528522);  // torchvision's resnet50(num_classes=10)
}

// A 2-rank DDP job trains 3 steps and saves its FULL checkpoint; torchvision
// loads it strictly (every BatchNorm counted 3 batches) and computes the
// output rank 0 computed on the same inputs.
TEST(ResNet50, ItsCheckpointLoadsIntoTorchvision) {
  TempDir dir;
  JobSpec spec;
  spec.model.kind = ModelKind::kResNet50;
  spec.model.image_size = 32;
  spec.model.num_classes = 10;
  spec.num_processes = 2;
  spec.data.batch_size = 2;
  spec.data.num_samples = 32;
  spec.optimizer.lr = 1e-2;
  spec.max_steps = 3;
  spec.checkpoint.project_dir = dir.path() + "/project";
  spec.checkpoint.save_final = true;
  std::string final_path;
  const std::string outputs = dir.path() + "/outputs.safetensors";
  RunTrainers(spec, 2, [&](int r, Trainer& t) {
    TrainResult res = t.Run();
    if (r != 0) return;
    final_path = res.final_checkpoint;
    torch::NoGradGuard no_grad;
    t.model().eval();
    const at::Tensor in = torch::linspace(-1, 1, 2 * 3 * 32 * 32).reshape({2, 3, 32, 32});
    const at::Tensor out = t.model().forward(in);
    WriteSafetensors(outputs, {{"inputs", at::kFloat, in.sizes().vec()}, {"out", at::kFloat, out.sizes().vec()}},
                     [&](size_t i) { return i == 0 ? in.contiguous() : out.contiguous(); });
  });
  ASSERT_FALSE(final_path.empty());
  const std::string cmd = ResNet50Reference() + " load " + final_path + " " + outputs + " --classes 10 --steps 3";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

}  // namespace
}  // namespace trainyard
