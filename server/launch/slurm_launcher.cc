// SlurmLauncher: one Slurm batch job per attempt. The batch script runs one
// `srun` step with a task per rank; each task is a trainyard-worker that
// takes its rank from SLURM_PROCID and its rendezvous host from the step's
// first node, under a small shell that writes its exit code to
// <log_dir>/rank-<r>.exit. A replacement of one rank (fault_tolerance.mode
// replica) is a batch job of its own, one task, writing
// rank-<r>-<n>.exit. A thread polls those files and `squeue`; ranks still
// unaccounted for when Slurm says their batch job has ended were killed.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
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
#include "server/launch/launcher.h"
#include "server/launch/slurm_batch.h"
#include "server/launch/slurm_text.h"
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

// One batch job of an attempt: the attempt's own (every rank), or the
// replacement of one rank (fault_tolerance.mode replica).
struct SlurmAttempt {
  std::string job_id;
  int32_t attempt = 0;
  bool main = true;                           // the attempt's own batch job
  std::map<int32_t, std::string> exit_files;  // rank -> where its exit code is written
  std::string slurm_name;                     // trainyard-<job>-a<attempt>[-r<rank>-<n>]
  std::string slurm_id;                       // empty: not found (adopted after it was gone)
  std::string log_dir;
  // Ranks reported ended, or given up here: another batch job runs the
  // rank now, so what this one says of it is stale.
  std::set<int32_t> reported;
  std::string last_state;
  bool ran = false;  // Slurm said RUNNING once
  bool stop_sent = false;
  Clock::time_point kill_at = Clock::time_point::max();
  bool cancelled_leftover = false;
  // Every rank ended by itself (no stop of ours) before Slurm said how the
  // batch job ended: followed until then (an operator's scancel, a time
  // limit), at most SlurmLauncherOptions::drain.
  Clock::time_point drain_until{};
  // When it was tracked (SlurmLauncher::tracked_): a squeue that ran before
  // cannot know the batch job, and must not be read as its end.
  uint64_t tracked = 0;
  // The batch job's time limit (slurm.time_limit; empty: the partition's),
  // the lead of its SIGTERM, and what squeue last said was left of it (-1:
  // unknown): a rank that checkpoints and stops on SIGTERM this close to
  // the limit was told by the limit, not by a preemption.
  std::string time_limit;
  int64_t signal_lead_s = 0;
  int64_t time_left_s = -1;
  bool time_limit_noted = false;
  // A rank stopped on SIGTERM that was not ours and not the time limit's:
  // whether Slurm preempted the job is asked once (scontrol's PreemptTime).
  bool preemption_asked = false;
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
    for (Killer& k : killers_) k.thread.join();
    // What was asked to stop and is still there gets no more grace: nobody
    // would follow it any more.
    for (const auto& id : stopping) {
      RunCommand({Tool("scancel"), "--signal=KILL", id}, {});
      RunCommand({Tool("scancel"), id}, {});
    }
  }

  // Ranks elsewhere; one rank is replaced by a batch job of its own.
  Traits traits() const override { return {.on_this_host = false, .ranks_join = false, .replaces_ranks = true}; }

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
    if (auto s = WriteScript(rank_path, RankWrapperScript()); !s.ok()) return s;
    if (auto s =
            WriteScript(script_path, BatchScript(r, rank_path, options_.worker_binary, options_.extra_worker_args));
        !s.ok()) {
      return s;
    }
    absl::StatusOr<std::string> submitted = Submit(SbatchArgs(r, options_, Tool("sbatch"), script_path), r.token);
    if (!submitted.ok()) return submitted.status();
    const std::string id = *submitted;
    spdlog::info("job {} attempt {}: Slurm job {} ({} tasks on {} node(s))", r.job_id, r.attempt, id, r.world_size,
                 r.slurm.nodes);
    Track(r, name, id, AllRanks(r));
    return absl::OkStatus();
  }

  absl::Status LaunchRank(const LaunchRequest& r, int32_t rank) override {
    if (rank < 0 || rank >= r.world_size) {
      return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " is out of range (0..", r.world_size - 1, ")"));
    }
    BatchRanks one{rank, 0};
    {
      absl::MutexLock lock(&mu_);
      one.n = ++replacements_[{r.job_id, r.attempt, rank}];
      // The batch job that ran the rank before: what it says of the rank
      // from now on is stale (its process was reported ended, or given up).
      for (auto& [name, a] : attempts_) {
        if (a.job_id == r.job_id && a.attempt == r.attempt && a.exit_files.count(rank)) a.reported.insert(rank);
      }
    }
    const std::string script_path = absl::StrCat(r.log_dir, "/rank-", rank, "-", one.n, ".sbatch");
    const std::string rank_path = absl::StrCat(r.log_dir, "/rank.sh");
    if (auto s = WriteScript(rank_path, RankWrapperScript()); !s.ok()) return s;
    if (auto s = WriteScript(script_path,
                             BatchScript(r, rank_path, options_.worker_binary, options_.extra_worker_args, one));
        !s.ok()) {
      return s;
    }
    absl::StatusOr<std::string> id = Submit(SbatchArgs(r, options_, Tool("sbatch"), script_path, one), r.token);
    if (!id.ok()) return id.status();
    spdlog::info("job {} attempt {}: rank {} replaced by Slurm job {}{}", r.job_id, r.attempt, rank, *id,
                 r.exclude_nodes.empty() ? "" : absl::StrCat(" (not on ", absl::StrJoin(r.exclude_nodes, ","), ")"));
    Track(r, SlurmRankJobName(r.job_id, r.attempt, rank, one.n), *id, {{rank, RankExitFile(r.log_dir, rank, one.n)}},
          /*main=*/false);
    return absl::OkStatus();
  }

  void KillRank(const std::string& job_id, int32_t attempt, int32_t rank) override {
    absl::MutexLock lock(&mu_);
    for (const auto& [name, a] : attempts_) {
      if (a.job_id != job_id || a.attempt != attempt || !a.exit_files.count(rank) || a.reported.count(rank) ||
          a.slurm_id.empty()) {
        continue;
      }
      if (!a.main) {
        // A replacement is a batch job of its own.
        kills_.push_back({Tool("scancel"), "--signal=KILL", a.slurm_id});
      } else if (const std::optional<std::pair<std::string, std::string>> where = RankPid(a.log_dir, rank)) {
        // One task of the attempt's step: killed on its node, in the
        // job's allocation, by the pid its wrapper wrote.
        kills_.push_back({Tool("srun"), "--jobid=" + a.slurm_id, "--overlap", "--nodes=1", "--ntasks=1",
                          "--nodelist=" + where->first, "kill", "-9", where->second});
      }
    }
    cv_.SignalAll();
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
      if (f.size() == 2 && (id.empty() || !SlurmStateEnded(f[1]))) id = f[0];
    }
    spdlog::info("job {} attempt {}: following Slurm job {}", r.job_id, r.attempt, id.empty() ? "(gone)" : id);
    Track(r, name, id, AllRanks(r));
  }

  // The coordinator leaves its jobs to the next one: every attempt is
  // forgotten, so that neither the poller nor the destructor reports,
  // cancels or kills anything of them.
  void Detach() override {
    absl::MutexLock lock(&mu_);
    attempts_.clear();
    kills_.clear();
  }

  void Stop(const std::string& job_id, int32_t attempt) override {
    std::vector<std::string> ids, stopped;
    {
      absl::MutexLock lock(&mu_);
      for (auto& [name, a] : attempts_) {
        if (a.job_id != job_id || a.attempt != attempt || a.stop_sent) continue;
        a.stop_sent = true;
        stopped.push_back(name);
        if (!a.slurm_id.empty()) ids.push_back(a.slurm_id);
      }
    }
    // SIGINT to every step's tasks: the workers stop at once, no checkpoint
    // (SIGTERM would be preemption). A job still pending is just cancelled.
    for (const std::string& id : ids) {
      CommandResult res = RunCommand({Tool("scancel"), "--signal=INT", id}, {});
      if (res.exit_code != 0) RunCommand({Tool("scancel"), id}, {});
    }
    {
      // The grace counts from the SIGINT: the poller's SIGKILL comes after it.
      absl::MutexLock lock(&mu_);
      const auto kill_at = Clock::now() + options_.stop_grace;
      for (const std::string& name : stopped) {
        if (auto it = attempts_.find(name); it != attempts_.end()) it->second.kill_at = kill_at;
      }
    }
    cv_.SignalAll();
  }

  std::string ExternalId(const std::string& job_id, int32_t attempt) override {
    absl::MutexLock lock(&mu_);
    auto it = attempts_.find(SlurmJobName(job_id, attempt));
    return it == attempts_.end() ? "" : it->second.slurm_id;
  }

  int LiveProcesses(const std::string& job_id) override {
    absl::MutexLock lock(&mu_);
    int n = 0;
    for (const auto& [name, a] : attempts_) {
      if (a.job_id == job_id) n += static_cast<int>(a.exit_files.size() - a.reported.size());
    }
    return n;
  }

 private:
  std::string Tool(const std::string& name) const {
    return options_.slurm_bin_dir.empty() ? name : options_.slurm_bin_dir + "/" + name;
  }

  static std::map<int32_t, std::string> AllRanks(const LaunchRequest& r) {
    std::map<int32_t, std::string> files;
    for (int32_t rank = 0; rank < r.world_size; ++rank) files[rank] = RankExitFile(r.log_dir, rank);
    return files;
  }

  static absl::Status WriteScript(const std::string& path, const std::string& text) {
    std::ofstream f(path, std::ios::trunc);
    f << text;
    if (!f.good()) return absl::InternalError(absl::StrCat("cannot write ", path));
    f.close();
    chmod(path.c_str(), 0750);
    return absl::OkStatus();
  }

  // Runs sbatch; its job id. The token travels in the job's environment
  // (sbatch exports ours), not in the script or on a command line.
  absl::StatusOr<std::string> Submit(const std::vector<std::string>& args, const std::string& token) {
    CommandResult res = RunCommand(args, {"TRAINYARD_WORKER_TOKEN=" + token});
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
    return id;
  }

  // The node and pid a rank's wrapper wrote (rank-<r>.pid), if it did.
  static std::optional<std::pair<std::string, std::string>> RankPid(const std::string& log_dir, int32_t rank) {
    std::ifstream f(absl::StrCat(log_dir, "/rank-", rank, ".pid"));
    std::string node, pid;
    if (!(f >> node >> pid) || pid.empty() || !std::all_of(pid.begin(), pid.end(), ::isdigit)) return std::nullopt;
    return std::make_pair(node, pid);
  }

  void Track(const LaunchRequest& r, const std::string& name, const std::string& id,
             std::map<int32_t, std::string> exit_files, bool main = true) {
    absl::MutexLock lock(&mu_);
    SlurmAttempt a;
    a.job_id = r.job_id;
    a.attempt = r.attempt;
    a.main = main;
    a.exit_files = std::move(exit_files);
    a.slurm_name = name;
    a.slurm_id = id;
    a.log_dir = r.log_dir;
    a.tracked = ++tracked_;
    a.time_limit = r.slurm.time_limit;
    a.signal_lead_s = SignalLeadSeconds(r);
    attempts_[name] = std::move(a);
    cv_.SignalAll();
  }

  // Slurm sends the preemption signal up to a minute before it is due (the
  // resolution of its timers, sbatch(1)): a rank preempted within that and
  // two polls of the signal's lead before the limit was told by the limit.
  static constexpr int64_t kSignalSlackSeconds = 60;

  // What the events say when `exit` is a rank that checkpointed and stopped
  // on Slurm's SIGTERM ahead of the batch job's time limit; "" otherwise.
  std::string TimeLimitNote(SlurmAttempt& a, const RankExit& exit) const {
    if (exit.outcome != WorkerOutcome::kPreempted || a.time_limit_noted || a.stop_sent || a.time_left_s < 0) {
      return "";
    }
    const int64_t polls = std::chrono::ceil<std::chrono::seconds>(options_.poll_interval).count() * 2;
    if (a.time_left_s > a.signal_lead_s + kSignalSlackSeconds + polls) return "";
    a.time_limit_noted = true;
    return absl::StrCat("Slurm job ", a.slurm_id, " neared its time limit (",
                        a.time_limit.empty() ? "the partition's" : "slurm.time_limit " + a.time_limit, ", ",
                        a.time_left_s, " s left): Slurm's SIGTERM (--signal=TERM@", a.signal_lead_s,
                        ") stopped its ranks after a checkpoint");
  }

  // "Slurm job <id> was preempted by Slurm (...)" when scontrol says Slurm
  // preempted it (its PreemptTime is set); "" otherwise or when scontrol
  // cannot say. Its ranks' SIGTERM came from that preemption; the job's
  // state says PREEMPTED only after the partition's GraceTime.
  std::string PreemptionNote(const std::string& slurm_id) const {
    CommandResult r = RunCommand({Tool("scontrol"), "-o", "show", "job", slurm_id}, {});
    if (r.exit_code != 0) return "";
    const std::string at = ScontrolField(r.out, "PreemptTime");
    if (at.empty() || at == "None" || at == "Unknown") return "";
    return absl::StrCat("Slurm job ", slurm_id, " was preempted by Slurm (at ", at,
                        "): its ranks checkpointed on Slurm's SIGTERM");
  }

  // Exit codes the ranks wrote since the last look.
  static std::vector<RankExit> NewExitFiles(SlurmAttempt& a) {
    std::vector<RankExit> out;
    for (const auto& [rank, file] : a.exit_files) {
      if (a.reported.count(rank)) continue;
      const std::optional<int> read = ReadExitCodeFile(file);
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
      const uint64_t queried = tracked_;
      mu_.Unlock();
      CommandResult q =
          RunCommand({Tool("squeue"), "-h", "-t", "all", "-n", absl::StrJoin(names, ","), "-o", "%i|%T|%r|%N|%L"}, {});
      mu_.Lock();
      struct Seen {
        std::string state, reason, nodes;
        int64_t time_left_s = -1;
      };
      std::map<std::string, Seen> states;  // slurm id -> what squeue says
      for (const auto line : absl::StrSplit(q.out, '\n', absl::SkipWhitespace())) {
        std::vector<std::string> f = absl::StrSplit(Trim(std::string(line)), '|');
        if (f.size() >= 2) {
          states[f[0]] = {f[1], f.size() > 2 ? f[2] : "", f.size() > 3 ? f[3] : "",
                          f.size() > 4 ? ParseSlurmDuration(f[4]) : -1};
        }
      }
      std::vector<std::tuple<std::string, int32_t, std::string>> notes;
      std::vector<std::tuple<std::string, int32_t, std::string>> ask_preempted;  // job, attempt, Slurm id
      std::vector<RankExit> exits;
      std::vector<std::string> to_cancel, to_kill;
      for (auto it = attempts_.begin(); it != attempts_.end();) {
        SlurmAttempt& a = it->second;
        const bool seen_by_query = q.exit_code == 0 && a.tracked <= queried;
        if (seen_by_query) {
          if (auto s = states.find(a.slurm_id); s != states.end() && s->second.state == "RUNNING") {
            a.time_left_s = s->second.time_left_s;
          }
        }
        for (RankExit& e : NewExitFiles(a)) {
          if (std::string note = TimeLimitNote(a, e); !note.empty()) notes.emplace_back(a.job_id, a.attempt, note);
          if (e.outcome == WorkerOutcome::kPreempted && !a.time_limit_noted && !a.stop_sent && !a.preemption_asked &&
              !a.slurm_id.empty()) {
            a.preemption_asked = true;
            ask_preempted.emplace_back(a.job_id, a.attempt, a.slurm_id);
          }
          exits.push_back(e);
        }
        bool ended = a.slurm_id.empty();
        if (!ended && seen_by_query) {
          auto s = states.find(a.slurm_id);
          // Not listed any more: purged after it ended (MinJobAge).
          ended = s == states.end() || SlurmStateEnded(s->second.state);
          if (s != states.end() && s->second.state != a.last_state) {
            spdlog::info("job {} attempt {}: Slurm job {} is {}", a.job_id, a.attempt, a.slurm_id, s->second.state);
            std::string note =
                SlurmStateNote(a.slurm_id, a.ran, a.stop_sent, s->second.state, s->second.reason, s->second.nodes);
            if (s->second.state == "PREEMPTED" && preempted_noted_.count(a.slurm_id)) note.clear();  // said already
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
          for (const auto& [rank, file] : a.exit_files) {
            if (a.reported.count(rank)) continue;
            exits.push_back(RankExit::Ended(a.job_id, a.attempt, rank, WorkerOutcome::kFailed,
                                            absl::StrCat("rank ", rank, " ended without an exit status (Slurm job ",
                                                         a.slurm_id.empty() ? "gone" : a.slurm_id, " ",
                                                         a.last_state.empty() ? "ended" : a.last_state, ")")));
            a.reported.insert(rank);
          }
        }
        if (a.reported.size() == a.exit_files.size()) {
          // Every rank is accounted for. A batch job ending by itself is
          // followed until Slurm says how (its note); what is left of it
          // then (a batch step, or a requeued copy after preemption) must
          // not run stale workers.
          const bool requeued = a.last_state == "PENDING" || a.last_state.rfind("REQUEUE", 0) == 0;
          if (!ended && !a.stop_sent && !a.slurm_id.empty() && !requeued) {
            const auto now = Clock::now();
            if (a.drain_until == Clock::time_point{}) a.drain_until = now + options_.drain;
            if (now < a.drain_until) {
              ++it;
              continue;
            }
          }
          if (!ended && !a.slurm_id.empty()) to_cancel.push_back(a.slurm_id);
          preempted_noted_.erase(a.slurm_id);
          it = attempts_.erase(it);
          continue;
        }
        ++it;
      }
      std::vector<std::vector<std::string>> kills;
      kills.swap(kills_);
      mu_.Unlock();
      for (const auto& id : to_kill) {
        RunCommand({Tool("scancel"), "--signal=KILL", id}, {});
        RunCommand({Tool("scancel"), id}, {});
      }
      for (const auto& id : to_cancel) RunCommand({Tool("scancel"), id}, {});
      // A kill on a node that is gone waits for Slurm's message timeout:
      // not in this loop.
      // Those that finished are joined here, so a long-lived server keeps none.
      std::erase_if(killers_, [](Killer& k) {
        if (!k.done->load()) return false;
        k.thread.join();
        return true;
      });
      for (auto& argv : kills) {
        auto done = std::make_shared<std::atomic<bool>>(false);
        killers_.push_back({std::thread([argv = std::move(argv), done] {
                              if (CommandResult k = RunCommand(argv, {}); k.exit_code != 0) {
                                spdlog::warn("{} failed: {}", absl::StrJoin(argv, " "),
                                             Trim(k.err.empty() ? k.out : k.err));
                              }
                              done->store(true);
                            }),
                            done});
      }
      std::vector<std::string> preempted;
      for (const auto& [job, attempt, id] : ask_preempted) {
        if (std::string note = PreemptionNote(id); !note.empty()) {
          notes.emplace_back(job, attempt, std::move(note));
          preempted.push_back(id);
        }
      }
      if (on_note_) {
        for (const auto& [job, attempt, text] : notes) on_note_(job, attempt, text);
      }
      if (!exits.empty()) on_exit_(exits);
      mu_.Lock();
      preempted_noted_.insert(preempted.begin(), preempted.end());
    }
    mu_.Unlock();
  }

  const SlurmLauncherOptions options_;
  const ExitCallback on_exit_;
  const NoteCallback on_note_;
  absl::Mutex mu_;
  absl::CondVar cv_;
  std::map<std::string, SlurmAttempt> attempts_ ABSL_GUARDED_BY(mu_);  // by Slurm job name
  uint64_t tracked_ ABSL_GUARDED_BY(mu_) = 0;                          // attempts tracked so far
  std::set<std::string> preempted_noted_ ABSL_GUARDED_BY(mu_);         // Slurm ids said to be preempted
  // Replacements launched so far, by (job, attempt, rank).
  std::map<std::tuple<std::string, int32_t, int32_t>, int32_t> replacements_ ABSL_GUARDED_BY(mu_);
  // KillRank's commands, run by the poller outside the lock.
  std::vector<std::vector<std::string>> kills_ ABSL_GUARDED_BY(mu_);
  // KillRank's commands running (the poller's): joined once done, or by
  // the destructor.
  struct Killer {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::vector<Killer> killers_;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  std::thread poller_;
};

}  // namespace

std::unique_ptr<Launcher> MakeSlurmLauncher(SlurmLauncherOptions options, Launcher::ExitCallback on_exit,
                                            Launcher::NoteCallback on_note) {
  return std::make_unique<SlurmLauncher>(std::move(options), std::move(on_exit), std::move(on_note));
}

}  // namespace trainyard
