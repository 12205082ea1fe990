// The table of metric families: every family once, every step number with
// a family in it, and docs/reference/metrics.md listing exactly the table's
// families with their types and labels (the deploy test checks the live
// /metrics against the same page).
#include "server/metrics/metric_table.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "common/step_metrics.h"
#include "tests/test_paths.h"

namespace trainyard {
namespace {

TEST(MetricTable, EachFamilyOnceAndEveryStepNumbersFamilyIn) {
  std::set<std::string> names;
  for (const MetricFamily& f : MetricTable()) {
    EXPECT_TRUE(names.insert(f.name).second) << f.name << " twice";
    EXPECT_FALSE(f.help.empty()) << f.name;
    EXPECT_EQ(f.type == MetricType::kHistogram, !f.buckets.empty()) << f.name;
  }
  constexpr MetricType kNone = MetricType::kGauge, kGauge = MetricType::kGauge, kCounter = MetricType::kCounter,
                       kHistogram = MetricType::kHistogram;
  (void)kNone;
#define TRAINYARD_CHECK_FAMILY(type_, name_, init_, family_, kind_, label_, when_, help_)           \
  if (std::string(family_) != "") {                                                                 \
    const MetricFamily& f = MetricNamed(family_);                                                   \
    EXPECT_EQ(f.type, kind_) << #name_;                                                             \
    const std::string l = label_;                                                                   \
    std::vector<std::string> want = {"job_id", "rank"};                                             \
    if (!l.empty()) want.push_back(l.substr(0, l.find('=')));                                       \
    EXPECT_EQ(f.labels, want) << #name_;                                                            \
    EXPECT_EQ(f.help, std::string(help_)) << #name_ << ": numbers sharing a family share its help"; \
  }
  TRAINYARD_STEP_NUMBERS(TRAINYARD_CHECK_FAMILY)
#undef TRAINYARD_CHECK_FAMILY
}

TEST(MetricTable, TheReferencePageListsExactlyTheTable) {
  std::ifstream in(std::string(TRAINYARD_SOURCE_DIR) + "/docs/reference/metrics.md");
  ASSERT_TRUE(in) << "docs/reference/metrics.md";
  // | `name` | type | `label`, `label` | help |
  const std::regex row(R"(^\|\s*`(trainyard_\w+)`\s*\|\s*(\w+)\s*\|([^|]*)\|)");
  const std::regex label("`(\\w+)`");
  std::map<std::string, std::pair<std::string, std::set<std::string>>> documented;
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (!std::regex_search(line, m, row)) continue;
    std::set<std::string> labels;
    const std::string cell = m[3];
    for (auto it = std::sregex_iterator(cell.begin(), cell.end(), label); it != std::sregex_iterator(); ++it) {
      labels.insert((*it)[1]);
    }
    EXPECT_TRUE(documented.emplace(m[1], std::make_pair(std::string(m[2]), labels)).second) << m[1] << " twice";
  }
  std::set<std::string> in_table;
  for (const MetricFamily& f : MetricTable()) {
    in_table.insert(f.name);
    auto doc = documented.find(f.name);
    if (doc == documented.end()) {
      ADD_FAILURE() << f.name << " is exported but not in docs/reference/metrics.md";
      continue;
    }
    EXPECT_EQ(doc->second.first, MetricTypeName(f.type)) << f.name;
    EXPECT_EQ(doc->second.second, std::set<std::string>(f.labels.begin(), f.labels.end())) << f.name;
  }
  for (const auto& [name, doc] : documented) {
    EXPECT_TRUE(in_table.count(name)) << name << " is in docs/reference/metrics.md but not exported";
  }
}

}  // namespace
}  // namespace trainyard
