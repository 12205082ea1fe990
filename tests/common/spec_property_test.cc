// The property of the spec's canonical JSON: random valid specs (drawn by
// walking the field tables) survive JobSpecToJson then ParseJobSpec equal,
// field by field.
#include <gtest/gtest.h>

#include <optional>

#include <string>
#include "absl/strings/str_cat.h"

#include "common/spec/job_spec.h"
#include "common/spec/spec_random.h"

namespace trainyard {
namespace {

constexpr int kSpecs = 2000;

TEST(SpecPropertyTest, RandomSpecsSurviveTheirJson) {
  int parsed = 0;
  std::string first_refusal;
  for (uint64_t seed = 1; seed <= kSpecs; ++seed) {
    const JobSpec spec = RandomJobSpec(seed);
    const std::string json = JobSpecToJson(spec);
    auto again = ParseJobSpec(json);
    if (!again.ok()) {
      if (first_refusal.empty()) first_refusal = absl::StrCat("seed ", seed, ": ", again.status().message());
      continue;
    }
    ++parsed;
    if (*again != spec) {
      const std::optional<std::string> diff = SpecDifference(spec, *again);
      FAIL() << "seed " << seed << ": the spec read back from its JSON differs in "
             << diff.value_or("a field the tables do not list") << "\n"
             << json;
    }
    EXPECT_EQ(JobSpecToJson(*again), json) << "seed " << seed;
  }
  // Most drawn specs are valid, so the property is checked on many.
  EXPECT_GT(parsed, kSpecs * 9 / 10) << "first refusal: " << first_refusal;
}

TEST(SpecPropertyTest, SameSeedSameSpec) {
  EXPECT_EQ(RandomJobSpec(7), RandomJobSpec(7));
  EXPECT_NE(RandomJobSpec(7), RandomJobSpec(8));
}

TEST(SpecPropertyTest, DifferenceNamesTheField) {
  JobSpec a, b;
  b.data.batch_size = 3;
  EXPECT_EQ(SpecDifference(a, b), "data.batch_size: 64 vs 3");
  b = a;
  b.ddp.power_sgd.warm_start = false;
  EXPECT_EQ(SpecDifference(a, b), "ddp.comm_state_option.warm_start: true vs false");
  EXPECT_EQ(SpecDifference(a, a), std::nullopt);
}

}  // namespace
}  // namespace trainyard
