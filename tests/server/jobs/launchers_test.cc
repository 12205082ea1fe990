// Launchers: the kind a job uses, its launcher's traits, and the request
// its workers are given.
#include "server/jobs/launchers.h"

#include <gtest/gtest.h>

#include "tests/server/coordinator_parts.h"

namespace trainyard {
namespace {

class LaunchersTest : public ::testing::Test {
 protected:
  JobSpec Spec(LauncherKind kind) {
    JobSpec s;
    s.launcher = kind;
    return s;
  }
  RecordingLauncher local_;
};

TEST_F(LaunchersTest, AJobOfNoLauncherUsesTheDefault) {
  Launchers l(LauncherKind::kSlurm);
  EXPECT_EQ(l.KindOf(Spec(LauncherKind::kDefault)), LauncherKind::kSlurm);
  EXPECT_EQ(l.KindOf(Spec(LauncherKind::kLocal)), LauncherKind::kLocal);
  EXPECT_EQ(l.Get(LauncherKind::kSlurm), nullptr);  // none registered
  EXPECT_FALSE(l.TraitsOf(Spec(LauncherKind::kSlurm)).on_this_host);
  l.Register(LauncherKind::kLocal, &local_);
  EXPECT_EQ(l.Get(LauncherKind::kLocal), &local_);
  EXPECT_TRUE(l.TraitsOf(Spec(LauncherKind::kLocal)).on_this_host);
}

TEST_F(LaunchersTest, WorkersElsewhereAreToldTheRemoteAddress) {
  ActiveJob job(JobRecord{}, Spec(LauncherKind::kLocal), nullptr, TimeSource::Real());
  job.record.id = "job-1";
  job.record.attempt = 2;
  job.record.num_processes = 3;
  job.spec.threads_per_process = 4;
  job.attempt = std::make_unique<Attempt>(2, 3, false);
  job.attempt->place().master_addr = "127.0.0.1";
  job.attempt->place().master_port = 29500;
  const LaunchContext context{"127.0.0.1:1", "host:1", "/logs", {0, 1, 2}};
  LaunchRequest here = Launchers::RequestFor(job, {.on_this_host = true}, context);
  EXPECT_EQ(here.coordinator_addr, "127.0.0.1:1");
  EXPECT_EQ(here.world_size, 3);
  EXPECT_EQ(here.attempt, 2);
  EXPECT_EQ(here.master_port, 29500);
  EXPECT_EQ(here.threads_per_process, 4);
  EXPECT_EQ(here.gpus, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(Launchers::RequestFor(job, {}, context).coordinator_addr, "host:1");
  Launchers l;
  l.Register(LauncherKind::kLocal, &local_);
  ASSERT_TRUE(l.Launch(job, context).ok());
  ASSERT_EQ(local_.launched().size(), 1u);
  l.Stop(job);
  EXPECT_EQ(local_.stopped(), std::vector<std::string>{"job-1#2"});
  job.spec.launcher = LauncherKind::kSlurm;
  EXPECT_EQ(l.Launch(job, context).code(), absl::StatusCode::kFailedPrecondition);  // none of that kind
}

}  // namespace
}  // namespace trainyard
