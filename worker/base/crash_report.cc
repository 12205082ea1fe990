#include "worker/base/crash_report.h"

#include <execinfo.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>

namespace trainyard {
namespace {

const char* g_program = "trainyard";

void Write(const char* text) {
  const ssize_t ignored = ::write(STDERR_FILENO, text, strlen(text));
  (void)ignored;
}

void WriteHex(const char* label, uintptr_t v) {
  char buf[2 + 16 + 1] = "0x";
  for (int i = 0; i < 16; ++i) buf[2 + i] = "0123456789abcdef"[(v >> (60 - 4 * i)) & 0xf];
  buf[18] = 0;
  Write(label);
  Write(buf);
}

void OnFatalSignal(int sig, siginfo_t* info, void* context) {
  // Only async-signal-safe calls (backtrace was loaded at install).
  Write(g_program);
  Write(": fatal signal ");
  char number[8];
  int n = 0;
  for (int v = sig; v > 0 && n < 7; v /= 10) number[n++] = static_cast<char>('0' + v % 10);
  for (int i = 0; i < n; ++i) {
    const char c[2] = {number[n - 1 - i], 0};
    Write(c);
  }
  Write(" (");
  Write(sigabbrev_np(sig) != nullptr ? sigabbrev_np(sig) : "?");
  Write(")");
  WriteHex(" at address ", reinterpret_cast<uintptr_t>(info->si_addr));
#if defined(__x86_64__)
  const auto* uc = static_cast<const ucontext_t*>(context);
  const uintptr_t pc = static_cast<uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]);
  WriteHex(", instruction ", pc);
  if (pc < 4096) {
    // A call through a null pointer: the unwinder cannot go on from there,
    // but the caller's return address is on top of the stack.
    void* caller = *reinterpret_cast<void**>(uc->uc_mcontext.gregs[REG_RSP]);
    Write("; called from:\n");
    backtrace_symbols_fd(&caller, 1, STDERR_FILENO);
  }
#else
  (void)context;
#endif
  Write("\nstack of the thread that received it:\n");
  void* frames[64];
  const int count = backtrace(frames, 64);
  backtrace_symbols_fd(frames, count, STDERR_FILENO);
  raise(sig);  // the handler was reset: the default action (core, exit status)
}

}  // namespace

void InstallCrashReport(const char* program) {
  g_program = program;
  void* warm[1];
  backtrace(warm, 1);  // loads libgcc's unwinder now, not in the handler
  struct sigaction sa {};
  sa.sa_sigaction = OnFatalSignal;
  sa.sa_flags = SA_RESETHAND | SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) sigaction(sig, &sa, nullptr);
}

}  // namespace trainyard
