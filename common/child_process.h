// ChildProcess: the one way Trainyard starts another program. A plan says
// what each file descriptor of the child is (inherited, /dev/null, a file, a
// pipe this process reads, one of this process's descriptors), its
// environment (this process's with variables added or removed, or a new one),
// whether it leads a new process group or session, and where it runs. The
// object owns the child: its destructor kills what is still running (the
// whole group when the child leads one) and reaps it, unless Release() gave
// the child up first.
#ifndef TRAINYARD_COMMON_CHILD_PROCESS_H_
#define TRAINYARD_COMMON_CHILD_PROCESS_H_

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/unix_account.h"

namespace trainyard {

// What one file descriptor of the child is.
struct ChildFd {
  enum class Kind { kInherit, kNull, kFile, kPipe, kParent, kSameAs };
  Kind kind = Kind::kInherit;
  bool input = false;  // kPipe: the child reads it (else the child writes it)
  std::string path;    // kFile: opened for writing, created (0640), appended to
  int fd = -1;         // kParent: this process's descriptor; kSameAs: the child's descriptor it copies

  static ChildFd Inherit() { return {}; }
  // /dev/null (read-only for fd 0, write-only otherwise).
  static ChildFd Null() { return {Kind::kNull}; }
  // A file opened for appending, created when missing (never through a
  // symbolic link at its last component); given to the plan's run_as
  // account when there is one.
  static ChildFd AppendTo(std::string path) { return {Kind::kFile, false, std::move(path)}; }
  // A pipe the child writes; this process reads the other end
  // (ChildProcess::pipe, Capture).
  static ChildFd Pipe() { return {Kind::kPipe}; }
  // A pipe the child reads; this process writes the other end.
  static ChildFd InputPipe() { return {Kind::kPipe, true}; }
  // One of this process's descriptors (it stays open here).
  static ChildFd Parent(int parent_fd) { return {Kind::kParent, false, "", parent_fd}; }
  // The same open file as the child's descriptor `child_fd` (2 as 1: both
  // streams into one pipe).
  static ChildFd SameAs(int child_fd) { return {Kind::kSameAs, false, "", child_fd}; }
};

// How a child ended.
struct ChildExit {
  enum class How { kExited, kSignaled, kUnknown };  // kUnknown: reaped elsewhere (ECHILD)
  How how = How::kUnknown;
  int code = -1;   // kExited: the exit status
  int signal = 0;  // kSignaled: the signal

  bool exited() const { return how == How::kExited; }
  bool signaled() const { return how == How::kSignaled; }
  // A shell's $?: the exit status, or 128 + the signal; -1 when unknown.
  int ShellCode() const { return exited() ? code : signaled() ? 128 + signal : -1; }
};

struct ChildPlan {
  // argv[0] is looked up on PATH when it has no '/'.
  std::vector<std::string> argv;
  // The child's descriptors; 0, 1 and 2 are inherited unless named here.
  // Every other descriptor of this process is closed in the child (all are
  // opened close-on-exec).
  std::map<int, ChildFd> fds;
  // The environment: this process's (or none, with `replace_environment`),
  // less the variables in `unset`, with `environment` ("NAME=value") added,
  // replacing variables of the same names.
  std::vector<std::string> environment;
  std::vector<std::string> unset;
  bool replace_environment = false;
  enum class Group { kSame, kNewGroup, kNewSession };
  Group group = Group::kSame;
  std::string working_dir;  // empty: this process's
  // Lets this process and the processes it starts trace the child (py-spy,
  // which is no ancestor of it, under Yama's ptrace_scope 1); no one else
  // gains anything.
  bool allow_parent_tracer = false;
  // The account the child runs as (uid, primary and supplementary groups
  // set, every capability dropped, no_new_privs); none: this process's.
  // Needs CanSwitchAccounts.
  std::optional<UnixAccount> run_as;
  // prctl(PR_SET_NO_NEW_PRIVS): no exec gains privileges (set-user-ID
  // programs, file capabilities). Always on with run_as.
  bool no_new_privileges = false;
  // The child's file mode creation mask; none: this process's.
  std::optional<mode_t> umask;
};

// What Capture read.
struct ChildOutput {
  std::map<int, std::string> streams;  // by the child's descriptor: at most `limit` bytes each
  bool timed_out = false;              // killed (SIGKILL) at the deadline
  ChildExit exit;
};

class ChildProcess {
 public:
  ChildProcess() = default;  // no child
  // Starts the plan's program. The child's signal dispositions are the
  // defaults and its signal mask is empty. An error names argv[0] when it
  // cannot be started (NotFound when there is no such program, else
  // FailedPrecondition; a working_dir it cannot enter, or a run_as account
  // it cannot take, is an error too).
  static absl::StatusOr<ChildProcess> Start(const ChildPlan& plan);

  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  // Kills (SIGKILL) the child's group when it leads one, else the child if
  // it is not reaped yet, and reaps it; closes the pipes.
  ~ChildProcess();

  bool started() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  // This process's end of the pipe planned for the child's `child_fd`; -1
  // when there is none (or it was closed). Owned by this object.
  int pipe(int child_fd) const;
  void ClosePipe(int child_fd);
  // Writes `data` to the pipe the child reads as `child_fd`, without a
  // SIGPIPE for this process: false with errno EPIPE when the child has
  // closed its end (it ended, say), false with errno EBADF when there is no
  // such pipe. A write beyond the pipe's buffer blocks until the child reads.
  bool WriteToPipe(int child_fd, std::string_view data) const;

  // Sends `sig` to the child's group when it leads one (even after the
  // child was reaped: what it left in its group), else to the child while it
  // is not reaped. False when there was nothing to send it to.
  bool Signal(int sig) const;
  // Its end when it has ended (and reaps it; later calls give the same);
  // nullopt while it runs or when there is no child.
  std::optional<ChildExit> Poll();
  // Waits for its end (and reaps it).
  ChildExit Wait();
  // Reads every pipe to its end (or `deadline`) and waits for the child;
  // past the deadline, kills it (SIGKILL, its group when it leads one).
  // Bytes beyond `limit` per stream are read and dropped.
  ChildOutput Capture(std::chrono::steady_clock::time_point deadline, size_t limit);
  // Gives the child up: the destructor neither kills nor reaps it.
  pid_t Release();

 private:
  void Close();
  pid_t pid_ = -1;
  bool leads_group_ = false;
  bool reaped_ = false;
  ChildExit exit_;            // once reaped
  std::map<int, int> pipes_;  // child fd -> this process's end
  std::vector<int> inputs_;   // the child fds whose pipes the child reads
};

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_CHILD_PROCESS_H_
