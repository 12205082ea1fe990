// LocalLauncher with real child processes: a shell script stands in for the
// worker binary and behaves according to the job id it is given.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <mutex>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "server/launch/launcher.h"
#include "tests/test_util.h"

namespace trainyard {
namespace {

constexpr const char* kFakeWorker = R"SH(#!/bin/sh
case "$*" in
  *"--job exit3"*) exit 3 ;;
  *"--job sleeper"*) exec sleep 1000 ;;
  *"--job stubborn"*) trap '' INT TERM; echo trap-set; while :; do sleep 1; done ;;
  *"--job waiter"*) trap 'kill $!; exit 130' INT TERM; sleep 1000 & echo started; wait ;;
esac
echo "args: $*"
read -r token <&3
echo "token: $token (from fd $TRAINYARD_WORKER_TOKEN_FD; in the environment: ${TRAINYARD_WORKER_TOKEN-none})"
echo "gpu: [$CUDA_VISIBLE_DEVICES] local: $LOCAL_RANK"
exit 0
)SH";

class LocalLauncherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    script_ = dir_.path() + "/fake-worker.sh";
    std::ofstream(script_) << kFakeWorker;
    chmod(script_.c_str(), 0755);
  }

  std::unique_ptr<Launcher> Make(std::chrono::milliseconds grace) {
    LocalLauncherOptions o;
    o.worker_binary = script_;
    o.stop_grace = grace;
    return MakeLocalLauncher(o, [this](const std::vector<RankExit>& e) {
      std::lock_guard<std::mutex> lock(mu_);
      exits_.insert(exits_.end(), e.begin(), e.end());
    });
  }

  LaunchRequest Request(const std::string& job, int world) {
    LaunchRequest r;
    r.job_id = job;
    r.attempt = 1;
    r.world_size = world;
    r.master_port = 12345;
    r.coordinator_addr = "127.0.0.1:1";
    r.token = "tok-" + job;
    r.log_dir = dir_.path() + "/logs/" + job;
    return r;
  }

  std::vector<RankExit> Exits() {
    std::lock_guard<std::mutex> lock(mu_);
    return exits_;
  }

  TempDir dir_;
  std::string script_;
  std::mutex mu_;
  std::vector<RankExit> exits_;
};

TEST_F(LocalLauncherTest, RunsEveryRankWithItsArgumentsAndLog) {
  auto launcher = Make(std::chrono::milliseconds(1000));
  ASSERT_TRUE(launcher->Launch(Request("ok", 2)).ok());
  ASSERT_TRUE(WaitFor([&] { return Exits().size() == 2; }, std::chrono::seconds(10)));
  for (const RankExit& e : Exits()) {
    EXPECT_TRUE(e.ok()) << e.description;
    EXPECT_EQ(e.job_id, "ok");
  }
  EXPECT_EQ(launcher->LiveProcesses("ok"), 0);
  std::ifstream log(dir_.path() + "/logs/ok/rank-1.log");
  std::stringstream buf;
  buf << log.rdbuf();
  EXPECT_NE(buf.str().find("--rank 1 --world-size 2"), std::string::npos) << buf.str();
  EXPECT_NE(buf.str().find("--master-port 12345"), std::string::npos) << buf.str();
  EXPECT_NE(buf.str().find("token: tok-ok (from fd 3; in the environment: none)"), std::string::npos) << buf.str();
  EXPECT_EQ(buf.str().find("tok-ok --"), std::string::npos) << "the token must not be on the command line";
}

TEST_F(LocalLauncherTest, EachCudaRankSeesOnlyItsOwnGpu) {
  auto launcher = Make(std::chrono::milliseconds(1000));
  LaunchRequest r = Request("gpus", 2);
  r.cuda = true;
  r.gpus = {3, 1};
  ASSERT_TRUE(launcher->Launch(r).ok());
  ASSERT_TRUE(WaitFor([&] { return Exits().size() == 2; }, std::chrono::seconds(10)));
  for (int rank = 0; rank < 2; ++rank) {
    std::ifstream log(dir_.path() + "/logs/gpus/rank-" + std::to_string(rank) + ".log");
    std::stringstream buf;
    buf << log.rdbuf();
    const std::string want = "gpu: [" + std::to_string(r.gpus[rank]) + "] local: " + std::to_string(rank);
    EXPECT_NE(buf.str().find(want), std::string::npos) << buf.str();
  }
  // CPU jobs get no CUDA_VISIBLE_DEVICES of ours.
  ASSERT_TRUE(launcher->Launch(Request("cpu", 1)).ok());
  ASSERT_TRUE(WaitFor([&] { return Exits().size() == 3; }, std::chrono::seconds(10)));
  std::ifstream log(dir_.path() + "/logs/cpu/rank-0.log");
  std::stringstream buf;
  buf << log.rdbuf();
  if (std::getenv("CUDA_VISIBLE_DEVICES") == nullptr) {
    EXPECT_NE(buf.str().find("gpu: [] local: 0"), std::string::npos) << buf.str();
  }
  // Only fault_tolerance.mode replica ranks serve a store of their own.
  EXPECT_EQ(buf.str().find("--replica-store"), std::string::npos) << buf.str();
}

TEST_F(LocalLauncherTest, ReportsExitCodes) {
  auto launcher = Make(std::chrono::milliseconds(1000));
  ASSERT_TRUE(launcher->Launch(Request("exit3", 1)).ok());
  ASSERT_TRUE(WaitFor([&] { return Exits().size() == 1; }, std::chrono::seconds(10)));
  // Exit code 3 is the worker's "stopped on request".
  EXPECT_EQ(Exits()[0].outcome, WorkerOutcome::kStopped);
  EXPECT_FALSE(Exits()[0].ok());
  EXPECT_NE(Exits()[0].description.find("exited with code 3"), std::string::npos);
}

TEST_F(LocalLauncherTest, StopInterruptsThenKillsAfterGrace) {
  auto launcher = Make(std::chrono::milliseconds(300));
  ASSERT_TRUE(launcher->Launch(Request("sleeper", 1)).ok());
  ASSERT_TRUE(launcher->Launch(Request("stubborn", 1)).ok());
  EXPECT_EQ(launcher->LiveProcesses("sleeper"), 1);
  // The stubborn worker must have installed its SIGINT trap before we stop it.
  ASSERT_TRUE(WaitFor(
      [&] {
        std::ifstream log(dir_.path() + "/logs/stubborn/rank-0.log");
        std::string line;
        return std::getline(log, line) && line == "trap-set";
      },
      std::chrono::seconds(10)));
  launcher->Stop("sleeper", 1);
  launcher->Stop("stubborn", 1);
  ASSERT_TRUE(WaitFor([&] { return Exits().size() == 2; }, std::chrono::seconds(10)));
  for (const RankExit& e : Exits()) {
    EXPECT_EQ(e.outcome, WorkerOutcome::kFailed) << e.description;
    if (e.job_id == "sleeper") EXPECT_NE(e.description.find("killed by signal 2 "), std::string::npos) << e.description;
    if (e.job_id == "stubborn")
      EXPECT_NE(e.description.find("killed by signal 9 "), std::string::npos) << e.description;
  }
  EXPECT_EQ(launcher->LiveProcesses("sleeper"), 0);
  EXPECT_EQ(launcher->LiveProcesses("stubborn"), 0);
}

TEST_F(LocalLauncherTest, StopOfAnotherAttemptLeavesProcessesAlone) {
  auto launcher = Make(std::chrono::milliseconds(100));
  ASSERT_TRUE(launcher->Launch(Request("sleeper", 1)).ok());
  launcher->Stop("sleeper", 2);
  launcher->Stop("other", 1);
  EXPECT_EQ(launcher->LiveProcesses("sleeper"), 1);
  EXPECT_TRUE(Exits().empty());
  launcher->Stop("sleeper", 1);
  ASSERT_TRUE(WaitFor([&] { return Exits().size() == 1; }, std::chrono::seconds(10)));
}

// fault_tolerance.mode replica: one rank killed alone and started again,
// with the same rank, attempt and token, its log appended; the other rank
// runs on untouched.
TEST_F(LocalLauncherTest, KillRankAndLaunchRankReplaceOneRankAlone) {
  auto launcher = Make(std::chrono::milliseconds(1000));
  EXPECT_TRUE(launcher->traits().replaces_ranks);
  const LaunchRequest r = Request("sleeper", 2);
  ASSERT_TRUE(launcher->Launch(r).ok());
  EXPECT_EQ(launcher->LaunchRank(r, 1).code(), absl::StatusCode::kFailedPrecondition);  // still running
  EXPECT_EQ(launcher->LaunchRank(r, 2).code(), absl::StatusCode::kInvalidArgument);
  launcher->KillRank("sleeper", 1, 1);
  ASSERT_TRUE(WaitFor([&] { return Exits().size() == 1; }, std::chrono::seconds(10)));
  EXPECT_EQ(Exits()[0].rank, 1);
  EXPECT_NE(Exits()[0].description.find("killed by signal 9"), std::string::npos) << Exits()[0].description;
  EXPECT_EQ(launcher->LiveProcesses("sleeper"), 1);  // rank 0 goes on

  ASSERT_TRUE(launcher->LaunchRank(r, 1).ok());
  EXPECT_EQ(launcher->LiveProcesses("sleeper"), 2);
  launcher->Stop("sleeper", 1);  // the replacement is the attempt's like the others
  ASSERT_TRUE(WaitFor([&] { return Exits().size() == 3; }, std::chrono::seconds(10)));
  std::set<int32_t> ranks;
  for (size_t i = 1; i < 3; ++i) ranks.insert(Exits()[i].rank);
  EXPECT_EQ(ranks, (std::set<int32_t>{0, 1}));

  // The replacement runs with the rank's arguments and token, its output
  // after the first process's in the rank's log.
  LaunchRequest ok = Request("ok", 2);
  ok.replica_store = true;
  ASSERT_TRUE(launcher->Launch(ok).ok());
  ASSERT_TRUE(WaitFor([&] { return Exits().size() == 5; }, std::chrono::seconds(10)));
  ASSERT_TRUE(launcher->LaunchRank(ok, 1).ok());
  ASSERT_TRUE(WaitFor([&] { return Exits().size() == 6; }, std::chrono::seconds(10)));
  EXPECT_TRUE(Exits()[5].ok()) << Exits()[5].description;
  EXPECT_EQ(Exits()[5].rank, 1);
  std::ifstream log(dir_.path() + "/logs/ok/rank-1.log");
  std::stringstream buf;
  buf << log.rdbuf();
  const std::string text = buf.str();
  const size_t first = text.find("--rank 1 --world-size 2 --attempt 1");
  ASSERT_NE(first, std::string::npos) << text;
  EXPECT_NE(text.find("--rank 1 --world-size 2 --attempt 1", first + 1), std::string::npos) << text;
  EXPECT_NE(text.find("--replica-store", first), std::string::npos) << text;  // a store of its own
  EXPECT_NE(text.find("token: tok-ok", text.find("token: tok-ok") + 1), std::string::npos) << text;
}

// A restarted coordinator's launcher finds the workers an earlier one started
// by their command lines, follows them and stops them; their exit codes are
// not its to know.
TEST_F(LocalLauncherTest, AdoptFollowsAndStopsAnEarlierLaunchersWorkers) {
  LocalLauncherOptions o;
  o.worker_binary = script_;
  auto earlier = MakeLocalLauncher(o, [](const std::vector<RankExit>&) {});
  ASSERT_TRUE(earlier->Launch(Request("waiter", 2)).ok());
  ASSERT_TRUE(WaitFor(
      [&] {
        for (int rank = 0; rank < 2; ++rank) {
          std::ifstream log(absl::StrCat(dir_.path(), "/logs/waiter/rank-", rank, ".log"));
          std::string line;
          if (!std::getline(log, line) || line != "started") return false;
        }
        return true;
      },
      std::chrono::seconds(10)));

  auto later = Make(std::chrono::milliseconds(1000));
  // Another attempt's processes are not this attempt's: both ranks are gone.
  LaunchRequest other = Request("waiter", 2);
  other.attempt = 2;
  later->Adopt(other);
  ASSERT_TRUE(WaitFor([&] { return Exits().size() == 2; }, std::chrono::seconds(10)));
  EXPECT_EQ(later->LiveProcesses("waiter"), 0);
  EXPECT_EQ(earlier->LiveProcesses("waiter"), 2);

  // Attempt 1 has ranks 0 and 1 running; rank 2 was never there.
  LaunchRequest wider = Request("waiter", 3);
  later->Adopt(wider);
  ASSERT_TRUE(WaitFor([&] { return Exits().size() == 3; }, std::chrono::seconds(10)));
  EXPECT_EQ(Exits()[2].rank, 2);
  EXPECT_EQ(later->LiveProcesses("waiter"), 2);
  later->Stop("waiter", 1);
  ASSERT_TRUE(WaitFor([&] { return Exits().size() == 5; }, std::chrono::seconds(10)));
  std::set<int32_t> stopped;
  for (const RankExit& e : Exits()) {
    EXPECT_FALSE(e.outcome.has_value()) << e.description;
    EXPECT_FALSE(e.ok());
    if (e.attempt == 1 && e.rank < 2) stopped.insert(e.rank);
  }
  EXPECT_EQ(stopped, (std::set<int32_t>{0, 1}));
  EXPECT_EQ(later->LiveProcesses("waiter"), 0);
  EXPECT_TRUE(WaitFor([&] { return earlier->LiveProcesses("waiter") == 0; }, std::chrono::seconds(10)));
  EXPECT_NE(Exits()[0].description.find("not running when the coordinator restarted"), std::string::npos);
}

TEST_F(LocalLauncherTest, MissingBinaryIsAClearError) {
  LocalLauncherOptions o;
  o.worker_binary = dir_.path() + "/no-such-worker";
  auto launcher = MakeLocalLauncher(o, [](const std::vector<RankExit>&) {});
  absl::Status s = launcher->Launch(Request("x", 1));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(s.message()).find("no-such-worker"), std::string::npos);
}

TEST_F(LocalLauncherTest, DestructorLeavesNoProcessBehind) {
  pid_t child = 0;
  {
    auto launcher = Make(std::chrono::milliseconds(100));
    ASSERT_TRUE(launcher->Launch(Request("sleeper", 2)).ok());
    EXPECT_EQ(launcher->LiveProcesses("sleeper"), 2);
  }
  // Every child was reaped by the destructor: none is left to wait for.
  EXPECT_EQ(waitpid(-1, nullptr, WNOHANG), -1);
  (void)child;
}

}  // namespace
}  // namespace trainyard
