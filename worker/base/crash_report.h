// On a fatal signal (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT), writes the
// program's name, the signal and the calling thread's stack (glibc's
// backtrace: library and exported function names, addresses) to stderr,
// then dies of the same signal: a crash leaves its place in the rank's log.
#ifndef TRAINYARD_WORKER_BASE_CRASH_REPORT_H_
#define TRAINYARD_WORKER_BASE_CRASH_REPORT_H_

namespace trainyard {

// `program` must outlive the process (a string literal).
void InstallCrashReport(const char* program);

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_BASE_CRASH_REPORT_H_
