// InstallCrashReport: a child process that calls through a null function
// pointer dies of SIGSEGV, as without the report, after writing the signal,
// the faulting instruction, its caller and its stack to stderr.
#include "worker/base/crash_report.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>  // program_invocation_short_name
#include <string>

namespace trainyard {
namespace {

void (*volatile g_null_function)() = nullptr;

TEST(CrashReport, ANullCallIsReportedAndStillKillsTheProcess) {
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    dup2(pipefd[1], STDERR_FILENO);
    close(pipefd[0]);
    InstallCrashReport("crash_report_test");
    g_null_function();
    _exit(0);  // not reached
  }
  close(pipefd[1]);
  std::string err;
  char buf[4096];
  for (ssize_t n; (n = read(pipefd[0], buf, sizeof(buf))) > 0;) err.append(buf, static_cast<size_t>(n));
  close(pipefd[0]);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status)) << err;
  EXPECT_EQ(WTERMSIG(status), SIGSEGV);
  EXPECT_NE(err.find("crash_report_test: fatal signal 11 (SEGV) at address 0x0000000000000000"), std::string::npos)
      << err;
  EXPECT_NE(err.find("instruction 0x0000000000000000; called from:"), std::string::npos) << err;
  // The caller's frame names its module: this test program.
  EXPECT_NE(err.find(std::string(program_invocation_short_name) + "("), std::string::npos)
      << "the caller's module: " << err;
  EXPECT_NE(err.find("stack of the thread that received it:"), std::string::npos) << err;
}

}  // namespace
}  // namespace trainyard
