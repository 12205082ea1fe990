// SlurmLauncher: one Slurm batch job per attempt. The batch script runs one
// `srun` step with a task per rank; each task is a trainyard-worker that
// takes its rank from SLURM_PROCID and its rendezvous host from the step's
// first node, under a small shell that writes its exit code to
// <log_dir>/rank-<r>.exit. A thread
// polls those files and `squeue`; ranks still unaccounted for when Slurm says
// the job has ended were killed.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "common/child_process.h"
#include "common/paths.h"
#include "server/launcher.h"
#include "server/slurm_batch.h"
#include "spdlog/spdlog.h"

namespace trainyard {
namespace {

using Clock = std::chrono::steady_clock;

struct CommandResult {
  int exit_code = -1;  // -1: could not run or timed out
  std::string out, err;
};

// Runs argv (no shell) with `extra_env` added, capturing stdout and stderr;
// kills it after `timeout`.
CommandResult RunCommand(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env,
                         std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  CommandResult res;
  ChildPlan plan;
  plan.argv = argv;
  plan.environment = extra_env;
  plan.fds = {{0, ChildFd::Null()}, {1, ChildFd::Pipe()}, {2, ChildFd::Pipe()}};
  absl::StatusOr<ChildProcess> child = ChildProcess::Start(plan);
  if (!child.ok()) {
    // As a shell reports a program it cannot run.
    res.exit_code = 127;
    res.err = std::string(child.status().message());
    return res;
  }
  ChildOutput out = child->Capture(Clock::now() + timeout, std::numeric_limits<size_t>::max());
  if (out.timed_out) {
    res.err = absl::StrCat(argv[0], " did not answer within ", timeout.count(), " ms");
    return res;
  }
  res.out = std::move(out.streams[1]);
  res.err = std::move(out.streams[2]);
  res.exit_code = out.exit.ShellCode();
  return res;
}

std::string Trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

bool Terminal(const std::string& state) {
  static const std::set<std::string> kEnded = {"COMPLETED", "FAILED",       "CANCELLED",     "TIMEOUT",
                                               "NODE_FAIL", "PREEMPTED",    "OUT_OF_MEMORY", "BOOT_FAIL",
                                               "DEADLINE",  "SPECIAL_EXIT", "REVOKED"};
  return kEnded.count(state) > 0;
}

struct SlurmAttempt {
  std::string job_id;
  int32_t attempt = 0;
  int32_t world_size = 0;
  std::string slurm_name;  // trainyard-<job>-a<attempt>
  std::string slurm_id;    // empty: not found (adopted after it was gone)
  std::string log_dir;
  std::set<int32_t> reported;
  std::string last_state;
  bool ran = false;  // Slurm said RUNNING once
  bool stop_sent = false;
  Clock::time_point kill_at = Clock::time_point::max();
  bool cancelled_leftover = false;
};

class SlurmLauncher final : public Launcher {
 public:
  SlurmLauncher(SlurmLauncherOptions options, ExitCallback on_exit, NoteCallback on_note)
      : options_(std::move(options)), on_exit_(std::move(on_exit)), on_note_(std::move(on_note)) {
    poller_ = std::thread([this] { PollLoop(); });
  }

  ~SlurmLauncher() override {
    std::vector<std::string> stopping;
    {
      absl::MutexLock lock(&mu_);
      shutting_down_ = true;
      for (const auto& [key, a] : attempts_) {
        if (a.stop_sent && !a.slurm_id.empty()) stopping.push_back(a.slurm_id);
      }
    }
    cv_.SignalAll();
    poller_.join();
    // What was asked to stop and is still there gets no more grace: nobody
    // would follow it any more.
    for (const auto& id : stopping) {
      RunCommand({Tool("scancel"), "--signal=KILL", id}, {});
      RunCommand({Tool("scancel"), id}, {});
    }
  }

  absl::Status Available() override {
    const std::string sbatch = Tool("sbatch");
    if (sbatch.find('/') != std::string::npos) {
      if (access(sbatch.c_str(), X_OK) == 0) return absl::OkStatus();
    } else if (const char* path = std::getenv("PATH")) {
      for (const auto dir : absl::StrSplit(path, ':')) {
        if (access(absl::StrCat(dir, "/sbatch").c_str(), X_OK) == 0) return absl::OkStatus();
      }
    }
    return absl::FailedPreconditionError(
        absl::StrCat("the slurm launcher needs sbatch (", sbatch,
                     "): install slurm-client or start the server with --slurm-bin-dir DIR"));
  }

  absl::Status Launch(const LaunchRequest& r) override {
    std::error_code ec;
    std::filesystem::create_directories(r.log_dir, ec);
    if (ec) return absl::InternalError(absl::StrCat("cannot create log dir ", r.log_dir, ": ", ec.message()));
    const std::string name = SlurmJobName(r.job_id, r.attempt);
    const std::string script_path = absl::StrCat(r.log_dir, "/job.sbatch");
    const std::string rank_path = absl::StrCat(r.log_dir, "/rank.sh");
    // Each task: the worker under a small shell that records its exit code.
    for (const auto& [path, text] :
         {std::pair<std::string, std::string>{rank_path, RankWrapperScript()},
          {script_path, BatchScript(r, rank_path, options_.worker_binary, options_.extra_worker_args)}}) {
      std::ofstream f(path, std::ios::trunc);
      f << text;
      if (!f.good()) return absl::InternalError(absl::StrCat("cannot write ", path));
      f.close();
      chmod(path.c_str(), 0750);
    }
    const std::vector<std::string> args = SbatchArgs(r, options_, Tool("sbatch"), script_path);
    // The token travels in the job's environment (sbatch exports ours), not
    // in the script or on a command line.
    CommandResult res = RunCommand(args, {"TRAINYARD_WORKER_TOKEN=" + r.token});
    if (res.exit_code != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("sbatch failed", res.exit_code > 0 ? absl::StrCat(" (exit ", res.exit_code, ")") : "", ": ",
                       Trim(res.err.empty() ? res.out : res.err)));
    }
    const std::string printed = Trim(res.out);  // "<id>" or "<id>;<cluster>"
    const std::string id = printed.substr(0, printed.find(';'));
    if (id.empty() || !std::all_of(id.begin(), id.end(), ::isdigit)) {
      return absl::InternalError(absl::StrCat("sbatch printed no job id: ", Trim(res.out), " ", Trim(res.err)));
    }
    spdlog::info("job {} attempt {}: Slurm job {} ({} tasks on {} node(s))", r.job_id, r.attempt, id, r.world_size,
                 r.slurm.nodes);
    Track(r, name, id);
    return absl::OkStatus();
  }

  void Adopt(const LaunchRequest& r) override {
    const std::string name = SlurmJobName(r.job_id, r.attempt);
    CommandResult res = RunCommand({Tool("squeue"), "-h", "-t", "all", "-n", name, "-o", "%i|%T"}, {});
    if (res.exit_code != 0) {
      spdlog::warn("job {}: squeue failed while adopting attempt {}: {}", r.job_id, r.attempt, Trim(res.err));
    }
    std::string id;
    for (const auto line : absl::StrSplit(res.out, '\n', absl::SkipWhitespace())) {
      std::vector<std::string> f = absl::StrSplit(Trim(std::string(line)), '|');
      if (f.size() == 2 && (id.empty() || !Terminal(f[1]))) id = f[0];
    }
    spdlog::info("job {} attempt {}: following Slurm job {}", r.job_id, r.attempt, id.empty() ? "(gone)" : id);
    Track(r, name, id);
  }

  void Stop(const std::string& job_id, int32_t attempt) override {
    std::string id;
    {
      absl::MutexLock lock(&mu_);
      auto it = attempts_.find({job_id, attempt});
      if (it == attempts_.end() || it->second.stop_sent) return;
      it->second.stop_sent = true;
      it->second.kill_at = Clock::now() + options_.stop_grace;
      id = it->second.slurm_id;
    }
    if (id.empty()) return;
    // SIGINT to every step's tasks: the workers stop at once, no checkpoint
    // (SIGTERM would be preemption). A job still pending is just cancelled.
    CommandResult res = RunCommand({Tool("scancel"), "--signal=INT", id}, {});
    if (res.exit_code != 0) RunCommand({Tool("scancel"), id}, {});
    cv_.SignalAll();
  }

  std::string ExternalId(const std::string& job_id, int32_t attempt) override {
    absl::MutexLock lock(&mu_);
    auto it = attempts_.find({job_id, attempt});
    return it == attempts_.end() ? "" : it->second.slurm_id;
  }

  int LiveProcesses(const std::string& job_id) override {
    absl::MutexLock lock(&mu_);
    int n = 0;
    for (const auto& [key, a] : attempts_) {
      if (key.first == job_id) n += a.world_size - static_cast<int>(a.reported.size());
    }
    return n;
  }

 private:
  std::string Tool(const std::string& name) const {
    return options_.slurm_bin_dir.empty() ? name : options_.slurm_bin_dir + "/" + name;
  }

  void Track(const LaunchRequest& r, const std::string& name, const std::string& id) {
    absl::MutexLock lock(&mu_);
    SlurmAttempt a;
    a.job_id = r.job_id;
    a.attempt = r.attempt;
    a.world_size = r.world_size;
    a.slurm_name = name;
    a.slurm_id = id;
    a.log_dir = r.log_dir;
    attempts_[{r.job_id, r.attempt}] = std::move(a);
    cv_.SignalAll();
  }

  // What the job's events say of Slurm's new `state` of the attempt's batch
  // job; "" for nothing (pending at first, what our own stop caused).
  static std::string StateNote(const SlurmAttempt& a, const std::string& state, const std::string& reason,
                               const std::string& nodes) {
    const std::string job = "Slurm job " + a.slurm_id;
    const std::string why = reason.empty() || reason == "None" ? "" : " (" + reason + ")";
    if (state == "RUNNING") return a.ran ? "" : absl::StrCat(job, " runs", nodes.empty() ? "" : " on " + nodes);
    if (state == "PENDING") return a.ran ? absl::StrCat(job, " was requeued by Slurm", why) : "";
    if (state.rfind("REQUEUE", 0) == 0) return absl::StrCat(job, " was requeued by Slurm", why);
    if (a.stop_sent) return "";
    if (state == "CANCELLED") return absl::StrCat(job, " was cancelled outside Trainyard (scancel)", why);
    if (state == "TIMEOUT") return absl::StrCat(job, " reached its time limit (slurm.time_limit)", why);
    if (state == "PREEMPTED") return absl::StrCat(job, " was preempted by Slurm", why);
    if (state == "NODE_FAIL")
      return absl::StrCat(job, " lost a node (NODE_FAIL", nodes.empty() ? "" : ": " + nodes, ")");
    if (Terminal(state) && state != "COMPLETED" && state != "FAILED") return absl::StrCat(job, " ended ", state, why);
    return "";
  }

  // Exit codes the ranks wrote since the last look.
  static std::vector<RankExit> NewExitFiles(SlurmAttempt& a) {
    std::vector<RankExit> out;
    for (int32_t rank = 0; rank < a.world_size; ++rank) {
      if (a.reported.count(rank)) continue;
      const std::optional<int> read = ReadExitCodeFile(absl::StrCat(a.log_dir, "/rank-", rank, ".exit"));
      if (!read) continue;
      const int code = *read;
      // Above 128: the shell's account of a signal.
      out.push_back(code > 128 ? RankExit::Killed(a.job_id, a.attempt, rank, code - 128)
                               : RankExit::Exited(a.job_id, a.attempt, rank, code));
      a.reported.insert(rank);
    }
    return out;
  }

  void PollLoop() {
    mu_.Lock();
    while (!shutting_down_) {
      cv_.WaitWithTimeout(&mu_, absl::FromChrono(options_.poll_interval));
      if (shutting_down_ || attempts_.empty()) continue;
      // Slurm's view of our jobs, one squeue call for all (outside the lock).
      std::vector<std::string> names;
      for (const auto& [key, a] : attempts_) names.push_back(a.slurm_name);
      mu_.Unlock();
      CommandResult q =
          RunCommand({Tool("squeue"), "-h", "-t", "all", "-n", absl::StrJoin(names, ","), "-o", "%i|%T|%r|%N"}, {});
      mu_.Lock();
      struct Seen {
        std::string state, reason, nodes;
      };
      std::map<std::string, Seen> states;  // slurm id -> what squeue says
      for (const auto line : absl::StrSplit(q.out, '\n', absl::SkipWhitespace())) {
        std::vector<std::string> f = absl::StrSplit(Trim(std::string(line)), '|');
        if (f.size() >= 2) states[f[0]] = {f[1], f.size() > 2 ? f[2] : "", f.size() > 3 ? f[3] : ""};
      }
      std::vector<std::tuple<std::string, int32_t, std::string>> notes;
      std::vector<RankExit> exits;
      std::vector<std::string> to_cancel, to_kill;
      for (auto it = attempts_.begin(); it != attempts_.end();) {
        SlurmAttempt& a = it->second;
        for (RankExit& e : NewExitFiles(a)) exits.push_back(e);
        bool ended = a.slurm_id.empty();
        if (!ended && q.exit_code == 0) {
          auto s = states.find(a.slurm_id);
          // Not listed any more: purged after it ended (MinJobAge).
          ended = s == states.end() || Terminal(s->second.state);
          if (s != states.end() && s->second.state != a.last_state) {
            spdlog::info("job {} attempt {}: Slurm job {} is {}", a.job_id, a.attempt, a.slurm_id, s->second.state);
            std::string note = StateNote(a, s->second.state, s->second.reason, s->second.nodes);
            if (!note.empty()) notes.emplace_back(a.job_id, a.attempt, std::move(note));
            if (s->second.state == "RUNNING") a.ran = true;
            a.last_state = s->second.state;
          }
        }
        if (a.stop_sent && Clock::now() >= a.kill_at && !a.slurm_id.empty()) {
          to_kill.push_back(a.slurm_id);
          a.kill_at = Clock::time_point::max();
        }
        if (ended) {
          for (RankExit& e : NewExitFiles(a)) exits.push_back(e);  // written just before the end
          for (int32_t rank = 0; rank < a.world_size; ++rank) {
            if (a.reported.count(rank)) continue;
            exits.push_back(RankExit::Ended(a.job_id, a.attempt, rank, WorkerOutcome::kFailed,
                                            absl::StrCat("rank ", rank, " ended without an exit status (Slurm job ",
                                                         a.slurm_id.empty() ? "gone" : a.slurm_id, " ",
                                                         a.last_state.empty() ? "ended" : a.last_state, ")")));
            a.reported.insert(rank);
          }
        }
        if (static_cast<int>(a.reported.size()) == a.world_size) {
          // Every rank is accounted for; what is left of the Slurm job (a
          // batch step, or a requeued copy after preemption) must not run
          // stale workers.
          if (!ended && !a.slurm_id.empty()) to_cancel.push_back(a.slurm_id);
          it = attempts_.erase(it);
          continue;
        }
        ++it;
      }
      mu_.Unlock();
      for (const auto& id : to_kill) {
        RunCommand({Tool("scancel"), "--signal=KILL", id}, {});
        RunCommand({Tool("scancel"), id}, {});
      }
      for (const auto& id : to_cancel) RunCommand({Tool("scancel"), id}, {});
      if (on_note_) {
        for (const auto& [job, attempt, text] : notes) on_note_(job, attempt, text);
      }
      for (const auto& e : exits) on_exit_(e);
      mu_.Lock();
    }
    mu_.Unlock();
  }

  const SlurmLauncherOptions options_;
  const ExitCallback on_exit_;
  const NoteCallback on_note_;
  absl::Mutex mu_;
  absl::CondVar cv_;
  std::map<std::pair<std::string, int32_t>, SlurmAttempt> attempts_ ABSL_GUARDED_BY(mu_);
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  std::thread poller_;
};

}  // namespace

std::unique_ptr<Launcher> MakeSlurmLauncher(SlurmLauncherOptions options, Launcher::ExitCallback on_exit,
                                            Launcher::NoteCallback on_note) {
  return std::make_unique<SlurmLauncher>(std::move(options), std::move(on_exit), std::move(on_note));
}

}  // namespace trainyard
