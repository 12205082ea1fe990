// RankExit: how one rank's end is read, once, into the worker's account of
// it.
#include "server/launch/launcher.h"

#include <gtest/gtest.h>
#include <signal.h>

namespace trainyard {
namespace {

TEST(RankExitTest, ExitCodesAreTheWorkersOutcomes) {
  const RankExit ok = RankExit::Exited("job-1", 2, 0, 0);
  EXPECT_TRUE(ok.ok());
  EXPECT_EQ(ok.description, "rank 0 exited with code 0");
  const RankExit failed = RankExit::Exited("job-1", 2, 1, 1);
  EXPECT_FALSE(failed.ok());
  EXPECT_EQ(failed.outcome, WorkerOutcome::kFailed);
  EXPECT_EQ(failed.attempt, 2);
}

TEST(RankExitTest, ASignalIsAFailureThatNamesIt) {
  const RankExit killed = RankExit::Killed("job-1", 1, 3, SIGKILL);
  EXPECT_EQ(killed.outcome, WorkerOutcome::kFailed);
  EXPECT_EQ(killed.description.rfind("rank 3 was killed by signal 9 (", 0), 0u) << killed.description;
}

TEST(RankExitTest, AnEndNobodySawHasNoOutcome) {
  const RankExit gone = RankExit::Unknown("job-1", 1, 0);
  EXPECT_FALSE(gone.outcome.has_value());
  EXPECT_FALSE(gone.ok());
  EXPECT_NE(gone.description.find("exit code is unknown"), std::string::npos);
  EXPECT_EQ(RankExit::Ended("job-1", 1, 0, WorkerOutcome::kSucceeded, "reported").description, "reported");
}

}  // namespace
}  // namespace trainyard
