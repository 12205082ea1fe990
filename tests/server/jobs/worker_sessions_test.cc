// WorkerSessions: ranks attaching with their token, reports of the current
// attempt only, joining ranks.
#include "server/jobs/worker_sessions.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "tests/server/coordinator_parts.h"

namespace trainyard {
namespace {

class WorkerSessionsTest : public ::testing::Test {
 protected:
  CoordinatorParts p_;
};

TEST_F(WorkerSessionsTest, RanksAttachWithTheTokenAndTheJobRunsOnceAllDid) {
  ActiveJob& job = p_.Submit("max_steps: 10\nnum_processes: 2\n");
  const std::string id = job.record.id, token = job.record.worker_token;
  EXPECT_EQ(p_.workers.Attach(id, 0, 1, "forged", "", 0).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(p_.workers.Attach(id, 0, 2, token, "", 0).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(p_.workers.Attach("job-none", 0, 1, token, "", 0).status().code(), absl::StatusCode::kNotFound);
  auto w0 = p_.workers.Attach(id, 0, 1, token, "", 0);
  ASSERT_TRUE(w0.ok()) << w0.status();
  EXPECT_EQ(w0->world_size, 2);
  EXPECT_EQ(job.record.state, JobState::kStarting);
  ASSERT_TRUE(p_.workers.Attach(id, 1, 1, token, "", 0).ok());
  EXPECT_EQ(job.record.state, JobState::kRunning);
  EXPECT_EQ(job.progress.last_progress(), p_.clock.SteadyNow());
}

TEST_F(WorkerSessionsTest, ReportsOfAnotherAttemptAreIgnored) {
  ActiveJob& job = p_.Submit("max_steps: 10\nnum_processes: 1\n");
  const std::string id = job.record.id;
  StepMetrics m;
  m.step = 4;
  p_.workers.Metrics(id, 2, {m});
  EXPECT_EQ(job.record.step, 0);
  p_.workers.Metrics(id, 1, {m});
  EXPECT_EQ(job.record.step, 4);
  p_.workers.Note(id, 7, 0, "stale");
  p_.workers.Note(id, 1, 0, std::string("bad \xff byte"));
  const std::vector<JobEvent> events = *p_.jobs.Events(id);
  EXPECT_EQ(events.back().reason, "rank 0: bad ? byte");  // valid UTF-8 only
  p_.workers.Result(id, 1, 0, WorkerOutcome::kSucceeded, "");
  p_.workers.Exit(RankExit::Exited(id, 1, 0, 0));
  EXPECT_EQ(p_.StateOf(id), JobState::kSucceeded);
}

TEST_F(WorkerSessionsTest, RanksOfAnExternalJobJoinTheCurrentAttempt) {
  ActiveJob& job = p_.Submit("max_steps: 10\nnum_processes: 2\nlauncher: external\n");
  const std::string id = job.record.id, token = job.record.worker_token;
  EXPECT_TRUE(p_.local.launched().empty());  // nothing is started for it
  auto info = p_.workers.JoinInfoOf(id, "remote:1");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->token, token);
  EXPECT_EQ(info->coordinator_addr, "remote:1");
  // Rank 1 waits for rank 0 to say where its store listens.
  EXPECT_EQ(p_.workers.Attach(id, 1, 0, token, "", 0).status().code(), absl::StatusCode::kUnavailable);
  auto w0 = p_.workers.Attach(id, 0, /*attempt=*/0, token, "10.0.0.5", 29500);
  ASSERT_TRUE(w0.ok()) << w0.status();
  EXPECT_EQ(w0->attempt, 1);
  EXPECT_EQ(w0->master_addr, "10.0.0.5");
  auto w1 = p_.workers.Attach(id, 1, 0, token, "", 0);
  ASSERT_TRUE(w1.ok()) << w1.status();
  EXPECT_EQ(job.record.state, JobState::kRunning);
  // Stopping the group is a command down each stream.
  p_.lifecycle.StopGroup(job);
  WorkerCommand cmd;
  ASSERT_TRUE(w1->channel->Pop(&cmd, std::chrono::milliseconds(0)));
  EXPECT_EQ(cmd.kind, WorkerCommand::Kind::kStop);
  ActiveJob& local = p_.Submit("max_steps: 10\nnum_processes: 1\n");
  EXPECT_EQ(p_.workers.JoinInfoOf(local.record.id, "remote:1").status().code(), absl::StatusCode::kFailedPrecondition);
}

// A rank on another host whose stream ends without a result, and whose end
// its launcher does not report, is ended after the node-loss grace; its
// node is named and left out of the next attempt.
TEST_F(WorkerSessionsTest, ARankOnALostNodeEndsAfterTheGraceAndTheRestartExcludesItsNode) {
  ActiveJob& job = p_.Submit("max_steps: 10\nnum_processes: 2\nlauncher: slurm\nmax_restarts: 1\n");
  const std::string id = job.record.id, token = job.record.worker_token;
  ASSERT_EQ(p_.elsewhere.launched().size(), 1u);
  ASSERT_TRUE(p_.workers.Attach(id, 0, 1, token, "", 0, 0, {}, "n1").ok());
  auto w1 = p_.workers.Attach(id, 1, 1, token, "", 0, 0, {}, "n2");
  ASSERT_TRUE(w1.ok()) << w1.status();
  ASSERT_EQ(job.record.state, JobState::kRunning);
  p_.workers.Detach(id, 1, 1, w1->channel);
  p_.clock.Advance(std::chrono::seconds(4));
  p_.workers.EndLostRanks();
  EXPECT_FALSE(job.attempt->failed()) << "within the grace";
  p_.clock.Advance(std::chrono::seconds(2));
  p_.workers.EndLostRanks();
  EXPECT_TRUE(job.attempt->failed());
  const std::vector<JobEvent> events = *p_.jobs.Events(id);
  EXPECT_TRUE(std::any_of(events.begin(), events.end(), [](const JobEvent& e) {
    return e.reason.rfind("node n2 presumed lost (rank 1 lost its stream", 0) == 0;
  }));
  // Rank 0's end (its launcher's report) ends the attempt: the restart
  // leaves n2 out.
  p_.workers.Exit(RankExit::Exited(id, 1, 0, 1));
  ASSERT_EQ(p_.elsewhere.launched().size(), 2u);
  EXPECT_EQ(p_.elsewhere.launched()[1].attempt, 2);
  EXPECT_EQ(p_.elsewhere.launched()[1].exclude_nodes, std::vector<std::string>{"n2"});
  // A local job's lost stream ends nothing: its launcher reaps its children.
  ActiveJob& local = p_.Submit("max_steps: 10\nnum_processes: 1\n");
  auto l0 = p_.workers.Attach(local.record.id, 0, 1, local.record.worker_token, "", 0, 0, {}, "here");
  ASSERT_TRUE(l0.ok()) << l0.status();
  p_.workers.Detach(local.record.id, 1, 0, l0->channel);
  p_.clock.Advance(std::chrono::seconds(600));
  p_.workers.EndLostRanks();
  EXPECT_EQ(local.record.state, JobState::kRunning);
}

}  // namespace
}  // namespace trainyard
