// LauncherContract: what server/launch/launcher.h promises, run over every
// Launcher — the local one (real child processes of a stand-in worker), the
// Slurm one (stand-ins for sbatch, squeue, scancel and srun; each rank's end
// is the exit file its batch script would write) and the external one (whose
// ranks join by themselves). The implementations' own tests cover what is
// theirs alone.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "server/launch/external_launcher.h"
#include "server/launch/launcher.h"
#include "tests/test_util.h"

namespace trainyard {
namespace {

using std::chrono::seconds;

void WriteScript(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
  chmod(path.c_str(), 0755);
}

// One implementation with what a test needs to drive its ranks.
class Rig {
 public:
  virtual ~Rig() = default;
  virtual std::unique_ptr<Launcher> Make(Launcher::ExitCallback on_exit) = 0;
  // Makes the running process of `request`'s rank `rank` end with `code`.
  virtual void Finish(const LaunchRequest& request, int32_t rank, int code) = 0;
  // Whether the rank of a detached launcher was not killed (and is now made
  // to end).
  virtual bool Untouched(const LaunchRequest& request, int32_t rank) = 0;
  // Whether rank `rank` has started (it ignores SIGINT from then on).
  virtual bool Started(const LaunchRequest&, int32_t) { return true; }
  // The cluster runs nothing of ours (what an adoption may find).
  virtual void NothingRuns() {}
  // Starts rank `rank` again (LaunchRank), remembering which process of it runs.
  absl::Status Replace(Launcher* launcher, const LaunchRequest& request, int32_t rank) {
    absl::Status s = launcher->LaunchRank(request, rank);
    if (s.ok()) ++replacements_[rank];
    return s;
  }
  std::string root() const { return dir_.path(); }

 protected:
  TempDir dir_;
  std::map<int32_t, int> replacements_;
};

// The stand-in worker waits for its go file (<dir>/go/<job>-<rank>), then
// exits with the code written in it (and removes it, for a replacement); it
// ignores SIGINT, so only a kill ends it early.
class LocalRig : public Rig {
 public:
  LocalRig() {
    std::filesystem::create_directories(root() + "/go");
    WriteScript(root() + "/worker.sh", absl::StrCat(R"SH(#!/bin/sh
trap '' INT
job=$(echo "$*" | sed -n 's/.*--job \([^ ]*\).*/\1/p')
rank=$(echo "$*" | sed -n 's/.*--rank \([0-9]*\).*/\1/p')
f=")SH",
                                                    root(), R"SH(/go/$job-$rank"
touch "$f.ready"
while [ ! -f "$f" ]; do sleep 0.02; done
code=$(cat "$f"); rm -f "$f"; exit "$code"
)SH"));
  }
  std::unique_ptr<Launcher> Make(Launcher::ExitCallback on_exit) override {
    LocalLauncherOptions o;
    o.worker_binary = root() + "/worker.sh";
    o.stop_grace = std::chrono::milliseconds(500);
    return MakeLocalLauncher(o, std::move(on_exit));
  }
  void Finish(const LaunchRequest& r, int32_t rank, int code) override {
    const std::string go = absl::StrCat(root(), "/go/", r.job_id, "-", rank);
    std::ofstream(go + ".tmp") << code << "\n";
    std::filesystem::rename(go + ".tmp", go);
  }
  bool Started(const LaunchRequest& r, int32_t rank) override {
    return WaitFor([&] { return std::filesystem::exists(absl::StrCat(root(), "/go/", r.job_id, "-", rank, ".ready")); },
                   std::chrono::seconds(10));
  }
  bool Untouched(const LaunchRequest& r, int32_t rank) override {
    Finish(r, rank, 0);  // only a live process takes its go file
    return WaitFor([&] { return !std::filesystem::exists(absl::StrCat(root(), "/go/", r.job_id, "-", rank)); },
                   std::chrono::seconds(10));
  }
};

// sbatch prints a job id; squeue lists it while the test's state file
// says so; each rank's end is its exit file (rank-R.exit, a replacement's
// rank-R-N.exit), as the batch script writes it.
class SlurmRig : public Rig {
 public:
  SlurmRig() {
    bin_ = root() + "/bin";
    std::filesystem::create_directories(bin_);
    WriteScript(bin_ + "/sbatch", "#!/bin/sh\necho \"4242;cluster\"\n");
    WriteScript(bin_ + "/squeue",
                "#!/bin/sh\nd=$(dirname \"$0\")\n"
                "if [ -f \"$d/state\" ]; then echo \"4242|$(cat \"$d/state\")\"; fi\n");
    WriteScript(bin_ + "/scancel", "#!/bin/sh\necho \"$*\" >> \"$(dirname \"$0\")/scancel.log\"\n");
    WriteScript(bin_ + "/srun", "#!/bin/sh\n");
    std::ofstream(bin_ + "/state") << "RUNNING\n";  // what it launches runs
  }
  std::unique_ptr<Launcher> Make(Launcher::ExitCallback on_exit) override {
    SlurmLauncherOptions o;
    o.worker_binary = "/opt/trainyard/bin/trainyard-worker";
    o.slurm_bin_dir = bin_;
    o.poll_interval = std::chrono::milliseconds(10);
    o.stop_grace = std::chrono::milliseconds(500);
    o.drain = std::chrono::milliseconds(200);
    return MakeSlurmLauncher(o, std::move(on_exit));
  }
  void Finish(const LaunchRequest& r, int32_t rank, int code) override {
    const int n = replacements_[rank];
    std::ofstream(absl::StrCat(r.log_dir, "/rank-", rank, n > 0 ? absl::StrCat("-", n) : "", ".exit")) << code << "\n";
  }
  bool Untouched(const LaunchRequest&, int32_t) override {
    std::ifstream log(bin_ + "/scancel.log");
    std::stringstream text;
    text << log.rdbuf();
    return text.str().find("KILL") == std::string::npos;
  }
  void NothingRuns() override { std::filesystem::remove(bin_ + "/state"); }

 private:
  std::string bin_;
};

// Starts nothing; a rank's end is its own report (through the coordinator),
// not the launcher's.
class ExternalRig : public Rig {
 public:
  std::unique_ptr<Launcher> Make(Launcher::ExitCallback) override {
    return std::make_unique<ExternalLauncher>([](const std::string&, int32_t, const WorkerCommand&) {});
  }
  void Finish(const LaunchRequest&, int32_t, int) override {}
  bool Untouched(const LaunchRequest&, int32_t) override { return true; }
};

template <typename R>
class LauncherContract : public ::testing::Test {
 protected:
  void SetUp() override {
    launcher_ = rig_.Make([this](const std::vector<RankExit>& e) {
      std::lock_guard<std::mutex> lock(mu_);
      exits_.insert(exits_.end(), e.begin(), e.end());
    });
  }

  LaunchRequest Request(const std::string& job, int world, int32_t attempt = 1) {
    LaunchRequest r;
    r.job_id = job;
    r.attempt = attempt;
    r.world_size = world;
    r.master_port = 12345;
    r.coordinator_addr = "127.0.0.1:1";
    r.token = "tok-" + job;
    r.log_dir = absl::StrCat(rig_.root(), "/logs/", job, "/", attempt);
    std::filesystem::create_directories(r.log_dir);
    return r;
  }
  std::vector<RankExit> Exits() {
    std::lock_guard<std::mutex> lock(mu_);
    return exits_;
  }
  bool ExitsAre(size_t n) { return Exits().size() == n; }
  // Whether the launcher starts the ranks' processes itself.
  bool starts_processes() const { return !launcher_->traits().ranks_join; }

  R rig_;
  std::unique_ptr<Launcher> launcher_;
  std::mutex mu_;
  std::vector<RankExit> exits_;
};

using Rigs = ::testing::Types<LocalRig, SlurmRig, ExternalRig>;
TYPED_TEST_SUITE(LauncherContract, Rigs);

TYPED_TEST(LauncherContract, TraitsAreConsistent) {
  const Launcher::Traits t = this->launcher_->traits();
  EXPECT_FALSE(t.ranks_join && t.on_this_host) << "ranks that join by themselves may run anywhere";
  EXPECT_TRUE(this->launcher_->Available().ok());
}

TYPED_TEST(LauncherContract, EveryRankEndsOnceWithItsOwnOutcome) {
  const LaunchRequest r = this->Request("ends", 2);
  ASSERT_TRUE(this->launcher_->Launch(r).ok());
  if (!this->starts_processes()) {
    EXPECT_EQ(this->launcher_->LiveProcesses("ends"), 0);
    return;
  }
  EXPECT_EQ(this->launcher_->LiveProcesses("ends"), 2);
  this->rig_.Finish(r, 1, 3);
  ASSERT_TRUE(WaitFor([&] { return this->ExitsAre(1); }, seconds(10)));
  this->rig_.Finish(r, 0, 0);
  ASSERT_TRUE(WaitFor([&] { return this->ExitsAre(2); }, seconds(10)));
  const std::vector<RankExit> exits = this->Exits();
  EXPECT_EQ(exits[0].rank, 1);
  EXPECT_EQ(exits[0].outcome, RankExit::Exited("ends", 1, 1, 3).outcome) << exits[0].description;
  EXPECT_EQ(exits[1].rank, 0);
  EXPECT_TRUE(exits[1].ok()) << exits[1].description;
  for (const RankExit& e : exits) {
    EXPECT_EQ(e.job_id, "ends");
    EXPECT_EQ(e.attempt, 1);
  }
  EXPECT_TRUE(WaitFor([&] { return this->launcher_->LiveProcesses("ends") == 0; }, seconds(10)));
}

TYPED_TEST(LauncherContract, AStopOrKillOfAnotherAttemptOrJobTouchesNothing) {
  const LaunchRequest r = this->Request("mine", 1, /*attempt=*/2);
  ASSERT_TRUE(this->launcher_->Launch(r).ok());
  this->launcher_->Stop("mine", 1);
  this->launcher_->Stop("theirs", 2);
  this->launcher_->KillRank("mine", 1, 0);
  this->launcher_->KillRank("theirs", 2, 0);
  EXPECT_EQ(this->launcher_->LiveProcesses("theirs"), 0);
  if (!this->starts_processes()) return;
  EXPECT_EQ(this->launcher_->LiveProcesses("mine"), 1);
  // Its rank ends as it chose to, not as a stop or a kill would end it.
  this->rig_.Finish(r, 0, 0);
  ASSERT_TRUE(WaitFor([&] { return this->ExitsAre(1); }, seconds(10)));
  EXPECT_TRUE(this->Exits()[0].ok()) << this->Exits()[0].description;
  EXPECT_EQ(this->Exits()[0].attempt, 2);
}

TYPED_TEST(LauncherContract, ARankIsStartedAgainOnlyWhereRanksAreReplaced) {
  const LaunchRequest r = this->Request("replaced", 2);
  ASSERT_TRUE(this->launcher_->Launch(r).ok());
  if (!this->launcher_->traits().replaces_ranks) {
    EXPECT_EQ(this->rig_.Replace(this->launcher_.get(), r, 1).code(), absl::StatusCode::kUnimplemented);
    return;
  }
  if (!this->starts_processes()) {  // the rank's replacement joins by itself
    EXPECT_TRUE(this->rig_.Replace(this->launcher_.get(), r, 1).ok());
    EXPECT_EQ(this->launcher_->LiveProcesses("replaced"), 0);
    EXPECT_TRUE(this->Exits().empty());
    return;
  }
  this->rig_.Finish(r, 1, 1);
  ASSERT_TRUE(WaitFor([&] { return this->ExitsAre(1); }, seconds(10)));
  ASSERT_TRUE(this->rig_.Replace(this->launcher_.get(), r, 1).ok());
  EXPECT_EQ(this->launcher_->LiveProcesses("replaced"), 2);
  this->rig_.Finish(r, 1, 0);
  ASSERT_TRUE(WaitFor([&] { return this->ExitsAre(2); }, seconds(10)));
  EXPECT_EQ(this->Exits()[1].rank, 1);
  EXPECT_TRUE(this->Exits()[1].ok()) << "the replacement's own end: " << this->Exits()[1].description;
  this->rig_.Finish(r, 0, 0);
  ASSERT_TRUE(WaitFor([&] { return this->ExitsAre(3); }, seconds(10)));
  EXPECT_TRUE(WaitFor([&] { return this->launcher_->LiveProcesses("replaced") == 0; }, seconds(10)));
}

TYPED_TEST(LauncherContract, AdoptingAnAttemptWithNothingLeftReportsEveryRankEnded) {
  this->rig_.NothingRuns();
  this->launcher_->Adopt(this->Request("gone", 2));
  if (!this->starts_processes()) {
    EXPECT_EQ(this->launcher_->LiveProcesses("gone"), 0);  // its ranks reattach on their own
    EXPECT_TRUE(this->Exits().empty());
    return;
  }
  ASSERT_TRUE(WaitFor([&] { return this->ExitsAre(2); }, seconds(10)));
  std::set<int32_t> ranks;
  for (const RankExit& e : this->Exits()) {
    EXPECT_EQ(e.job_id, "gone");
    EXPECT_FALSE(e.ok()) << "nobody saw it succeed: " << e.description;
    ranks.insert(e.rank);
  }
  EXPECT_EQ(ranks, (std::set<int32_t>{0, 1}));
  EXPECT_EQ(this->launcher_->LiveProcesses("gone"), 0);
}

TYPED_TEST(LauncherContract, ALaunchThatFailsLeavesNothingRunning) {
  LaunchRequest r = this->Request("broken", 2);
  r.log_dir = "/proc/no-such-dir/logs";  // nowhere a rank's log can go
  EXPECT_EQ(this->launcher_->Launch(r).ok(), !this->starts_processes());
  EXPECT_EQ(this->launcher_->LiveProcesses("broken"), 0);
}

TYPED_TEST(LauncherContract, ADetachedLauncherStopsAndReportsNothing) {
  const LaunchRequest r = this->Request("left", 1);
  ASSERT_TRUE(this->launcher_->Launch(r).ok());
  ASSERT_TRUE(this->rig_.Started(r, 0));
  this->launcher_->Stop("left", 1);  // asked to stop: killed after the grace, unless detached
  this->launcher_->Detach();
  this->launcher_.reset();  // its destructor too leaves the rank alone
  EXPECT_TRUE(this->rig_.Untouched(r, 0)) << "the rank was stopped";
  EXPECT_TRUE(this->Exits().empty());
}

}  // namespace
}  // namespace trainyard
