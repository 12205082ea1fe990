// What the Slurm launcher hands to Slurm: sbatch's arguments, and the batch
// and wrapper scripts run by a real /bin/sh against a stand-in `srun`.
#include "server/launch/slurm_batch.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "tests/test_util.h"

namespace trainyard {
namespace {

LaunchRequest Request() {
  LaunchRequest r;
  r.job_id = "job-1a2b";
  r.attempt = 3;
  r.world_size = 8;
  r.master_port = 29501;
  r.master_addr = "";
  r.coordinator_addr = "10.0.0.1:50052";
  r.log_dir = "/state/jobs/job-1a2b/attempt-3";
  r.threads_per_process = 4;
  r.job_name = "gpt";
  return r;
}

bool Has(const std::vector<std::string>& args, const std::string& a) {
  return std::find(args.begin(), args.end(), a) != args.end();
}

TEST(SbatchArgs, NameTasksNodesCpusOutputSignalAndRequeue) {
  LaunchRequest r = Request();
  r.slurm.nodes = 2;
  r.preemption_grace_s = 90;
  const auto args = SbatchArgs(r, SlurmLauncherOptions{}, "/opt/slurm/bin/sbatch", "/s/job.sbatch");
  const std::vector<std::string> want = {"/opt/slurm/bin/sbatch",
                                         "--parsable",
                                         "--job-name=trainyard-job-1a2b-a3",
                                         "--ntasks=8",
                                         "--nodes=2",
                                         "--cpus-per-task=4",
                                         "--output=/state/jobs/job-1a2b/attempt-3/slurm-%j.out",
                                         "--signal=TERM@90",
                                         "--no-requeue",
                                         "--ntasks-per-node=4",
                                         "/s/job.sbatch"};
  EXPECT_EQ(args, want);
}

TEST(SbatchArgs, GpusPerNodeForCudaAndTheJobsChoicesOverTheServers) {
  LaunchRequest r = Request();
  r.cuda = true;
  r.preemptible = true;
  r.slurm.nodes = 2;
  r.slurm.partition = "gpu-long";
  r.slurm.qos = "high";
  r.slurm.time_limit = "2:00:00";
  r.slurm.constraint = "h100";
  r.slurm.extra_args = {"--exclusive"};
  SlurmLauncherOptions o;
  o.partition = "default-part";
  o.account = "ml-team";
  o.extra_sbatch_args = {"--mail-type=END"};
  const auto args = SbatchArgs(r, o, "sbatch", "/s/job.sbatch");
  EXPECT_TRUE(Has(args, "--gres=gpu:4"));  // 8 ranks on 2 nodes
  EXPECT_TRUE(Has(args, "--ntasks-per-node=4"));
  // Each task gets one of its node's GPUs.
  EXPECT_NE(BatchScript(r, "/s/rank.sh", "/w", {}).find("srun --kill-on-bad-exit=0 --gpus-per-task=1 "),
            std::string::npos);
  r.cuda = false;
  EXPECT_EQ(BatchScript(r, "/s/rank.sh", "/w", {}).find("--gpus-per-task"), std::string::npos);
  EXPECT_TRUE(Has(args, "--requeue"));
  EXPECT_FALSE(Has(args, "--no-requeue"));
  EXPECT_TRUE(Has(args, "--partition=gpu-long"));
  EXPECT_FALSE(Has(args, "--partition=default-part"));
  EXPECT_TRUE(Has(args, "--account=ml-team"));  // the job names none: the server's
  EXPECT_TRUE(Has(args, "--qos=high"));
  EXPECT_TRUE(Has(args, "--time=2:00:00"));
  EXPECT_TRUE(Has(args, "--constraint=h100"));
  // The server's extra arguments, then the job's (which win in sbatch), then the script.
  ASSERT_GE(args.size(), 3u);
  EXPECT_EQ(args[args.size() - 3], "--mail-type=END");
  EXPECT_EQ(args[args.size() - 2], "--exclusive");
  EXPECT_EQ(args.back(), "/s/job.sbatch");
  EXPECT_FALSE(
      std::any_of(args.begin(), args.end(), [](const std::string& a) { return a.rfind("--exclude", 0) == 0; }));
}

TEST(SbatchArgs, NodesPresumedLostAreExcluded) {
  LaunchRequest r = Request();
  r.exclude_nodes = {"n2", "n5"};
  EXPECT_TRUE(Has(SbatchArgs(r, SlurmLauncherOptions{}, "sbatch", "/s/job.sbatch"), "--exclude=n2,n5"));
}

TEST(SbatchArgs, SignalLeadTimeStaysInSlurmsRange) {
  LaunchRequest r = Request();
  r.preemption_grace_s = 0;
  EXPECT_TRUE(Has(SbatchArgs(r, {}, "sbatch", "s"), "--signal=TERM@1"));
  r.preemption_grace_s = 1e9;
  EXPECT_TRUE(Has(SbatchArgs(r, {}, "sbatch", "s"), "--signal=TERM@65535"));
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void WriteExecutable(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
  chmod(path.c_str(), 0755);
}

// The script is run by sh with a stand-in srun that writes each argument it
// gets on its own line: every value arrives as one argument, unexpanded.
TEST(BatchScript, EveryArgumentReachesSrunIntactAndTheExitDirIsExported) {
  TempDir dir;
  const std::string bin = dir.path() + "/bin", out = dir.path() + "/srun-args";
  std::filesystem::create_directories(bin);
  WriteExecutable(bin + "/srun",
                  "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done > \"$OUT\"\n"
                  "printf '%s\\n' \"$TRAINYARD_EXIT_DIR\" >> \"$OUT\"\n");
  LaunchRequest r = Request();
  r.log_dir = dir.path() + "/it's a dir";
  r.coordinator_addr = "host:1 $(touch pwned)";
  r.master_addr = "node-1";
  r.job_name = "a\nb";
  const std::string script = dir.path() + "/job.sbatch";
  WriteExecutable(script, BatchScript(r, "/x/rank.sh", "/opt/trainyard-worker", {"--log-format", "$HOME"}));
  const std::string cmd = absl::StrCat("cd ", ShellQuote(dir.path()), " && PATH=", ShellQuote(bin),
                                       ":$PATH OUT=", ShellQuote(out), " /bin/sh ", ShellQuote(script));
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const std::string want = absl::StrCat(
      "--kill-on-bad-exit=0\n--open-mode=append\n--output=", r.log_dir, "/rank-%t.log\n/x/rank.sh\n",
      "/opt/trainyard-worker\n--job\njob-1a2b\n--world-size\n8\n--attempt\n3\n--master-port\n29501\n",
      "--server\nhost:1 $(touch pwned)\n--threads\n4\n--master-addr\nnode-1\n--log-format\n$HOME\n", r.log_dir, "\n");
  EXPECT_EQ(ReadAll(out), want);
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/pwned"));
}

// A step that failed: the script waits to be cancelled (SIGTERM, as
// scancel sends), then exits with the step's code; a step that succeeded,
// or whose ranks were all preempted, ends the script at once.
TEST(BatchScript, AFailedStepWaitsToBeCancelled) {
  TempDir dir;
  const std::string bin = dir.path() + "/bin";
  std::filesystem::create_directories(bin);
  WriteExecutable(bin + "/srun", "#!/bin/sh\ntouch \"$OUT\"\nexit \"$RC\"\n");
  const std::string script = dir.path() + "/job.sbatch";
  WriteExecutable(script, BatchScript(Request(), "/x/rank.sh", "/w", {}));
  auto start = [&](const char* rc) {
    const pid_t pid = fork();
    if (pid == 0) {
      setenv("PATH", (bin + ":/usr/bin:/bin").c_str(), 1);
      setenv("OUT", (dir.path() + "/ran").c_str(), 1);
      setenv("RC", rc, 1);
      execl("/bin/sh", "sh", script.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    return pid;
  };
  auto ended = [](pid_t pid, int* status) { return waitpid(pid, status, WNOHANG) == pid; };
  int status = 0;
  const pid_t ok = start("0");
  ASSERT_TRUE(WaitFor([&] { return ended(ok, &status); }, std::chrono::seconds(10)));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  // Preempted ranks (exit 4) lost nothing: the script ends at once too.
  const pid_t preempted = start("4");
  ASSERT_TRUE(WaitFor([&] { return ended(preempted, &status); }, std::chrono::seconds(10)));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 4) << status;

  std::filesystem::remove(dir.path() + "/ran");
  const pid_t failed = start("3");
  ASSERT_TRUE(WaitFor([&] { return std::filesystem::exists(dir.path() + "/ran"); }, std::chrono::seconds(10)));
  // The step has ended; the script does not, within a second.
  EXPECT_FALSE(WaitFor([&] { return ended(failed, &status); }, std::chrono::seconds(1)));
  kill(failed, SIGTERM);
  ASSERT_TRUE(WaitFor([&] { return ended(failed, &status); }, std::chrono::seconds(10)));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 3) << status;
}

int RunWrapper(const std::string& dir, const std::string& worker_cmd) {
  const std::string wrapper = dir + "/rank.sh";
  WriteExecutable(wrapper, RankWrapperScript());
  const std::string cmd = absl::StrCat("TRAINYARD_EXIT_DIR=", ShellQuote(dir), " SLURM_PROCID=5 ", ShellQuote(wrapper),
                                       " /bin/sh -c ", ShellQuote(worker_cmd));
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(RankWrapperScript, RecordsTheWorkersExitCodeAndSignal) {
  TempDir dir;
  EXPECT_EQ(RunWrapper(dir.path(), "exit 3"), 3);
  EXPECT_EQ(ReadAll(dir.path() + "/rank-5.exit"), "3\n");
  EXPECT_EQ(RunWrapper(dir.path(), "kill -9 $$"), 137);  // 128 + SIGKILL
  EXPECT_EQ(ReadAll(dir.path() + "/rank-5.exit"), "137\n");
  EXPECT_EQ(RunWrapper(dir.path(), "exit 0"), 0);
  EXPECT_EQ(ReadAll(dir.path() + "/rank-5.exit"), "0\n");
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/rank-5.exit.tmp"));
}

}  // namespace
}  // namespace trainyard
