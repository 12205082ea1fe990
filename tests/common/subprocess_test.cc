// RunCaptured with real programs: output of both streams, exit codes,
// arguments passed without a shell, the extra environment, the timeout.
#include "common/subprocess.h"

#include <gtest/gtest.h>

namespace trainyard {
namespace {

TEST(SubprocessTest, CapturesBothStreamsAndTheExitCode) {
  auto run = RunCaptured({"sh", "-c", "echo out; echo err >&2; exit 3"});
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->exit_code, 3);
  EXPECT_FALSE(run->timed_out);
  EXPECT_NE(run->output.find("out\n"), std::string::npos) << run->output;
  EXPECT_NE(run->output.find("err\n"), std::string::npos) << run->output;
}

TEST(SubprocessTest, ArgumentsReachTheProgramAsTheyAre) {
  auto run = RunCaptured({"printf", "%s|", "it's", "$HOME", "a b"});
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->exit_code, 0);
  EXPECT_EQ(run->output, "it's|$HOME|a b|");
}

TEST(SubprocessTest, ExtraEnvironmentIsAddedAndReplaces) {
  auto run = RunCaptured({"sh", "-c", "echo \"$TRAINYARD_X/$HOME\""}, {"TRAINYARD_X=one", "HOME=/elsewhere"});
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->output, "one//elsewhere\n");
}

TEST(SubprocessTest, ATimeoutKillsTheProgram) {
  const auto t0 = std::chrono::steady_clock::now();
  auto run = RunCaptured({"sleep", "30"}, {}, std::chrono::milliseconds(200));
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_TRUE(run->timed_out);
  EXPECT_EQ(run->exit_code, -1);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}

TEST(SubprocessTest, AProgramThatDoesNotExistIsNamed) {
  auto run = RunCaptured({"/nonexistent/prog9", "x"});
  ASSERT_FALSE(run.ok());
  EXPECT_NE(run.status().message().find("/nonexistent/prog9"), std::string::npos) << run.status();
}

TEST(SubprocessTest, OutputIsCappedAtTheLimit) {
  auto run = RunCaptured({"sh", "-c", "head -c 100000 /dev/zero"}, {}, std::chrono::seconds(10), 1000);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->output.size(), 1000u);
  EXPECT_EQ(run->exit_code, 0);
}

}  // namespace
}  // namespace trainyard
