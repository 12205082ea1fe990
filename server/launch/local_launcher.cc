// LocalLauncher: one trainyard-worker process per rank, forked on this host.
#include <signal.h>
#include <unistd.h>
#include "absl/status/statusor.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string_view>
#include <thread>

extern char** environ;

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/child_process.h"
#include "common/paths.h"
#include "server/launch/job_dirs.h"
#include "server/launch/launcher.h"

namespace trainyard {

namespace {

// The command line of process `pid`, split at its NULs; empty when it is
// gone (or a zombie).
std::vector<std::string> CommandLine(const std::string& pid) {
  std::ifstream in("/proc/" + pid + "/cmdline", std::ios::binary);
  const std::string cmd((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  size_t start = 0;
  for (size_t i = 0; i < cmd.size(); ++i) {
    if (cmd[i] != '\0') continue;
    args.push_back(cmd.substr(start, i - start));
    start = i + 1;
  }
  return args;
}

// The value after `flag` in `args`, or "".
std::string FlagValue(const std::vector<std::string>& args, std::string_view flag) {
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == flag) return args[i + 1];
  }
  return "";
}

// Whether `args` run `binary` (directly, or as an interpreter's script) for
// rank `rank` (any rank when negative) of `job_id`'s attempt `attempt`.
bool IsWorkerOf(const std::vector<std::string>& args, const std::string& binary, const std::string& job_id,
                int32_t attempt, int32_t rank) {
  const std::string base = std::filesystem::path(binary).filename().string();
  auto runs = [&](size_t i) { return i < args.size() && std::filesystem::path(args[i]).filename() == base; };
  return (runs(0) || runs(1)) && FlagValue(args, "--job") == job_id &&
         FlagValue(args, "--attempt") == std::to_string(attempt) &&
         (rank < 0 || FlagValue(args, "--rank") == std::to_string(rank));
}

// Sends `sig` to the worker's process group (it leads one), or to the
// process alone where it does not.
void Signal(pid_t pid, int sig) {
  if (kill(-pid, sig) != 0) kill(pid, sig);
}

using Clock = std::chrono::steady_clock;

// The descriptor a worker reads its token from.
constexpr int kTokenFd = 3;

// The environment of a worker that runs as `account`: made anew, with only
// what identifies the account and what tunes the run (locale, time zone,
// PATH, and the TRAINYARD_, NCCL_, CUDA_, GLOO_, OMP_, MKL_, MALLOC_, TORCH_
// and PYTORCH_ variables of the server's), never a secret of the server's
// (TRAINYARD_TOKEN, TRAINYARD_WORKER_TOKEN, TRAINYARD_CACHE_DIR: a cache is
// the account's own).
std::vector<std::string> AccountEnvironment(const UnixAccount& account) {
  std::vector<std::string> env = {"HOME=" + (account.home.empty() ? std::string("/") : account.home),
                                  "USER=" + account.name, "LOGNAME=" + account.name,
                                  "SHELL=" + (account.shell.empty() ? std::string("/bin/sh") : account.shell)};
  static const char* const kPrefixes[] = {"TRAINYARD_", "NCCL_",   "CUDA_",  "GLOO_",    "OMP_",
                                          "MKL_",       "MALLOC_", "TORCH_", "PYTORCH_", "LC_"};
  static const char* const kNames[] = {"PATH", "LANG", "LANGUAGE", "TZ"};
  static const char* const kNever[] = {"TRAINYARD_TOKEN", "TRAINYARD_WORKER_TOKEN", "TRAINYARD_CACHE_DIR"};
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const std::string_view name = entry.substr(0, entry.find('='));
    bool keep = std::find(std::begin(kNames), std::end(kNames), name) != std::end(kNames);
    for (const char* p : kPrefixes) keep = keep || name.rfind(p, 0) == 0;
    for (const char* n : kNever) keep = keep && name != n;
    if (keep) env.emplace_back(entry);
  }
  return env;
}

struct Proc {
  pid_t pid = -1;
  ChildProcess child;  // none when adopted
  std::string job_id;
  int32_t attempt = 0;
  int32_t rank = 0;
  // Started by an earlier coordinator: not a child, so it is watched
  // through /proc and its exit code is never known.
  bool adopted = false;
  bool term_sent = false;
  Clock::time_point kill_at = Clock::time_point::max();

  // Sends `sig` to the worker's process group.
  void Send(int sig) const {
    if (adopted) {
      Signal(pid, sig);
    } else {
      child.Signal(sig);
    }
  }
};

class LocalLauncher final : public Launcher {
 public:
  Traits traits() const override { return {.on_this_host = true, .replaces_ranks = true}; }
  LocalLauncher(LocalLauncherOptions options, ExitCallback on_exit)
      : options_(std::move(options)), on_exit_(std::move(on_exit)) {
    reaper_ = std::thread([this] { ReapLoop(); });
  }

  ~LocalLauncher() override {
    {
      absl::MutexLock lock(&mu_);
      shutting_down_ = true;
      for (auto& [pid, p] : procs_) p.Send(SIGKILL);
    }
    cv_.SignalAll();
    reaper_.join();
    // Reap what the loop left (it stops at shutdown): ChildProcess does.
    absl::MutexLock lock(&mu_);
    procs_.clear();
  }

  absl::Status Launch(const LaunchRequest& r) override {
    if (absl::Status s = PrepareJobDirs(r.log_dir, r.default_project, r.run_as ? &*r.run_as : nullptr); !s.ok()) {
      return s;
    }
    if (access(options_.worker_binary.c_str(), X_OK) != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("worker binary ", options_.worker_binary, " is not executable: ", strerror(errno)));
    }
    std::vector<pid_t> started;
    const int32_t ranks = r.start_ranks > 0 ? std::min(r.start_ranks, r.world_size) : r.world_size;
    for (int32_t rank = 0; rank < ranks; ++rank) {
      absl::StatusOr<pid_t> pid = StartRank(r, rank);
      if (!pid.ok()) {
        absl::MutexLock lock(&mu_);
        for (pid_t p : started) {
          procs_[p].Send(SIGKILL);
          procs_[p].term_sent = true;
        }
        return pid.status();
      }
      started.push_back(*pid);
    }
    cv_.SignalAll();
    return absl::OkStatus();
  }

  absl::Status LaunchRank(const LaunchRequest& r, int32_t rank) override {
    if (rank < 0 || rank >= r.world_size) {
      return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " is out of range (0..", r.world_size - 1, ")"));
    }
    {
      absl::MutexLock lock(&mu_);
      for (const auto& [pid, p] : procs_) {
        if (p.job_id == r.job_id && p.attempt == r.attempt && p.rank == rank) {
          return absl::FailedPreconditionError(
              absl::StrCat("rank ", rank, " of attempt ", r.attempt, " of job ", r.job_id, " is still running"));
        }
      }
    }
    absl::StatusOr<pid_t> pid = StartRank(r, rank);
    if (!pid.ok()) return pid.status();
    cv_.SignalAll();
    return absl::OkStatus();
  }

  void KillRank(const std::string& job_id, int32_t attempt, int32_t rank) override {
    absl::MutexLock lock(&mu_);
    for (auto& [pid, p] : procs_) {
      if (p.job_id != job_id || p.attempt != attempt || p.rank != rank) continue;
      p.Send(SIGKILL);
      p.term_sent = true;
    }
    cv_.SignalAll();
  }

  void Stop(const std::string& job_id, int32_t attempt) override {
    absl::MutexLock lock(&mu_);
    for (auto& [pid, p] : procs_) {
      if (p.job_id != job_id || p.attempt != attempt || p.term_sent) continue;
      // SIGINT: stop now, no checkpoint (SIGTERM asks a worker to checkpoint
      // first: preemption).
      p.Send(SIGINT);
      p.term_sent = true;
      p.kill_at = Clock::now() + options_.stop_grace;
    }
    cv_.SignalAll();
  }

  void Adopt(const LaunchRequest& r) override {
    std::map<int32_t, pid_t> found;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
      const std::string name = entry.path().filename().string();
      if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
      const std::vector<std::string> args = CommandLine(name);
      if (!IsWorkerOf(args, options_.worker_binary, r.job_id, r.attempt, /*rank=*/-1)) continue;
      int32_t rank = -1;
      if (!absl::SimpleAtoi(FlagValue(args, "--rank"), &rank) || rank < 0 || rank >= r.world_size) continue;
      found.emplace(rank, static_cast<pid_t>(std::stol(name)));
    }
    absl::MutexLock lock(&mu_);
    for (int32_t rank = 0; rank < r.world_size; ++rank) {
      auto it = found.find(rank);
      if (it == found.end()) {
        // Ended while the coordinator was away: its exit code, when it wrote
        // one; else how is unknown. Reported from the reaper, never under the
        // caller's locks.
        if (const std::optional<int> read = ReadExitCodeFile(absl::StrCat(r.log_dir, "/rank-", rank, ".exit"))) {
          const int code = *read;
          pending_.push_back(code > 128 ? RankExit::Killed(r.job_id, r.attempt, rank, code - 128)
                                        : RankExit::Exited(r.job_id, r.attempt, rank, code));
        } else {
          pending_.push_back(RankExit::Unknown(r.job_id, r.attempt, rank,
                                               absl::StrCat("rank ", rank, " of attempt ", r.attempt,
                                                            " was not running when the coordinator restarted")));
        }
        continue;
      }
      Proc& p = procs_[it->second];
      p.pid = it->second;
      p.job_id = r.job_id;
      p.attempt = r.attempt;
      p.rank = rank;
      p.adopted = true;
    }
    cv_.SignalAll();
  }

  void Detach() override {
    absl::MutexLock lock(&mu_);
    // They run on without this launcher: given up, neither killed nor reaped.
    for (auto& [pid, p] : procs_) p.child.Release();
    procs_.clear();
    pending_.clear();
  }

  int LiveProcesses(const std::string& job_id) override {
    absl::MutexLock lock(&mu_);
    int n = 0;
    for (auto& [pid, p] : procs_) n += p.job_id == job_id;
    return n;
  }

 private:
  // Starts rank `rank` of the attempt of `r` (its log appended to
  // rank-<r>.log) and follows it; returns its pid.
  absl::StatusOr<pid_t> StartRank(const LaunchRequest& r, int32_t rank) {
    std::vector<std::string> args = {
        options_.worker_binary,
        "--job",
        r.job_id,
        "--rank",
        std::to_string(rank),
        "--world-size",
        std::to_string(r.world_size),
        "--attempt",
        std::to_string(r.attempt),
        "--server",
        r.coordinator_addr,
        "--threads",
        std::to_string(r.threads_per_process),
        // Its exit code where a coordinator that was away finds it (Adopt).
        "--exit-status-dir",
        r.log_dir,
    };
    // An attempt adopted after a coordinator restart has no rendezvous port
    // of record: a replica job's ranks meet at their own stores instead.
    if (r.master_port > 0) {
      for (const std::string& a :
           {std::string("--master-addr"), r.master_addr, std::string("--master-port"), std::to_string(r.master_port)}) {
        args.push_back(a);
      }
    }
    if (r.replica_store) args.push_back("--replica-store");
    for (const auto& a : options_.extra_worker_args) args.push_back(a);
    std::string log_path = absl::StrCat(r.log_dir, "/rank-", rank, ".log");
    // torchrun's names for the rank's place on this host; a CUDA rank sees
    // only its own GPU (as cuda:0).
    std::vector<std::string> env = {absl::StrCat("LOCAL_RANK=", rank), absl::StrCat("LOCAL_WORLD_SIZE=", r.world_size)};
    if (!r.gpus.empty()) env.push_back(absl::StrCat("CUDA_VISIBLE_DEVICES=", r.gpus.at(rank)));
    absl::StatusOr<ChildProcess> child = Spawn(args, log_path, r.token, env, r.run_as);
    if (!child.ok()) return child.status();
    const pid_t pid = child->pid();
    absl::MutexLock lock(&mu_);
    Proc& p = procs_[pid];
    p.pid = pid;
    p.child = std::move(*child);
    p.job_id = r.job_id;
    p.attempt = r.attempt;
    p.rank = rank;
    return pid;
  }

  // The worker's token travels through a pipe it reads at start
  // (TRAINYARD_WORKER_TOKEN_FD), neither on its command line nor in its
  // environment, which /proc shows. The worker leads its own process group
  // (so a stop reaches its threads' children too) and logs to `log_path`.
  // With an account it runs as that account (AccountEnvironment).
  absl::StatusOr<ChildProcess> Spawn(const std::vector<std::string>& args, const std::string& log_path,
                                     const std::string& token, const std::vector<std::string>& extra_env,
                                     const std::optional<UnixAccount>& run_as) {
    ChildPlan plan;
    plan.argv = args;
    if (run_as) {
      plan.run_as = *run_as;
      plan.replace_environment = true;
      plan.environment = AccountEnvironment(*run_as);
      plan.umask = 077;
    }
    plan.environment.insert(plan.environment.end(), extra_env.begin(), extra_env.end());
    plan.environment.push_back(absl::StrCat("TRAINYARD_WORKER_TOKEN_FD=", kTokenFd));
    plan.unset = {"TRAINYARD_WORKER_TOKEN"};
    plan.fds = {{0, ChildFd::Null()},
                {1, ChildFd::AppendTo(log_path)},
                {2, ChildFd::SameAs(1)},
                {kTokenFd, ChildFd::InputPipe()}};
    plan.group = ChildPlan::Group::kNewGroup;
    absl::StatusOr<ChildProcess> child = ChildProcess::Start(plan);
    if (!child.ok()) return child;
    // A token is far below a pipe's buffer: this write never blocks. A
    // worker that ended before reading it (EPIPE) is reaped and reported
    // like any other.
    const bool sent = child->WriteToPipe(kTokenFd, token + "\n");
    const int err = errno;
    child->ClosePipe(kTokenFd);
    if (!sent && err != EPIPE) {
      return absl::InternalError(absl::StrCat("cannot hand the worker its token: ", strerror(err)));
    }
    return child;
  }

  void ReapLoop() {
    mu_.Lock();
    while (!shutting_down_) {
      std::vector<RankExit> exits;
      exits.swap(pending_);
      for (auto it = procs_.begin(); it != procs_.end();) {
        Proc& p = it->second;
        if (p.adopted) {
          if (IsWorkerOf(CommandLine(std::to_string(p.pid)), options_.worker_binary, p.job_id, p.attempt, p.rank)) {
            if (p.term_sent && Clock::now() >= p.kill_at) {
              p.Send(SIGKILL);
              p.kill_at = Clock::time_point::max();
            }
            ++it;
            continue;
          }
          exits.push_back(RankExit::Unknown(p.job_id, p.attempt, p.rank));
          it = procs_.erase(it);
          continue;
        }
        if (std::optional<ChildExit> end = p.child.Poll()) {
          // Unknown: not our child any more (reaped elsewhere).
          RankExit e = RankExit::Unknown(p.job_id, p.attempt, p.rank,
                                         absl::StrCat("rank ", p.rank, " ended; its exit status could not be read"));
          if (end->signaled()) e = RankExit::Killed(p.job_id, p.attempt, p.rank, end->signal);
          if (end->exited()) e = RankExit::Exited(p.job_id, p.attempt, p.rank, end->code);
          // Anything the worker left in its process group goes with it.
          p.Send(SIGKILL);
          exits.push_back(e);
          it = procs_.erase(it);
          continue;
        }
        if (p.term_sent && Clock::now() >= p.kill_at) {
          p.Send(SIGKILL);
          p.kill_at = Clock::time_point::max();
        }
        ++it;
      }
      if (!exits.empty()) {
        mu_.Unlock();
        on_exit_(exits);
        mu_.Lock();
        continue;
      }
      // Children are polled: SIGCHLD cannot be routed to one thread reliably
      // in a process that also hosts gRPC's threads.
      cv_.WaitWithTimeout(&mu_, absl::Milliseconds(procs_.empty() ? 500 : 50));
    }
    mu_.Unlock();
  }

  const LocalLauncherOptions options_;
  const ExitCallback on_exit_;
  absl::Mutex mu_;
  absl::CondVar cv_;
  std::map<pid_t, Proc> procs_ ABSL_GUARDED_BY(mu_);
  std::vector<RankExit> pending_ ABSL_GUARDED_BY(mu_);  // ends found by Adopt
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  std::thread reaper_;
};

}  // namespace

std::unique_ptr<Launcher> MakeLocalLauncher(LocalLauncherOptions options, Launcher::ExitCallback on_exit) {
  return std::make_unique<LocalLauncher>(std::move(options), std::move(on_exit));
}

}  // namespace trainyard
