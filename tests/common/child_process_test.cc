// ChildProcess with real programs: exit codes and signals, the descriptor
// plan (pipes, files, /dev/null, this process's descriptors), the
// environment, the working directory, process groups and sessions, captured
// output with its limit and deadline, and that the destructor leaves neither
// a zombie nor an orphan behind (checked with waitpid and kill(pid, 0)).
#include "common/child_process.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <sstream>

#include "tests/test_util.h"

namespace trainyard {
namespace {

ChildPlan Sh(const std::string& script) {
  ChildPlan plan;
  plan.argv = {"sh", "-c", script};
  return plan;
}

ChildProcess StartOk(const ChildPlan& plan) {
  absl::StatusOr<ChildProcess> child = ChildProcess::Start(plan);
  EXPECT_TRUE(child.ok()) << child.status();
  return child.ok() ? std::move(*child) : ChildProcess();
}

// What `plan` writes on its stdout (a pipe), read to its end.
std::string Stdout(ChildPlan plan) {
  plan.fds[1] = ChildFd::Pipe();
  ChildProcess child = StartOk(plan);
  return child.Capture(std::chrono::steady_clock::now() + std::chrono::seconds(30), 1 << 20).streams[1];
}

// Reads one line from `fd` (blocking).
std::string ReadLine(int fd) {
  std::string line;
  char c;
  while (read(fd, &c, 1) == 1 && c != '\n') line.push_back(c);
  return line;
}

TEST(ChildProcessTest, ExitCodesAreReported) {
  ChildProcess child = StartOk(Sh("exit 3"));
  const ChildExit e = child.Wait();
  EXPECT_TRUE(e.exited());
  EXPECT_EQ(e.code, 3);
  EXPECT_EQ(e.ShellCode(), 3);
  // Reaped once; asking again gives the same answer.
  ASSERT_TRUE(child.Poll().has_value());
  EXPECT_EQ(child.Poll()->code, 3);
}

TEST(ChildProcessTest, SignalsAreReported) {
  ChildPlan plan;
  plan.argv = {"sleep", "30"};
  ChildProcess child = StartOk(plan);
  EXPECT_FALSE(child.Poll().has_value()) << "still running";
  EXPECT_TRUE(child.Signal(SIGTERM));
  const ChildExit e = child.Wait();
  EXPECT_TRUE(e.signaled());
  EXPECT_EQ(e.signal, SIGTERM);
  EXPECT_EQ(e.ShellCode(), 128 + SIGTERM);
}

TEST(ChildProcessTest, TheChildGetsDefaultSignalHandling) {
  // A signal this process ignores is not ignored by the child.
  struct sigaction ignore {
  }, old{};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGINT, &ignore, &old);
  ChildPlan plan;
  plan.argv = {"sleep", "30"};
  ChildProcess child = StartOk(plan);
  sigaction(SIGINT, &old, nullptr);
  child.Signal(SIGINT);
  const ChildExit e = child.Wait();
  EXPECT_TRUE(e.signaled());
  EXPECT_EQ(e.signal, SIGINT);
}

TEST(ChildProcessTest, CaptureKeepsStreamsApartAndLimitsThem) {
  ChildPlan plan = Sh("echo err >&2; head -c 100000 /dev/zero; exit 4");
  plan.fds = {{1, ChildFd::Pipe()}, {2, ChildFd::Pipe()}};
  ChildProcess child = StartOk(plan);
  ChildOutput out = child.Capture(std::chrono::steady_clock::now() + std::chrono::seconds(30), 1000);
  EXPECT_FALSE(out.timed_out);
  EXPECT_EQ(out.streams[1].size(), 1000u) << "the rest is read and dropped: the child is not blocked";
  EXPECT_EQ(out.streams[2], "err\n");
  EXPECT_EQ(out.exit.code, 4);
}

TEST(ChildProcessTest, BothStreamsIntoOnePipe) {
  ChildPlan plan = Sh("echo out; echo err >&2");
  plan.fds[2] = ChildFd::SameAs(1);
  EXPECT_EQ(Stdout(plan), "out\nerr\n");
}

TEST(ChildProcessTest, CaptureKillsTheChildAtTheDeadline) {
  ChildPlan plan;
  plan.argv = {"sleep", "30"};
  plan.fds[1] = ChildFd::Pipe();
  ChildProcess child = StartOk(plan);
  const auto t0 = std::chrono::steady_clock::now();
  ChildOutput out = child.Capture(t0 + std::chrono::milliseconds(200), 100);
  EXPECT_TRUE(out.timed_out);
  EXPECT_TRUE(out.exit.signaled());
  EXPECT_EQ(out.exit.signal, SIGKILL);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}

TEST(ChildProcessTest, DescriptorPlan) {
  TempDir dir;
  // A file appended to, /dev/null as input, this process's descriptor as 3,
  // a pipe the child reads.
  const std::string log = dir.path() + "/log";
  std::ofstream(log) << "before\n";
  int sock[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sock), 0);
  ChildPlan plan = Sh("cat; echo to-log; echo to-three >&3; read line <&4; echo \"$line\" >&3");
  plan.fds = {
      {0, ChildFd::Null()}, {1, ChildFd::AppendTo(log)}, {3, ChildFd::Parent(sock[1])}, {4, ChildFd::InputPipe()}};
  ChildProcess child = StartOk(plan);
  close(sock[1]);
  EXPECT_EQ(ReadLine(sock[0]), "to-three");
  ASSERT_GE(child.pipe(4), 0);
  ASSERT_EQ(write(child.pipe(4), "piped\n", 6), 6);
  child.ClosePipe(4);
  EXPECT_EQ(child.pipe(4), -1);
  EXPECT_EQ(ReadLine(sock[0]), "piped");
  EXPECT_EQ(child.Wait().code, 0);
  close(sock[0]);
  std::stringstream text;
  text << std::ifstream(log).rdbuf();
  EXPECT_EQ(text.str(), "before\nto-log\n") << "cat read /dev/null: nothing";
}

// A descriptor this process has open without close-on-exec (as a server
// inherits them from whatever started it) does not reach the child.
TEST(ChildProcessTest, OnlyThePlansDescriptorsReachTheChild) {
  TempDir dir;
  const int fd = open((dir.path() + "/secret").c_str(), O_CREAT | O_WRONLY, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(dup2(fd, 100), 100);  // no O_CLOEXEC
  close(fd);
  const std::string listed = Stdout(Sh("ls /proc/$$/fd"));
  close(100);
  std::istringstream in(listed);
  std::vector<std::string> fds;
  for (std::string f; in >> f;) fds.push_back(f);
  EXPECT_EQ(std::count(fds.begin(), fds.end(), "100"), 0) << listed;
  EXPECT_EQ(std::count(fds.begin(), fds.end(), "1"), 1) << listed;
}

// A log file someone planted (a hard link to another file) is not
// written to, nor given to the child's account.
TEST(ChildProcessTest, APlantedHardLinkIsNotWrittenTo) {
  TempDir dir;
  const std::string victim = dir.path() + "/victim", log = dir.path() + "/rank-1.log";
  std::ofstream(victim) << "keep\n";
  ASSERT_EQ(link(victim.c_str(), log.c_str()), 0);
  ChildPlan plan = Sh("echo written");
  plan.fds = {{1, ChildFd::AppendTo(log)}};
  absl::StatusOr<ChildProcess> child = ChildProcess::Start(plan);
  ASSERT_FALSE(child.ok());
  EXPECT_EQ(child.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(child.status().message().find("a hard link"), std::string_view::npos) << child.status();
  std::stringstream text;
  text << std::ifstream(victim).rdbuf();
  EXPECT_EQ(text.str(), "keep\n");
}

TEST(ChildProcessTest, DescriptorsMayTradePlaces) {
  // The child's 1 is this process's pipe that lands on the child's 2 and
  // the other way round: no move overwrites a source still to be moved.
  int a[2], b[2];
  ASSERT_EQ(pipe2(a, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(b, O_CLOEXEC), 0);
  ChildPlan plan = Sh("echo one; echo two >&2");
  plan.fds = {{1, ChildFd::Parent(b[1])}, {2, ChildFd::Parent(a[1])}};
  ChildProcess child = StartOk(plan);
  close(a[1]);
  close(b[1]);
  EXPECT_EQ(ReadLine(b[0]), "one");
  EXPECT_EQ(ReadLine(a[0]), "two");
  EXPECT_EQ(child.Wait().code, 0);
  close(a[0]);
  close(b[0]);
}

TEST(ChildProcessTest, Environment) {
  setenv("TRAINYARD_CHILD_TEST_KEEP", "kept", 1);
  setenv("TRAINYARD_CHILD_TEST_GONE", "here", 1);
  ChildPlan plan = Sh("echo \"$TRAINYARD_CHILD_TEST_KEEP|${TRAINYARD_CHILD_TEST_GONE-unset}|$HOME\"");
  plan.environment = {"HOME=/elsewhere"};
  plan.unset = {"TRAINYARD_CHILD_TEST_GONE"};
  EXPECT_EQ(Stdout(plan), "kept|unset|/elsewhere\n");
  plan.argv = {"/bin/sh", "-c", "echo \"${TRAINYARD_CHILD_TEST_KEEP-unset}|$HOME\""};
  plan.replace_environment = true;
  EXPECT_EQ(Stdout(plan), "unset|/elsewhere\n");
  unsetenv("TRAINYARD_CHILD_TEST_KEEP");
  unsetenv("TRAINYARD_CHILD_TEST_GONE");
}

// A child that closed its end of an input pipe (or ended) makes the write
// fail with EPIPE; this process gets no SIGPIPE, which would end it.
TEST(ChildProcessTest, WritingToAPipeTheChildClosedIsEpipeNotSigpipe) {
  ChildPlan plan = Sh("exec 3<&-; echo closed; exec sleep 30");
  plan.fds = {{1, ChildFd::Pipe()}, {3, ChildFd::InputPipe()}};
  absl::StatusOr<ChildProcess> child = ChildProcess::Start(plan);
  ASSERT_TRUE(child.ok()) << child.status();
  std::string out;
  char buf[64];
  while (out.find("closed\n") == std::string::npos) {
    const ssize_t n = read(child->pipe(1), buf, sizeof(buf));
    ASSERT_GT(n, 0);
    out.append(buf, static_cast<size_t>(n));
  }
  EXPECT_FALSE(child->WriteToPipe(3, "token\n"));
  EXPECT_EQ(errno, EPIPE);
  EXPECT_FALSE(child->WriteToPipe(7, "x"));
  EXPECT_EQ(errno, EBADF);
  // A child that reads gets what was written.
  ChildPlan reader = Sh("read -r line <&3; echo \"got $line\"");
  reader.fds = {{1, ChildFd::Pipe()}, {3, ChildFd::InputPipe()}};
  absl::StatusOr<ChildProcess> r = ChildProcess::Start(reader);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->WriteToPipe(3, "secret\n"));
  r->ClosePipe(3);
  ChildOutput o = r->Capture(std::chrono::steady_clock::now() + std::chrono::seconds(10), 1 << 10);
  EXPECT_EQ(o.streams[1], "got secret\n");
}

TEST(ChildProcessTest, WorkingDirectory) {
  TempDir dir;
  ChildPlan plan;
  plan.argv = {"pwd"};
  plan.working_dir = dir.path();
  EXPECT_EQ(Stdout(plan), dir.path() + "\n");
  plan.working_dir = dir.path() + "/missing";
  absl::StatusOr<ChildProcess> child = ChildProcess::Start(plan);
  ASSERT_FALSE(child.ok());
  EXPECT_NE(child.status().message().find("cannot enter working_dir " + plan.working_dir), std::string::npos)
      << child.status();
}

TEST(ChildProcessTest, AProgramThatCannotRunIsAnError) {
  ChildPlan plan;
  plan.argv = {"/nonexistent/prog9", "x"};
  absl::StatusOr<ChildProcess> child = ChildProcess::Start(plan);
  ASSERT_FALSE(child.ok());
  EXPECT_EQ(child.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(child.status().message().find("/nonexistent/prog9"), std::string::npos) << child.status();
  plan.argv = {"trainyard-no-such-program-on-path"};
  EXPECT_EQ(ChildProcess::Start(plan).status().code(), absl::StatusCode::kNotFound);
  // The failed child was reaped.
  EXPECT_EQ(waitpid(-1, nullptr, WNOHANG), -1);
}

// As root (CI runs the tests as root): the child runs as the account, with
// its groups, no capability and no_new_privs, and its log file is the
// account's. `nobody` is on every Debian system.
TEST(ChildProcessTest, RunsAsAnotherAccountWithNothingOfThisOne) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to switch accounts";
  absl::StatusOr<UnixAccount> nobody = LookupUnixAccount("nobody");
  ASSERT_TRUE(nobody.ok()) << nobody.status();
  TempDir dir;
  const std::string log = dir.path() + "/out.log";
  ChildPlan plan = Sh("id -u; id -g; grep -E '^(CapEff|CapPrm|CapAmb|NoNewPrivs)' /proc/self/status; id -G");
  plan.run_as = *nobody;
  plan.fds[1] = ChildFd::AppendTo(log);
  StartOk(plan).Wait();
  std::ifstream in(log);
  std::stringstream got;
  got << in.rdbuf();
  const std::string text = got.str();
  EXPECT_NE(text.find(std::to_string(nobody->uid) + "\n" + std::to_string(nobody->gid) + "\n"), std::string::npos)
      << text;
  for (const char* line :
       {"CapEff:\t0000000000000000", "CapPrm:\t0000000000000000", "CapAmb:\t0000000000000000", "NoNewPrivs:\t1"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << " in " << text;
  }
  // Not root's groups: exactly the account's.
  EXPECT_EQ(text.find("\n0\n"), std::string::npos) << text;
  struct stat st {};
  ASSERT_EQ(stat(log.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, nobody->uid);
  EXPECT_EQ(st.st_gid, nobody->gid);
  // A log path that is a symbolic link is refused, not followed.
  const std::string target = dir.path() + "/target";
  std::ofstream(target) << "x";
  ASSERT_EQ(symlink(target.c_str(), (dir.path() + "/link.log").c_str()), 0);
  plan.fds[1] = ChildFd::AppendTo(dir.path() + "/link.log");
  EXPECT_FALSE(ChildProcess::Start(plan).ok());
  ASSERT_EQ(stat(target.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
}

TEST(ChildProcessTest, NoSuchAccountAndRootAreRefused) {
  EXPECT_EQ(LookupUnixAccount("trainyard-no-such-user").status().code(), absl::StatusCode::kNotFound);
  absl::StatusOr<UnixAccount> root = LookupUnixAccount("root");
  ASSERT_FALSE(root.ok());
  EXPECT_NE(root.status().message().find("uid 0"), std::string::npos) << root.status();
}

TEST(ChildProcessTest, GroupsAndSessions) {
  ChildPlan plan;
  plan.argv = {"sleep", "30"};
  ChildProcess same = StartOk(plan);
  EXPECT_EQ(getpgid(same.pid()), getpgid(0));
  plan.group = ChildPlan::Group::kNewGroup;
  ChildProcess group = StartOk(plan);
  EXPECT_EQ(getpgid(group.pid()), group.pid());
  EXPECT_EQ(getsid(group.pid()), getsid(0));
  plan.group = ChildPlan::Group::kNewSession;
  ChildProcess session = StartOk(plan);
  EXPECT_EQ(getsid(session.pid()), session.pid());
}

TEST(ChildProcessTest, TheDestructorKillsTheGroupAndReapsTheChild) {
  // This process adopts orphans, so the grandchild's end can be awaited here.
  ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  pid_t pid = 0, grandchild = 0;
  {
    ChildPlan plan = Sh("sleep 1000 </dev/null >/dev/null 2>&1 & echo $!; wait");
    plan.group = ChildPlan::Group::kNewGroup;
    plan.fds[1] = ChildFd::Pipe();
    ChildProcess child = StartOk(plan);
    pid = child.pid();
    grandchild = std::stoi(ReadLine(child.pipe(1)));
    ASSERT_EQ(kill(grandchild, 0), 0);
  }
  // The child is reaped: no zombie of it is left to wait for.
  EXPECT_EQ(waitpid(pid, nullptr, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
  EXPECT_NE(kill(pid, 0), 0);
  // The grandchild in its group was killed too.
  int status = 0;
  const bool killed =
      WaitFor([&] { return waitpid(grandchild, &status, WNOHANG) == grandchild; }, std::chrono::seconds(10));
  if (!killed) {
    kill(grandchild, SIGKILL);
    waitpid(grandchild, nullptr, 0);
  }
  ASSERT_TRUE(killed) << "the grandchild was left running";
  EXPECT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
  EXPECT_NE(kill(grandchild, 0), 0);
  prctl(PR_SET_CHILD_SUBREAPER, 0);
}

TEST(ChildProcessTest, AMovedChildIsOwnedOnce) {
  ChildPlan plan;
  plan.argv = {"sleep", "30"};
  ChildProcess a = StartOk(plan);
  const pid_t pid = a.pid();
  ChildProcess b = std::move(a);
  EXPECT_FALSE(a.started());
  EXPECT_EQ(b.pid(), pid);
  b = ChildProcess();  // kills and reaps
  EXPECT_EQ(waitpid(pid, nullptr, WNOHANG), -1);
}

TEST(ChildProcessTest, ReleaseLeavesTheChildRunning) {
  ChildPlan plan;
  plan.argv = {"sleep", "30"};
  plan.group = ChildPlan::Group::kNewGroup;
  pid_t pid = 0;
  {
    ChildProcess child = StartOk(plan);
    pid = child.Release();
    EXPECT_FALSE(child.started());
  }
  EXPECT_EQ(kill(pid, 0), 0) << "still running";
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
}

}  // namespace
}  // namespace trainyard
