// ProgressPattern: steps, loss and named values read from a script's output
// lines, as nanoGPT and the Hugging Face examples print them.
#include "common/progress_pattern.h"

#include <gtest/gtest.h>

namespace trainyard {
namespace {

TEST(ProgressPattern, ReadsNanoGptsLines) {
  auto p = ProgressPattern::Compile(R"(iter (?P<step>\d+): loss (?P<loss>[-+.eE\d]+), time (?P<ms>[.\d]+)ms)");
  ASSERT_TRUE(p.ok()) << p.status();
  auto m = p->Match("iter 10: loss 3.2101, time 51.20ms, mfu 1.23%");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->step, 10);
  EXPECT_DOUBLE_EQ(m->loss, 3.2101);
  EXPECT_EQ(m->values.size(), 1u);
  EXPECT_DOUBLE_EQ(m->values.at("ms"), 51.2);
  EXPECT_FALSE(p->Match("step 10: train loss 4.1, val loss 4.2").has_value());
  EXPECT_FALSE(p->Match("").has_value());
}

TEST(ProgressPattern, AStepThatIsNotAnIntegerIsNoStep) {
  auto p = ProgressPattern::Compile(R"(step (?P<step>\S+))");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE(p->Match("step 1.5").has_value());
  EXPECT_FALSE(p->Match("step -3").has_value());
  EXPECT_EQ(p->Match("step 7")->step, 7);
}

TEST(ProgressPattern, RefusesWhatCannotGiveASteps) {
  EXPECT_NE(ProgressPattern::Compile("iter (\\d+").status().message().find("not a regular expression"),
            std::string::npos);
  EXPECT_NE(ProgressPattern::Compile("iter (?P<it>\\d+)").status().message().find("group named step"),
            std::string::npos);
}

}  // namespace
}  // namespace trainyard
