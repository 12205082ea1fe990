// SlurmLauncher against stand-ins for sbatch, squeue and scancel (shell
// scripts in --slurm-bin-dir): what it submits, how it reads each rank's exit
// file and Slurm's state, and how it stops a job. Slurm itself runs in the
// slurm and multihost e2e tests.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <mutex>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "server/launch/launcher.h"
#include "server/launch/slurm_text.h"
#include "tests/test_util.h"

namespace trainyard {
namespace {

// sbatch records its arguments and the token it was given and prints a job
// id (or fails when told to); squeue lists the job in the state the test
// writes; scancel records its arguments.
constexpr const char* kSbatch = R"sh(#!/bin/sh
d=$(dirname "$0")
if [ -f "$d/sbatch.fail" ]; then cat "$d/sbatch.fail" >&2; exit 1; fi
echo "$*" > "$d/sbatch.args"
echo "$TRAINYARD_WORKER_TOKEN" > "$d/sbatch.token"
echo "4242;cluster"
)sh";
constexpr const char* kSqueue = R"sh(#!/bin/sh
d=$(dirname "$0")
echo x >> "$d/squeue.calls"
if [ -f "$d/state" ]; then echo "4242|$(cat "$d/state")"; fi
)sh";
constexpr const char* kScancel = R"sh(#!/bin/sh
echo "$*" >> "$(dirname "$0")/scancel.log"
)sh";
constexpr const char* kSrun = R"sh(#!/bin/sh
echo "$*" >> "$(dirname "$0")/srun.log"
)sh";

class SlurmLauncherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    bin_ = dir_.path() + "/bin";
    std::filesystem::create_directories(bin_);
    for (const auto& [name, text] : {std::pair<const char*, const char*>{"sbatch", kSbatch},
                                     {"squeue", kSqueue},
                                     {"scancel", kScancel},
                                     {"srun", kSrun}}) {
      const std::string path = bin_ + "/" + name;
      std::ofstream(path) << text;
      chmod(path.c_str(), 0755);
    }
    SetState("RUNNING");
  }

  std::unique_ptr<Launcher> Make(std::string bin_dir, std::chrono::milliseconds grace = std::chrono::seconds(60),
                                 std::chrono::milliseconds drain = std::chrono::milliseconds(300)) {
    SlurmLauncherOptions o;
    o.worker_binary = "/opt/trainyard/bin/trainyard-worker";
    o.slurm_bin_dir = std::move(bin_dir);
    o.poll_interval = std::chrono::milliseconds(10);
    o.stop_grace = grace;
    o.drain = drain;
    return MakeSlurmLauncher(
        o,
        [this](const std::vector<RankExit>& e) {
          std::lock_guard<std::mutex> lock(mu_);
          exits_.insert(exits_.end(), e.begin(), e.end());
        },
        [this](const std::string& job, int32_t attempt, const std::string& text) {
          std::lock_guard<std::mutex> lock(mu_);
          notes_.push_back(absl::StrCat(job, "/", attempt, ": ", text));
        });
  }
  std::vector<std::string> Notes() {
    std::lock_guard<std::mutex> lock(mu_);
    return notes_;
  }

  LaunchRequest Request(int world) const {
    LaunchRequest r;
    r.job_id = "j1";
    r.attempt = 1;
    r.world_size = world;
    r.token = "secret-token";
    r.log_dir = dir_.path() + "/logs";
    return r;
  }

  void SetState(const std::string& state) { std::ofstream(bin_ + "/state") << state << "\n"; }
  std::string Read(const std::string& path) const {
    std::ifstream f(path);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }
  std::vector<RankExit> Exits() {
    std::lock_guard<std::mutex> lock(mu_);
    return exits_;
  }
  bool ExitCount(size_t n) { return Exits().size() == n; }

  TempDir dir_;
  std::string bin_;
  std::mutex mu_;
  std::vector<RankExit> exits_;
  std::vector<std::string> notes_;
};

TEST_F(SlurmLauncherTest, AvailableNamesSbatchWhenItIsMissing) {
  EXPECT_TRUE(Make(bin_)->Available().ok());
  absl::Status missing = Make(dir_.path() + "/nowhere")->Available();
  EXPECT_EQ(missing.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(missing.message().find("sbatch"), std::string::npos) << missing;
  EXPECT_NE(missing.message().find("--slurm-bin-dir"), std::string::npos) << missing;
}

TEST_F(SlurmLauncherTest, SubmitsTheBatchScriptWithTheTokenInItsEnvironmentOnly) {
  auto launcher = Make(bin_);
  ASSERT_TRUE(launcher->Launch(Request(2)).ok());
  const std::string script = dir_.path() + "/logs/job.sbatch";
  EXPECT_NE(Read(bin_ + "/sbatch.args").find(script), std::string::npos) << Read(bin_ + "/sbatch.args");
  EXPECT_EQ(Read(bin_ + "/sbatch.token"), "secret-token\n");
  EXPECT_NE(Read(script).find("/opt/trainyard/bin/trainyard-worker"), std::string::npos);
  EXPECT_EQ(Read(script).find("secret-token"), std::string::npos);
  EXPECT_EQ(Read(bin_ + "/sbatch.args").find("secret-token"), std::string::npos);
  EXPECT_EQ(launcher->LiveProcesses("j1"), 2);
}

TEST_F(SlurmLauncherTest, ASbatchFailureIsTheLaunchsErrorWithWhatSbatchSaid) {
  std::ofstream(bin_ + "/sbatch.fail") << "sbatch: error: invalid partition specified: gpux\n";
  absl::Status s = Make(bin_)->Launch(Request(1));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("invalid partition specified: gpux"), std::string::npos) << s;
  EXPECT_NE(s.message().find("exit 1"), std::string::npos) << s;
}

TEST_F(SlurmLauncherTest, EachRanksExitFileIsItsEndAndTheRestOfTheJobIsCancelled) {
  auto launcher = Make(bin_);
  ASSERT_TRUE(launcher->Launch(Request(2)).ok());
  std::ofstream(dir_.path() + "/logs/rank-0.exit") << "0\n";
  ASSERT_TRUE(WaitFor([&] { return ExitCount(1); }, std::chrono::seconds(10)));
  EXPECT_TRUE(Exits()[0].ok());
  EXPECT_EQ(Exits()[0].rank, 0);
  EXPECT_EQ(launcher->LiveProcesses("j1"), 1);
  std::ofstream(dir_.path() + "/logs/rank-1.exit") << "137\n";  // the shell's account of SIGKILL
  ASSERT_TRUE(WaitFor([&] { return ExitCount(2); }, std::chrono::seconds(10)));
  EXPECT_FALSE(Exits()[1].ok());
  EXPECT_NE(Exits()[1].description.find("killed by signal 9"), std::string::npos) << Exits()[1].description;
  EXPECT_EQ(launcher->LiveProcesses("j1"), 0);
  // Every rank is accounted for while Slurm still lists the job: it is
  // followed a while (drain) for how it ends, then what is left of it (the
  // batch step) is cancelled.
  ASSERT_TRUE(WaitFor([&] { return Read(bin_ + "/scancel.log") == "4242\n"; }, std::chrono::seconds(10)))
      << Read(bin_ + "/scancel.log");
}

TEST_F(SlurmLauncherTest, AnOperatorsScancelAfterTheRanksEndedIsNoted) {
  SetState("RUNNING|None|n1");
  auto launcher = Make(bin_);
  ASSERT_TRUE(launcher->Launch(Request(2)).ok());
  ASSERT_TRUE(WaitFor([&] { return Notes().size() == 1; }, std::chrono::seconds(10)));
  // The ranks got the operator's SIGTERM: they checkpoint and end before
  // Slurm lists the job as cancelled.
  SetState("COMPLETING|None|n1");
  std::ofstream(dir_.path() + "/logs/rank-0.exit") << "4\n";
  std::ofstream(dir_.path() + "/logs/rank-1.exit") << "4\n";
  ASSERT_TRUE(WaitFor([&] { return ExitCount(2); }, std::chrono::seconds(10)));
  SetState("CANCELLED|None|n1");
  ASSERT_TRUE(WaitFor([&] { return Notes().size() == 2; }, std::chrono::seconds(10)));
  EXPECT_EQ(Notes()[1], "j1/1: Slurm job 4242 was cancelled outside Trainyard (scancel)");
  EXPECT_EQ(Read(bin_ + "/scancel.log"), "");  // it ended by itself: nothing to cancel
}

TEST_F(SlurmLauncherTest, RanksWithoutAnExitFileFailWhenSlurmSaysTheJobEnded) {
  auto launcher = Make(bin_);
  ASSERT_TRUE(launcher->Launch(Request(2)).ok());
  std::ofstream(dir_.path() + "/logs/rank-1.exit") << "0\n";
  ASSERT_TRUE(WaitFor([&] { return ExitCount(1); }, std::chrono::seconds(10)));
  SetState("NODE_FAIL");
  ASSERT_TRUE(WaitFor([&] { return ExitCount(2); }, std::chrono::seconds(10)));
  const RankExit lost = Exits()[1];
  EXPECT_EQ(lost.rank, 0);
  EXPECT_EQ(lost.outcome, WorkerOutcome::kFailed);
  EXPECT_NE(lost.description.find("without an exit status (Slurm job 4242 NODE_FAIL)"), std::string::npos)
      << lost.description;
  EXPECT_EQ(launcher->LiveProcesses("j1"), 0);
}

TEST_F(SlurmLauncherTest, SlurmsOwnAccountOfTheJobGoesToItsNotes) {
  SetState("PENDING|Resources|");
  auto launcher = Make(bin_);
  ASSERT_TRUE(launcher->Launch(Request(2)).ok());
  SetState("RUNNING|None|n[1-2]");
  ASSERT_TRUE(WaitFor([&] { return Notes().size() == 1; }, std::chrono::seconds(10)));
  EXPECT_EQ(Notes()[0], "j1/1: Slurm job 4242 runs on n[1-2]");
  SetState("PENDING|BeginTime|");  // requeued after it ran
  ASSERT_TRUE(WaitFor([&] { return Notes().size() == 2; }, std::chrono::seconds(10)));
  EXPECT_EQ(Notes()[1], "j1/1: Slurm job 4242 was requeued by Slurm (BeginTime)");
  SetState("TIMEOUT|TimeLimit|n[1-2]");
  ASSERT_TRUE(WaitFor([&] { return Notes().size() == 3; }, std::chrono::seconds(10)));
  EXPECT_EQ(Notes()[2], "j1/1: Slurm job 4242 reached its time limit (slurm.time_limit) (TimeLimit)");
}

// A rank that checkpointed and stopped on SIGTERM (exit 4) close to the
// batch job's time limit was told by the limit: the note says so. Far from
// the limit, the same exit is a preemption and gets no such note.
TEST_F(SlurmLauncherTest, APreemptionSignalNearTheTimeLimitIsNamedAsTheLimit) {
  LaunchRequest r = Request(1);
  r.slurm.time_limit = "2";  // minutes
  r.preemption_grace_s = 25;
  SetState("RUNNING|None|n1|1:30");
  auto launcher = Make(bin_);
  ASSERT_TRUE(launcher->Launch(r).ok());
  ASSERT_TRUE(WaitFor([&] { return Notes().size() == 1; }, std::chrono::seconds(10)));
  SetState("RUNNING|None|n1|0:24");
  std::ofstream(bin_ + "/squeue.calls", std::ios::trunc).close();
  // Seen by the poller (a call after the new state) before the rank's exit file appears.
  ASSERT_TRUE(WaitFor([&] { return Read(bin_ + "/squeue.calls").size() > 0; }, std::chrono::seconds(10)));
  std::ofstream(dir_.path() + "/logs/rank-0.exit") << "4\n";
  ASSERT_TRUE(WaitFor([&] { return ExitCount(1); }, std::chrono::seconds(10)));
  ASSERT_EQ(Notes().size(), 2u);
  EXPECT_EQ(Notes()[1],
            "j1/1: Slurm job 4242 neared its time limit (slurm.time_limit 2, 24 s left): Slurm's SIGTERM "
            "(--signal=TERM@25) stopped its ranks after a checkpoint");
  EXPECT_EQ(Exits()[0].outcome, WorkerOutcome::kPreempted);
}

TEST_F(SlurmLauncherTest, APreemptionFarFromTheTimeLimitIsNotNamedAsTheLimit) {
  LaunchRequest r = Request(1);
  r.slurm.time_limit = "1-00:00:00";
  r.preemption_grace_s = 25;
  SetState("RUNNING|None|n1|23:59:00");
  auto launcher = Make(bin_);
  ASSERT_TRUE(launcher->Launch(r).ok());
  ASSERT_TRUE(WaitFor([&] { return Notes().size() == 1; }, std::chrono::seconds(10)));
  std::ofstream(dir_.path() + "/logs/rank-0.exit") << "4\n";
  ASSERT_TRUE(WaitFor([&] { return ExitCount(1); }, std::chrono::seconds(10)));
  SetState("PREEMPTED|None|n1|23:58:59");
  ASSERT_TRUE(WaitFor([&] { return Notes().size() == 2; }, std::chrono::seconds(10)));
  EXPECT_EQ(Notes()[1], "j1/1: Slurm job 4242 was preempted by Slurm");
}

// A batch job submitted while a squeue (for another job) is under way is
// not in that squeue's answer: that must not read as its end. The stand-in
// squeue lists the jobs submitted when it starts, then takes 300 ms.
TEST_F(SlurmLauncherTest, ASqueueFromBeforeTheSubmissionIsNotTheJobsEnd) {
  const std::string bin = dir_.path() + "/slow-bin";
  std::filesystem::create_directories(bin);
  const std::vector<std::pair<std::string, std::string>> tools = {
      {"sbatch",
       "#!/bin/sh\nd=$(dirname \"$0\")\nn=$(cat \"$d/n\" 2>/dev/null || echo 100)\n"
       "echo $((n + 1)) > \"$d/n\"\necho $((n + 1)) >> \"$d/ids\"\necho \"$((n + 1));cluster\"\n"},
      {"squeue",
       "#!/bin/sh\nd=$(dirname \"$0\")\nids=$(cat \"$d/ids\" 2>/dev/null)\necho x >> \"$d/calls\"\n"
       "sleep 0.3\nfor i in $ids; do echo \"$i|RUNNING|None|n1\"; done\n"},
      {"scancel", "#!/bin/sh\n"},
      {"srun", "#!/bin/sh\n"}};
  for (const auto& [name, text] : tools) {
    std::ofstream(bin + "/" + name) << text;
    chmod((bin + "/" + name).c_str(), 0755);
  }
  auto launcher = Make(bin);
  LaunchRequest first = Request(1);
  first.job_id = "j0";
  first.log_dir = dir_.path() + "/logs0";
  ASSERT_TRUE(launcher->Launch(first).ok());
  // The poller is busy with j0's squeue calls; j1 is submitted during one.
  for (int i = 0; i < 5; ++i) {
    std::ofstream(bin + "/calls", std::ios::trunc).close();
    ASSERT_TRUE(WaitFor([&] { return Read(bin + "/calls").size() > 0; }, std::chrono::seconds(10)));
    LaunchRequest r = Request(1);
    r.job_id = "j" + std::to_string(i + 1);
    r.log_dir = dir_.path() + "/logs" + std::to_string(i + 1);
    ASSERT_TRUE(launcher->Launch(r).ok());
  }
  // Three more squeue calls ("x\n" each): every job has been seen running since.
  std::ofstream(bin + "/calls", std::ios::trunc).close();
  ASSERT_TRUE(WaitFor([&] { return Read(bin + "/calls").size() >= 6; }, std::chrono::seconds(10)));
  for (const RankExit& e : Exits()) ADD_FAILURE() << e.job_id << ": " << e.description;
  EXPECT_EQ(launcher->LiveProcesses("j3"), 1);
}

// Ranks that stop on a SIGTERM neither ours nor the time limit's: scontrol
// says whether Slurm preempted the job (PreemptTime); the note comes once,
// not again when Slurm's state turns PREEMPTED after the grace time.
TEST_F(SlurmLauncherTest, ASlurmPreemptionIsNamedFromScontrol) {
  std::ofstream(bin_ + "/scontrol")
      << "#!/bin/sh\necho \"$*\" >> \"$(dirname \"$0\")/scontrol.args\"\n"
         "echo 'JobId=4242 JobName=x JobState=RUNNING Reason=None PreemptEligibleTime=2026-11-28T19:00:00 "
         "PreemptTime=2026-11-28T19:00:07 SuspendTime=None'\n";
  chmod((bin_ + "/scontrol").c_str(), 0755);
  SetState("RUNNING|None|n1|UNLIMITED");
  // Followed for up to 60 s after its ranks ended: until Slurm's PREEMPTED.
  auto launcher = Make(bin_, std::chrono::seconds(60), std::chrono::seconds(60));
  ASSERT_TRUE(launcher->Launch(Request(2)).ok());
  ASSERT_TRUE(WaitFor([&] { return Notes().size() == 1; }, std::chrono::seconds(10)));
  std::ofstream(dir_.path() + "/logs/rank-0.exit") << "4\n";
  std::ofstream(dir_.path() + "/logs/rank-1.exit") << "4\n";
  ASSERT_TRUE(WaitFor([&] { return ExitCount(2); }, std::chrono::seconds(10)));
  ASSERT_EQ(Notes().size(), 2u);
  EXPECT_EQ(Notes()[1],
            "j1/1: Slurm job 4242 was preempted by Slurm (at 2026-11-28T19:00:07): its ranks checkpointed on "
            "Slurm's SIGTERM");
  EXPECT_EQ(Read(bin_ + "/scontrol.args"), "-o show job 4242\n");  // asked once for both ranks
  EXPECT_EQ(launcher->ExternalId("j1", 1), "4242");                // still followed
  SetState("PREEMPTED|None|n1|UNLIMITED");
  // Seen (the batch job has ended: no longer followed), and not said twice.
  ASSERT_TRUE(WaitFor([&] { return launcher->ExternalId("j1", 1).empty(); }, std::chrono::seconds(10)));
  EXPECT_EQ(Notes().size(), 2u) << Notes().back();
}

TEST(SlurmDurationTest, SqueuesFormatsInSeconds) {
  EXPECT_EQ(ParseSlurmDuration("0:24"), 24);
  EXPECT_EQ(ParseSlurmDuration("12:05"), 725);
  EXPECT_EQ(ParseSlurmDuration("1:02:03"), 3723);
  EXPECT_EQ(ParseSlurmDuration("2-00:00:01"), 172801);
  EXPECT_EQ(ParseSlurmDuration("1-2"), 93600);
  EXPECT_EQ(ParseSlurmDuration("5"), 300);
  EXPECT_EQ(ParseSlurmDuration("UNLIMITED"), -1);
  EXPECT_EQ(ParseSlurmDuration("NOT_SET"), -1);
  EXPECT_EQ(ParseSlurmDuration(""), -1);
  EXPECT_EQ(ParseSlurmDuration("1:2:3:4"), -1);
  EXPECT_EQ(ParseSlurmDuration("-1:00"), -1);
}

TEST(ScontrolFieldTest, ReadsOneKeyOfTheOneLineForm) {
  const std::string out = "JobId=7 JobName=a=b PreemptTime=None\nSuspendTime=2026-11-28T19:00:07\n";
  EXPECT_EQ(ScontrolField(out, "PreemptTime"), "None");
  EXPECT_EQ(ScontrolField(out, "JobName"), "a=b");
  EXPECT_EQ(ScontrolField(out, "SuspendTime"), "2026-11-28T19:00:07");
  EXPECT_EQ(ScontrolField(out, "Time"), "");
}

TEST_F(SlurmLauncherTest, AScancelNotOursIsSaidAsSuchAndOursIsNot) {
  auto launcher = Make(bin_);
  ASSERT_TRUE(launcher->Launch(Request(1)).ok());
  ASSERT_TRUE(WaitFor([&] { return Notes().size() == 1; }, std::chrono::seconds(10)));
  EXPECT_EQ(Notes()[0], "j1/1: Slurm job 4242 runs");
  SetState("CANCELLED|None|n1");
  ASSERT_TRUE(WaitFor([&] { return ExitCount(1); }, std::chrono::seconds(10)));
  ASSERT_EQ(Notes().size(), 2u);
  EXPECT_EQ(Notes()[1], "j1/1: Slurm job 4242 was cancelled outside Trainyard (scancel)");

  auto ours = Make(bin_, std::chrono::seconds(60));
  SetState("RUNNING");
  ASSERT_TRUE(ours->Launch(Request(1)).ok());
  ASSERT_TRUE(WaitFor([&] { return Notes().size() == 3; }, std::chrono::seconds(10)));
  ours->Stop("j1", 1);
  SetState("CANCELLED");
  ASSERT_TRUE(WaitFor([&] { return ExitCount(2); }, std::chrono::seconds(10)));
  EXPECT_EQ(Notes().size(), 3u) << Notes().back();
}

// fault_tolerance.mode replica: a replacement is a batch job of one task;
// what the attempt's own job later says of the replaced rank is stale.
TEST_F(SlurmLauncherTest, AReplacedRankIsABatchJobOfItsOwnAndTheOldJobsWordOnItIsStale) {
  auto launcher = Make(bin_);
  EXPECT_TRUE(launcher->traits().replaces_ranks);
  LaunchRequest r = Request(2);
  r.replica_store = true;
  ASSERT_TRUE(launcher->Launch(r).ok());
  EXPECT_NE(Read(bin_ + "/sbatch.args").find("--no-kill"), std::string::npos) << Read(bin_ + "/sbatch.args");
  r.exclude_nodes = {"n2"};
  ASSERT_TRUE(launcher->LaunchRank(r, 1).ok());
  const std::string args = Read(bin_ + "/sbatch.args");
  EXPECT_NE(args.find("--job-name=trainyard-j1-a1-r1-1 --ntasks=1 --nodes=1 "), std::string::npos) << args;
  EXPECT_NE(args.find("--exclude=n2"), std::string::npos) << args;
  EXPECT_EQ(Read(bin_ + "/sbatch.token"), "secret-token\n");
  const std::string script = Read(dir_.path() + "/logs/rank-1-1.sbatch");
  EXPECT_NE(script.find("export TRAINYARD_RANK=1\n"), std::string::npos) << script;
  EXPECT_NE(script.find("rank-1-1.exit"), std::string::npos) << script;
  EXPECT_NE(script.find("/logs/rank-1.log"), std::string::npos) << script;
  EXPECT_NE(script.find("'--replica-store'"), std::string::npos) << script;
  EXPECT_EQ(launcher->LiveProcesses("j1"), 2);  // rank 0 of the attempt's job, rank 1's replacement
  // The replaced process's exit file, then rank 0's: only rank 0 counts.
  std::ofstream(dir_.path() + "/logs/rank-1.exit") << "137\n";
  std::ofstream(dir_.path() + "/logs/rank-0.exit") << "0\n";
  ASSERT_TRUE(WaitFor([&] { return ExitCount(1); }, std::chrono::seconds(10)));
  EXPECT_EQ(Exits()[0].rank, 0);
  // The replacement's own end counts.
  std::ofstream(dir_.path() + "/logs/rank-1-1.exit") << "0\n";
  ASSERT_TRUE(WaitFor([&] { return ExitCount(2); }, std::chrono::seconds(10)));
  EXPECT_EQ(Exits()[1].rank, 1);
  EXPECT_TRUE(Exits()[1].ok());
  EXPECT_EQ(launcher->LiveProcesses("j1"), 0);
}

TEST_F(SlurmLauncherTest, KillRankKillsOneTaskOnItsNodeOrAReplacementsWholeJob) {
  auto launcher = Make(bin_);
  LaunchRequest r = Request(2);
  r.replica_store = true;
  ASSERT_TRUE(launcher->Launch(r).ok());
  std::ofstream(dir_.path() + "/logs/rank-0.pid") << "n1 4711\n";
  launcher->KillRank("j1", 1, 0);
  ASSERT_TRUE(WaitFor([&] { return !Read(bin_ + "/srun.log").empty(); }, std::chrono::seconds(10)));
  EXPECT_EQ(Read(bin_ + "/srun.log"), "--jobid=4242 --overlap --nodes=1 --ntasks=1 --nodelist=n1 kill -9 4711\n");
  ASSERT_TRUE(launcher->LaunchRank(r, 1).ok());
  launcher->KillRank("j1", 1, 1);
  ASSERT_TRUE(WaitFor([&] { return Read(bin_ + "/scancel.log").find("--signal=KILL 4242") != std::string::npos; },
                      std::chrono::seconds(10)))
      << Read(bin_ + "/scancel.log");
}

TEST_F(SlurmLauncherTest, StopInterruptsTheTasksThenKillsWhatIsLeftAfterTheGrace) {
  auto launcher = Make(bin_, std::chrono::milliseconds(0));
  ASSERT_TRUE(launcher->Launch(Request(1)).ok());
  launcher->Stop("j1", 1);
  ASSERT_TRUE(WaitFor([&] { return Read(bin_ + "/scancel.log").find("--signal=KILL 4242") != std::string::npos; },
                      std::chrono::seconds(10)))
      << Read(bin_ + "/scancel.log");
  EXPECT_EQ(Read(bin_ + "/scancel.log").rfind("--signal=INT 4242\n", 0), 0u) << Read(bin_ + "/scancel.log");
  EXPECT_TRUE(Exits().empty());  // the ranks' ends still come from their exit files or Slurm
}

TEST_F(SlurmLauncherTest, AdoptFollowsTheJobSlurmListsUnderTheAttemptsName) {
  auto launcher = Make(bin_);
  std::filesystem::create_directories(dir_.path() + "/logs");
  launcher->Adopt(Request(1));
  EXPECT_EQ(launcher->LiveProcesses("j1"), 1);
  launcher->Stop("j1", 1);
  ASSERT_TRUE(WaitFor([&] { return Read(bin_ + "/scancel.log").find("--signal=INT 4242") != std::string::npos; },
                      std::chrono::seconds(10)))
      << Read(bin_ + "/scancel.log");
  std::ofstream(dir_.path() + "/logs/rank-0.exit") << "130\n";
  ASSERT_TRUE(WaitFor([&] { return ExitCount(1); }, std::chrono::seconds(10)));
  EXPECT_NE(Exits()[0].description.find("signal 2"), std::string::npos) << Exits()[0].description;
}

}  // namespace
}  // namespace trainyard
