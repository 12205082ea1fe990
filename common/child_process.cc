#include "common/child_process.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/close_range.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"

extern char** environ;

namespace trainyard {
namespace {

// The child's environment, as ChildPlan describes it.
std::vector<std::string> Environment(const ChildPlan& plan) {
  auto name_of = [](std::string_view entry) { return entry.substr(0, entry.find('=')); };
  std::vector<std::string_view> dropped;
  for (const std::string& u : plan.unset) dropped.push_back(u);
  for (const std::string& e : plan.environment) dropped.push_back(name_of(e));
  std::vector<std::string> env;
  if (!plan.replace_environment) {
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string_view entry(*e);
      if (std::find(dropped.begin(), dropped.end(), name_of(entry)) == dropped.end()) env.emplace_back(entry);
    }
  }
  env.insert(env.end(), plan.environment.begin(), plan.environment.end());
  return env;
}

std::vector<char*> Pointers(std::vector<std::string>& strings) {
  std::vector<char*> p;
  for (std::string& s : strings) p.push_back(s.data());
  p.push_back(nullptr);
  return p;
}

void CloseAll(std::vector<int>& fds) {
  for (int fd : fds) close(fd);
  fds.clear();
}

// What the child reports on its error pipe when it cannot exec.
struct StartFailure {
  int stage = 0;  // 1: working_dir, 2: exec, 3: descriptors, 4: the account
  int error = 0;
};

ChildExit FromStatus(int status) {
  ChildExit e;
  if (WIFEXITED(status)) {
    e.how = ChildExit::How::kExited;
    e.code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    e.how = ChildExit::How::kSignaled;
    e.signal = WTERMSIG(status);
  }
  return e;
}

}  // namespace

absl::StatusOr<ChildProcess> ChildProcess::Start(const ChildPlan& plan) {
  if (plan.argv.empty()) return absl::InvalidArgumentError("ChildProcess: no program");
  // Everything the child needs is made here: after fork it only calls
  // async-signal-safe functions.
  std::vector<std::string> env = Environment(plan);
  std::vector<char*> envp = Pointers(env);
  std::vector<std::string> argv_strings = plan.argv;
  std::vector<char*> argv = Pointers(argv_strings);
  const bool search_path = plan.argv[0].find('/') == std::string::npos;

  // The sources of the child's descriptors, opened close-on-exec here.
  std::vector<int> opened;                  // closed here once the child has them
  ChildProcess child;                       // owns the pipes' ends from here on
  std::vector<std::pair<int, int>> moves;   // child fd <- fd here
  std::vector<std::pair<int, int>> copies;  // child fd <- child fd (kSameAs)
  std::vector<int> keep;                    // kInherit above 2: kept open
  int highest = 2;
  for (const auto& [target, what] : plan.fds) {
    highest = std::max(highest, target);
    switch (what.kind) {
      case ChildFd::Kind::kInherit:
        if (target > 2) keep.push_back(target);
        break;
      case ChildFd::Kind::kNull:
      case ChildFd::Kind::kFile: {
        const bool null = what.kind == ChildFd::Kind::kNull;
        const int flags =
            null ? (target == 0 ? O_RDONLY : O_WRONLY) : (O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_NOCTTY);
        const char* path = null ? "/dev/null" : what.path.c_str();
        const int fd = open(path, flags | O_CLOEXEC, 0640);
        if (fd < 0) {
          const int err = errno;
          CloseAll(opened);
          return absl::InternalError(absl::StrCat("cannot open ", path, ": ", std::strerror(err)));
        }
        opened.push_back(fd);
        // A file in a directory the job's account writes (a rank's log)
        // may have been planted there: only a regular file with one name,
        // this process's or the account's, is written to (and given away).
        struct stat st {};
        if (!null && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1 ||
                      (st.st_uid != geteuid() && !(plan.run_as && st.st_uid == plan.run_as->uid)))) {
          CloseAll(opened);
          return absl::FailedPreconditionError(
              absl::StrCat("refusing to write to ", path,
                           ": not a regular file with one name owned by this process or the job's "
                           "account (a hard link, a device or another account's file put in its place)"));
        }
        if (!null && plan.run_as) {
          if (absl::Status s = GiveTo(fd, &*plan.run_as, path); !s.ok()) {
            CloseAll(opened);
            return s;
          }
        }
        moves.emplace_back(target, fd);
        break;
      }
      case ChildFd::Kind::kPipe: {
        int p[2];
        if (pipe2(p, O_CLOEXEC) != 0) {
          const int err = errno;
          CloseAll(opened);
          return absl::InternalError(absl::StrCat("pipe: ", std::strerror(err)));
        }
        const bool child_reads = what.input;
        if (child_reads) child.inputs_.push_back(target);
        opened.push_back(p[child_reads ? 0 : 1]);
        moves.emplace_back(target, p[child_reads ? 0 : 1]);
        child.pipes_[target] = p[child_reads ? 1 : 0];
        break;
      }
      case ChildFd::Kind::kParent: moves.emplace_back(target, what.fd); break;
      case ChildFd::Kind::kSameAs: copies.emplace_back(target, what.fd); break;
    }
  }
  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0) {
    const int err = errno;
    CloseAll(opened);
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(err)));
  }
  const std::vector<gid_t> groups = plan.run_as ? plan.run_as->groups : std::vector<gid_t>{};
  const pid_t parent = getpid();
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);
  sigset_t no_signals;
  sigemptyset(&no_signals);

  const pid_t pid = fork();
  if (pid < 0) {
    const int err = errno;
    CloseAll(opened);
    close(report[0]);
    close(report[1]);
    return absl::ResourceExhaustedError(absl::StrCat("fork: ", std::strerror(err)));
  }
  if (pid == 0) {
    auto fail = [&](int stage) {
      const StartFailure f{stage, errno};
      (void)!write(report[1], &f, sizeof(f));
      _exit(127);
    };
    if (plan.group == ChildPlan::Group::kNewSession) setsid();
    if (plan.group == ChildPlan::Group::kNewGroup) setpgid(0, 0);
    for (int sig = 1; sig < NSIG; ++sig) {
      if (sig != SIGKILL && sig != SIGSTOP) sigaction(sig, &default_action, nullptr);
    }
    sigprocmask(SIG_SETMASK, &no_signals, nullptr);
    // Nothing this process inherited or opened reaches the child unless the
    // plan says so: every descriptor above stderr closes on exec (the plan's
    // targets are set up below, by dup2, which clears the flag on them).
    if (syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
      for (int fd = 3; fd < 65536; ++fd) fcntl(fd, F_SETFD, FD_CLOEXEC);
    }
    // Each source to a descriptor above every target first, so that no
    // move overwrites a source still to be moved.
    for (auto& [target, source] : moves) {
      source = fcntl(source, F_DUPFD_CLOEXEC, highest + 1);
      if (source < 0) fail(3);
    }
    for (const auto& [target, source] : moves) {
      if (dup2(source, target) < 0) fail(3);
    }
    for (const auto& [target, same_as] : copies) {
      if (dup2(same_as, target) < 0) fail(3);
    }
    for (int fd : keep) fcntl(fd, F_SETFD, 0);
    if (plan.run_as) {
      const UnixAccount& a = *plan.run_as;
      if (setgroups(groups.size(), groups.data()) != 0 || setresgid(a.gid, a.gid, a.gid) != 0 ||
          setresuid(a.uid, a.uid, a.uid) != 0) {
        fail(4);
      }
      // Nothing of this process's privileges goes with it: a server given
      // capabilities (ambient ones too) keeps them across setresuid.
      if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL) fail(4);
      __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
      __user_cap_data_struct none[_LINUX_CAPABILITY_U32S_3] = {};
      if (syscall(SYS_capset, &header, none) != 0) fail(4);
    }
    if ((plan.run_as || plan.no_new_privileges) && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) fail(4);
    if (plan.allow_parent_tracer) prctl(PR_SET_PTRACER, parent, 0, 0, 0);
    if (plan.umask) ::umask(*plan.umask);
    if (!plan.working_dir.empty() && chdir(plan.working_dir.c_str()) != 0) fail(1);
    if (search_path) {
      execvpe(argv[0], argv.data(), envp.data());
    } else {
      execve(argv[0], argv.data(), envp.data());
    }
    fail(2);
  }
  child.pid_ = pid;
  child.leads_group_ = plan.group != ChildPlan::Group::kSame;
  if (plan.group == ChildPlan::Group::kNewGroup) setpgid(pid, pid);  // so kill(-pid) never races the child
  CloseAll(opened);
  close(report[1]);
  StartFailure failure;
  ssize_t n;
  while ((n = read(report[0], &failure, sizeof(failure))) < 0 && errno == EINTR) {
  }
  close(report[0]);
  if (n == static_cast<ssize_t>(sizeof(failure))) {
    child.Wait();
    child.pid_ = -1;
    const std::string why = std::strerror(failure.error);
    if (failure.stage == 1) {
      return absl::FailedPreconditionError(
          absl::StrCat(plan.argv[0], ": cannot enter working_dir ", plan.working_dir, ": ", why));
    }
    if (failure.stage == 3) return absl::InternalError(absl::StrCat(plan.argv[0], ": descriptors: ", why));
    if (failure.stage == 4) {
      return absl::FailedPreconditionError(
          absl::StrCat(plan.argv[0], ": cannot run as account ", plan.run_as ? plan.run_as->name : "", ": ", why));
    }
    const std::string message = absl::StrCat("cannot run ", plan.argv[0], ": ", why);
    return failure.error == ENOENT ? absl::NotFoundError(message) : absl::FailedPreconditionError(message);
  }
  return child;
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept { *this = std::move(other); }

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
  if (this == &other) return *this;
  Close();
  pid_ = std::exchange(other.pid_, -1);
  leads_group_ = std::exchange(other.leads_group_, false);
  reaped_ = std::exchange(other.reaped_, false);
  exit_ = std::exchange(other.exit_, ChildExit{});
  pipes_ = std::move(other.pipes_);
  other.pipes_.clear();
  inputs_ = std::move(other.inputs_);
  other.inputs_.clear();
  return *this;
}

ChildProcess::~ChildProcess() { Close(); }

void ChildProcess::Close() {
  for (auto& [target, fd] : pipes_) close(fd);
  pipes_.clear();
  if (pid_ <= 0) return;
  Signal(SIGKILL);
  if (!reaped_) Wait();
  pid_ = -1;
  reaped_ = false;
  exit_ = ChildExit{};
}

int ChildProcess::pipe(int child_fd) const {
  auto it = pipes_.find(child_fd);
  return it == pipes_.end() ? -1 : it->second;
}

bool ChildProcess::WriteToPipe(int child_fd, std::string_view data) const {
  const int fd = pipe(child_fd);
  if (fd < 0) {
    errno = EBADF;
    return false;
  }
  // SIGPIPE blocked for this thread while it writes; the one a closed pipe
  // raises is taken before it is unblocked.
  sigset_t pipe_only, before;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_only, &before);
  size_t done = 0;
  int err = 0;
  while (done < data.size()) {
    const ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      err = errno;
      break;
    }
    done += static_cast<size_t>(n);
  }
  if (err == EPIPE) {
    const timespec now{};
    sigtimedwait(&pipe_only, nullptr, &now);
  }
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
  errno = err;
  return done == data.size();
}

void ChildProcess::ClosePipe(int child_fd) {
  auto it = pipes_.find(child_fd);
  if (it == pipes_.end()) return;
  close(it->second);
  pipes_.erase(it);
}

bool ChildProcess::Signal(int sig) const {
  if (pid_ <= 0) return false;
  if (leads_group_ && kill(-pid_, sig) == 0) return true;
  return !reaped_ && kill(pid_, sig) == 0;
}

std::optional<ChildExit> ChildProcess::Poll() {
  if (pid_ <= 0) return std::nullopt;
  if (reaped_) return exit_;
  int status = 0;
  const pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    reaped_ = true;
    exit_ = FromStatus(status);
    return exit_;
  }
  if (r < 0 && errno == ECHILD) {
    reaped_ = true;
    return exit_;
  }
  return std::nullopt;
}

ChildExit ChildProcess::Wait() {
  if (pid_ <= 0 || reaped_) return exit_;
  int status = 0;
  pid_t r;
  while ((r = waitpid(pid_, &status, 0)) < 0 && errno == EINTR) {
  }
  reaped_ = true;
  if (r == pid_) exit_ = FromStatus(status);
  return exit_;
}

ChildOutput ChildProcess::Capture(std::chrono::steady_clock::time_point deadline, size_t limit) {
  ChildOutput out;
  std::vector<pollfd> fds;
  std::vector<int> targets;
  for (const auto& [target, fd] : pipes_) {
    if (std::find(inputs_.begin(), inputs_.end(), target) != inputs_.end()) continue;  // the child reads it
    fds.push_back({fd, POLLIN, 0});
    targets.push_back(target);
    out.streams[target];
  }
  size_t open_fds = fds.size();
  char buf[4096];
  while (open_fds > 0) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) {
      out.timed_out = true;
      break;
    }
    for (pollfd& p : fds) p.revents = 0;
    if (poll(fds.data(), fds.size(), static_cast<int>(std::min<int64_t>(left, 60'000))) < 0 && errno != EINTR) break;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const ssize_t n = read(fds[i].fd, buf, sizeof(buf));
      if (n > 0) {
        std::string& s = out.streams[targets[i]];
        if (s.size() < limit) s.append(buf, std::min<size_t>(static_cast<size_t>(n), limit - s.size()));
      } else if (n == 0 || errno != EINTR) {
        ClosePipe(targets[i]);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (int target : targets) ClosePipe(target);
  if (out.timed_out) Signal(SIGKILL);
  out.exit = Wait();
  return out;
}

pid_t ChildProcess::Release() {
  for (auto& [target, fd] : pipes_) close(fd);
  pipes_.clear();
  return std::exchange(pid_, -1);
}

}  // namespace trainyard
