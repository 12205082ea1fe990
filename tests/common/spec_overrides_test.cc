#include "common/spec/spec_overrides.h"

#include <gtest/gtest.h>

#include "common/spec/job_spec.h"

namespace trainyard {
namespace {

const char* kSpec = R"(# a comment
name: mnist-ddp
model: {kind: mlp, hidden: [512, 256]}
data: {kind: synthetic, batch_size: 64, num_samples: 60000, seed: 1234}
max_steps: 600
num_processes: 2
)";

JobSpec Parsed(const std::string& text) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(text, SpecLimits{});
  EXPECT_TRUE(spec.ok()) << spec.status() << "\n" << text;
  return spec.ok() ? *spec : JobSpec{};
}

TEST(SpecOverrides, SetTopLevelNestedAndNewFields) {
  absl::StatusOr<std::string> out = ApplySpecOverrides(
      kSpec,
      {"max_steps=20000", "data.batch_size=32", "model.hidden=[64]", "scheduler.warmup_steps=10", "name=long-run"});
  ASSERT_TRUE(out.ok()) << out.status();
  JobSpec spec = Parsed(*out);
  EXPECT_EQ(spec.max_steps, 20000);
  EXPECT_EQ(spec.data.batch_size, 32);
  EXPECT_EQ(spec.data.num_samples, 60000);  // its neighbours are kept
  EXPECT_EQ(spec.model.hidden, std::vector<int64_t>{64});
  EXPECT_EQ(spec.name, "long-run");
  EXPECT_EQ(spec.num_processes, 2);
  EXPECT_EQ(spec.scheduler.warmup_steps, 10);  // a section the spec did not have
}

TEST(SpecOverrides, LaterOverridesWinAndNoneLeavesTheTextAsItIs) {
  EXPECT_EQ(*ApplySpecOverrides(kSpec, {}), kSpec);
  EXPECT_EQ(Parsed(*ApplySpecOverrides(kSpec, {"max_steps=5", "max_steps=7"})).max_steps, 7);
}

TEST(SpecOverrides, BadOverridesNameThemselvesAndWhatIsWrong) {
  auto error = [](const std::string& text, const std::string& set) {
    absl::StatusOr<std::string> out = ApplySpecOverrides(text, {set});
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << set;
    return std::string(out.status().message());
  };
  EXPECT_EQ(error(kSpec, "max_steps"), "--set 'max_steps': expected KEY=VALUE, e.g. max_steps=20000");
  EXPECT_NE(error(kSpec, "data..seed=1").find("empty part"), std::string::npos);
  EXPECT_NE(error(kSpec, "=3").find("empty part"), std::string::npos);
  EXPECT_EQ(error(kSpec, "max_steps.x=1"), "--set 'max_steps.x=1': 'max_steps' is not a mapping in the spec");
  EXPECT_EQ(error(kSpec, "model.hidden.x=1"), "--set 'model.hidden.x=1': 'model.hidden' is not a mapping in the spec");
  EXPECT_NE(error(kSpec, "model.hidden=[1, 2").find("the value is not YAML"), std::string::npos);
  EXPECT_EQ(error("- a list", "max_steps=1"), "--set needs a spec that is a YAML mapping");
}

}  // namespace
}  // namespace trainyard
