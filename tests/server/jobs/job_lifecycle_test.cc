// JobLifecycle: launches, the first failure stopping the group, restarts
// with their backoff, ends, a restart's adoption, the periodic look.
#include "server/jobs/job_lifecycle.h"

#include <gtest/gtest.h>

#include "tests/server/coordinator_parts.h"

namespace trainyard {
namespace {

class JobLifecycleTest : public ::testing::Test {
 protected:
  CoordinatorParts p_;
};

TEST_F(JobLifecycleTest, AJobStartsWhenItsSlotsAreFreeAndWaitsOtherwise) {
  ActiveJob& a = p_.Submit("max_steps: 10\nnum_processes: 3\n");
  ActiveJob& b = p_.Submit("max_steps: 10\nnum_processes: 3\n");
  EXPECT_EQ(a.record.state, JobState::kStarting);
  EXPECT_EQ(a.record.attempt, 1);
  EXPECT_FALSE(a.record.worker_token.empty());
  EXPECT_EQ(b.record.state, JobState::kQueued);
  ASSERT_EQ(p_.local.launched().size(), 1u);
  const LaunchRequest r = p_.local.launched()[0];
  EXPECT_EQ(r.world_size, 3);
  EXPECT_EQ(r.coordinator_addr, "127.0.0.1:1");  // on this host: the local address
  EXPECT_EQ(r.log_dir, p_.dir.path() + "/jobs/" + a.record.id + "/attempt-1");
  const std::string a_id = a.record.id, b_id = b.record.id;
  p_.ExitAll(a_id, 0);  // `a` is let go
  EXPECT_EQ(p_.StateOf(a_id), JobState::kSucceeded);
  EXPECT_EQ(p_.StateOf(b_id), JobState::kStarting);  // its slots came free
}

// The first failure stops the group; after the last rank the job restarts
// at once, then backs off on the clock it was given.
TEST_F(JobLifecycleTest, FailuresStopTheGroupAndRestartWithABackoff) {
  ActiveJob& job = p_.Submit("max_steps: 10\nnum_processes: 2\nmax_restarts: 3\n");
  const std::string id = job.record.id;
  p_.workers.Exit(RankExit::Exited(id, 1, 0, 1));
  EXPECT_EQ(p_.local.stopped(), std::vector<std::string>{id + "#1"});
  EXPECT_EQ(p_.StateOf(id), JobState::kStarting);  // rank 1 still runs: not ended yet
  p_.workers.Exit(RankExit::Exited(id, 1, 1, 1));
  EXPECT_EQ(p_.jobs.Find(id)->record.attempt, 2);  // restart 1: at once
  p_.ExitAll(id, 1);
  EXPECT_EQ(p_.StateOf(id), JobState::kQueued);
  p_.watch.Supervise(&p_.requests, std::chrono::seconds(5));
  EXPECT_EQ(p_.StateOf(id), JobState::kQueued);
  p_.clock.Advance(std::chrono::seconds(1));
  p_.watch.Supervise(&p_.requests, std::chrono::seconds(5));
  EXPECT_EQ(p_.StateOf(id), JobState::kStarting);
  EXPECT_EQ(p_.jobs.Find(id)->record.attempt, 3);
}

TEST_F(JobLifecycleTest, CancellingAQueuedJobEndsItAtOnce) {
  p_.Submit("max_steps: 10\nnum_processes: 4\n");
  ActiveJob& waiting = p_.Submit("max_steps: 10\nnum_processes: 4\n");
  const std::string id = waiting.record.id;
  const JobRecord r = p_.stops.Cancel(waiting, /*checkpoint=*/false, 1);
  EXPECT_EQ(r.state, JobState::kCancelled);
  EXPECT_EQ(p_.jobs.Find(id), nullptr);
  EXPECT_FALSE(p_.scheduler.queued(id));
}

// After a coordinator restart a running job is adopted; workers that do not
// reattach in time have their group stopped.
TEST_F(JobLifecycleTest, AnAdoptedGroupThatDoesNotReattachIsStopped) {
  ActiveJob& job = p_.Submit("max_steps: 10\nnum_processes: 2\nreattach_timeout_s: 30\n");
  const std::string id = job.record.id;
  job.attempt.reset();  // as a new coordinator finds it
  p_.scheduler.Release(id, p_.clock.SteadyNow());
  p_.lifecycle.Adopt(job);
  EXPECT_EQ(job.record.state, JobState::kRecovering);
  EXPECT_EQ(p_.local.adopted().size(), 1u);
  p_.clock.Advance(std::chrono::seconds(29));
  p_.watch.Supervise(&p_.requests, std::chrono::seconds(5));
  EXPECT_TRUE(p_.local.stopped().empty());
  p_.clock.Advance(std::chrono::seconds(2));
  p_.watch.Supervise(&p_.requests, std::chrono::seconds(5));
  EXPECT_EQ(p_.local.stopped(), std::vector<std::string>{id + "#1"});
}

TEST_F(JobLifecycleTest, LogPathsAreCheckedAgainstTheRecord) {
  ActiveJob& job = p_.Submit("max_steps: 10\nnum_processes: 2\n");
  auto latest = p_.lifecycle.LogPath(job.record, 1, 0);
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(latest->first, p_.dir.path() + "/jobs/" + job.record.id + "/attempt-1/rank-1.log");
  EXPECT_EQ(latest->second, 1);
  EXPECT_EQ(p_.lifecycle.LogPath(job.record, 2, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(p_.lifecycle.LogPath(job.record, 0, 2).status().code(), absl::StatusCode::kInvalidArgument);
  JobRecord never_started = job.record;
  never_started.attempt = 0;
  EXPECT_EQ(p_.lifecycle.LogPath(never_started, 0, 0).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(JobLifecycleTest, ShutdownStopEndsRunningJobsAndStartsNothing) {
  ActiveJob& running = p_.Submit("max_steps: 10\nnum_processes: 4\n");
  const std::string id = running.record.id;
  const std::vector<std::string> stopping = p_.stops.Shutdown(ShutdownMode::kStop, &p_.requests);
  EXPECT_EQ(stopping, std::vector<std::string>{id});
  EXPECT_EQ(p_.StateOf(id), JobState::kFailed);
  EXPECT_TRUE(p_.lifecycle.shut_down());
  ActiveJob& late = p_.Submit("max_steps: 10\nnum_processes: 1\n");
  EXPECT_EQ(late.record.state, JobState::kQueued);  // nothing starts any more
}

}  // namespace
}  // namespace trainyard
