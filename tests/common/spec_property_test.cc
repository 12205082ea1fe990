// The properties of the spec's canonical JSON: random valid specs (drawn by
// walking the field tables) survive JobSpecToJson then ParseJobSpec equal,
// field by field; and a value of the wrong YAML type anywhere in one (a
// list for a scalar, a list for a mapping, a mapping for a list) is refused
// naming its field, never read as something else.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

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

// Every path to a value in `j`, with the value's kind.
void Paths(const nlohmann::json& j, const nlohmann::json::json_pointer& at,
           std::vector<nlohmann::json::json_pointer>* out) {
  if (!at.empty()) out->push_back(at);
  if (j.is_object()) {
    for (const auto& [key, value] : j.items()) Paths(value, at / key, out);
  }
}

// The value of another YAML type than `v`: a list for a scalar or a
// mapping, a mapping for a list.
nlohmann::json Swapped(const nlohmann::json& v) {
  if (v.is_array()) return nlohmann::json{{"swapped", 1}};
  return nlohmann::json::array({1, 2});
}

TEST(SpecPropertyTest, AWrongTypeAnywhereIsRefusedNamingTheField) {
  int checked = 0;
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    const JobSpec spec = RandomJobSpec(seed);
    const nlohmann::json j = nlohmann::json::parse(JobSpecToJson(spec));
    std::vector<nlohmann::json::json_pointer> paths;
    Paths(j, nlohmann::json::json_pointer(), &paths);
    for (const auto& path : paths) {
      nlohmann::json bad = j;
      bad[path] = Swapped(j[path]);
      auto parsed = ParseJobSpec(bad.dump());
      const std::string key = path.back();
      ASSERT_FALSE(parsed.ok()) << "seed " << seed << ": " << path.to_string() << " as " << bad[path].dump()
                                << " was accepted";
      EXPECT_NE(std::string(parsed.status().message()).find(key), std::string::npos)
          << "seed " << seed << ": " << path.to_string() << ": " << parsed.status().message();
      ++checked;
    }
  }
  EXPECT_GT(checked, 1000);
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
