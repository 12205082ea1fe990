#include "worker/script/script_runner.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <string_view>
#include <utility>
#include <variant>

#include "absl/strings/str_cat.h"
#include "common/checkpoint_dir.h"
#include "common/child_process.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/paths.h"
#include "common/progress_pattern.h"
#include "common/subprocess.h"
#include "worker/base/flight_recorder.h"
#include "worker/script/script_channel.h"
#include "worker/script/script_outcome.h"

namespace trainyard {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// The script's descriptor of its end of the channel (TRAINYARD_CHANNEL_FD).
constexpr int kChannelFd = 3;

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

// The DDP options of the spec as Accelerate's DistributedDataParallelKwargs
// takes them (trainyard.ddp_kwargs()).
std::string DdpKwargs(const DdpSpec& d) {
  nlohmann::json j = nlohmann::json::object();
  j["bucket_cap_mb"] = d.bucket_cap_mb;
  j["find_unused_parameters"] = d.find_unused_parameters;
  j["gradient_as_bucket_view"] = d.gradient_as_bucket_view;
  j["broadcast_buffers"] = d.broadcast_buffers;
  // Accelerate's DDPCommunicationHookType values are these names.
  if (d.comm_hook != CommHookType::kNone) j["comm_hook"] = CommHookName(d.comm_hook);
  if (d.comm_wrapper != CommWrapper::kNone) j["comm_wrapper"] = CommWrapperName(d.comm_wrapper);
  if (d.comm_hook == CommHookType::kPowerSgd || d.comm_hook == CommHookType::kBatchedPowerSgd) {
    const PowerSgdOptions& p = d.power_sgd;
    j["comm_state_option"] = {{"matrix_approximation_rank", p.matrix_approximation_rank},
                              {"start_powerSGD_iter", p.start_powerSGD_iter},
                              {"min_compression_rate", p.min_compression_rate},
                              {"use_error_feedback", p.use_error_feedback},
                              {"warm_start", p.warm_start},
                              {"orthogonalization_epsilon", p.orthogonalization_epsilon}};
  }
  return j.dump();
}

// The last lines a stream wrote, for the reason of a failure.
class TailLines {
 public:
  explicit TailLines(size_t keep) : keep_(keep) {}
  void Add(const char* data, size_t n) {
    partial_.append(data, n);
    for (size_t at; (at = partial_.find('\n')) != std::string::npos;) {
      Push(partial_.substr(0, at));
      partial_.erase(0, at + 1);
    }
  }
  // The last line that says something (a traceback ends with the error).
  std::string Last() const {
    if (!Trim(partial_).empty()) return Trim(partial_);
    for (auto it = lines_.rbegin(); it != lines_.rend(); ++it) {
      if (!Trim(*it).empty()) return Trim(*it);
    }
    return "";
  }

 private:
  void Push(std::string line) {
    lines_.push_back(std::move(line));
    while (lines_.size() > keep_) lines_.pop_front();
  }
  size_t keep_;
  std::deque<std::string> lines_;
  std::string partial_;
};

}  // namespace

namespace {

// The answer to a checkpoint request a script cannot hear.
constexpr char kNotListening[] =
    "the script has not imported trainyard, so no checkpoint request reaches it: call "
    "trainyard.checkpoint_requested() in its training loop (docs/scripts.md)";
// How long a request waits for a script whose file imports trainyard to get
// there (torch and Accelerate take seconds to import before it).
constexpr std::chrono::seconds kImportWait{120};

// Whether the script's own file has an `import trainyard` (`import x,
// trainyard`, `from trainyard import ...`) line: then a request that comes
// before the import ran waits for it.
bool ImportsTrainyard(const std::string& path) {
  static const std::regex kImport(R"(^\s*(import\s+([\w.]+(\s+as\s+\w+)?\s*,\s*)*trainyard\b|from\s+trainyard\b))");
  std::ifstream in(path);
  std::string line;
  for (int n = 0; n < 100000 && std::getline(in, line); ++n) {
    if (std::regex_search(line, kImport)) return true;
  }
  return false;
}

}  // namespace

std::string ErrorFilePath(const ScriptRank& w) {
  // A directory of this process's own, made once (mkdtemp: mode 0700, a
  // name nobody can guess): no other account can plant a file, a FIFO or a
  // link where the script writes its error and the worker reads it.
  static const std::string dir = [] {
    std::string t = (fs::temp_directory_path() / "trainyard-rank-XXXXXX").string();
    return ::mkdtemp(t.data()) != nullptr ? t : std::string();
  }();
  if (dir.empty()) return "";
  return absl::StrCat(dir, "/", w.job_id, "-attempt", w.attempt, "-rank", w.rank, "-error.json");
}

std::map<std::string, std::string> ScriptEnvironment(const JobSpec& spec, const ScriptRank& w,
                                                     const std::map<std::string, std::string>& accelerate) {
  std::map<std::string, std::string> env = accelerate;
  // The launcher gave this rank its GPU; a config's gpu_ids does not move it.
  env.erase("CUDA_VISIBLE_DEVICES");
  auto set = [&](const std::string& k, const std::string& v) { env[k] = v; };
  // torchrun's elastic agent (torch.distributed.run) gives each worker these.
  set("RANK", std::to_string(w.rank));
  set("LOCAL_RANK", std::to_string(w.local_rank));
  set("WORLD_SIZE", std::to_string(w.world_size));
  set("LOCAL_WORLD_SIZE", std::to_string(w.local_world_size));
  set("GROUP_RANK", std::to_string(w.node_rank));
  set("GROUP_WORLD_SIZE", std::to_string(w.num_nodes));
  set("ROLE_RANK", std::to_string(w.rank));
  set("ROLE_WORLD_SIZE", std::to_string(w.world_size));
  set("ROLE_NAME", "default");
  set("MASTER_ADDR", w.master_addr);
  set("MASTER_PORT", std::to_string(w.master_port));
  set("TORCHELASTIC_RESTART_COUNT", std::to_string(std::max(0, w.attempt - 1)));
  set("TORCHELASTIC_MAX_RESTARTS", std::to_string(spec.max_restarts));
  set("TORCHELASTIC_RUN_ID", w.job_id);
  // torchrun's agent hosts a store the workers connect to ("True"); here
  // rank 0 of the script serves it at MASTER_ADDR:MASTER_PORT, as a
  // torch.distributed env:// rendezvous without an agent does.
  set("TORCHELASTIC_USE_AGENT_STORE", "False");
  // The signals the agent (this worker) passes on to the script.
  set("TORCHELASTIC_SIGNALS_TO_HANDLE", "SIGTERM,SIGINT,SIGHUP,SIGQUIT");
  set("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1");
  // torch's elastic error file: an uncaught exception's message and stack
  // (`@record`, or the worker's script runner), the reason of a failure.
  if (std::string error_file = ErrorFilePath(w); !error_file.empty()) set("TORCHELASTIC_ERROR_FILE", error_file);
  // Without an Accelerate config, several CPU processes are one MULTI_CPU
  // group, as `ACCELERATE_USE_CPU=True torchrun` makes them (`accelerate
  // launch --num_processes N` on a CPU host runs one process); on GPUs
  // Accelerate finds MULTI_GPU from torchrun's variables by itself.
  if (accelerate.empty() && w.world_size > 1 && spec.device == Device::kCpu) set("ACCELERATE_USE_CPU", "True");
  if (!env.count("OMP_NUM_THREADS")) set("OMP_NUM_THREADS", std::to_string(w.threads));
  for (const auto& [k, v] : spec.script.env) set(k, v);
  // Trainyard's own, for the `trainyard` package.
  set("TRAINYARD_JOB_ID", w.job_id);
  const CheckpointDir checkpoints(spec.checkpoint.project_dir);
  set("TRAINYARD_CHECKPOINT_DIR", checkpoints.root());
  // Where the ranks' numbering starts: read before the script saves anything.
  set("TRAINYARD_CHECKPOINT_NEXT_INDEX", std::to_string(checkpoints.NextIndex()));
  if (!w.resume_dir.empty()) set("TRAINYARD_RESUME_DIR", w.resume_dir);
  set("TRAINYARD_DDP_KWARGS", DdpKwargs(spec.ddp));
  if (!w.package_dir.empty()) {
    const char* old = std::getenv("PYTHONPATH");
    const auto user = spec.script.env.find("PYTHONPATH");
    std::string tail = user != spec.script.env.end() ? user->second : (old != nullptr ? old : "");
    set("PYTHONPATH", tail.empty() ? w.package_dir : w.package_dir + ":" + tail);
  }
  return env;
}

ScriptRunner::ScriptRunner(JobSpec spec, ScriptRank where, std::map<std::string, std::string> environment,
                           MetricsSink* sink, TrainerControl* control, ScriptOptions options)
    : spec_(std::move(spec)),
      where_(std::move(where)),
      env_(std::move(environment)),
      sink_(sink),
      control_(control),
      options_(options) {}

namespace {

// One run of the script: the child, its channel and its output streams, and
// what the worker knows of it, from its start to its end.
class ScriptSession {
 public:
  ScriptSession(const JobSpec& spec, const ScriptRank& where, MetricsSink* sink, TrainerControl* control,
                const ScriptOptions& options, ChildProcess child, ScriptChannel channel,
                std::optional<ProgressPattern> progress, bool imports_trainyard)
      : spec_(spec),
        where_(where),
        sink_(sink),
        control_(control),
        options_(options),
        child_(std::move(child)),
        channel_(std::move(channel)),
        progress_(std::move(progress)),
        tail_(options.stderr_lines),
        imports_trainyard_(imports_trainyard) {}

  // Until the script has ended and its streams are read; then its end.
  ScriptEnd Run(ScriptResult& result);

 private:
  void Tell() {
    ScriptState s;
    s.stop = stop_told_;
    if (request_) {
      s.checkpoint = request_->type == CheckpointType::kSharded ? CheckpointType::kSharded : CheckpointType::kFull;
      s.request_id = request_->request_id;
    }
    channel_.Send(s);
  }
  void FollowControl(ScriptResult& result);
  // Answers `r` (rank 0): no checkpoint, because of `why`.
  void Refuse(const CheckpointRequest& r, std::string_view why, const ScriptResult& result);
  void OnMessage(const ScriptMessage& m, ScriptResult& result);
  void OnSaved(const ScriptSaved& saved, ScriptResult& result);
  void OnOutputLine(std::string_view line, ScriptResult& result);
  void Step(const StepMetrics& s, ScriptResult& result) {
    result.last_step = s.step;
    if (options_.flight_recorder != nullptr) options_.flight_recorder->SetPhase("script", s.step);
    if (sink_ != nullptr) sink_->OnStep(s);
  }
  // Reads what `fd` has now; false at its end.
  template <typename F>
  static bool Drain(int fd, F&& on_data) {
    char buf[65536];
    for (;;) {
      const ssize_t n = read(fd, buf, sizeof(buf));
      if (n > 0) {
        on_data(buf, static_cast<size_t>(n));
        continue;
      }
      return n != 0;
    }
  }

  const JobSpec& spec_;
  const ScriptRank& where_;
  MetricsSink* sink_;
  TrainerControl* control_;
  const ScriptOptions& options_;
  ChildProcess child_;
  ScriptChannel channel_;
  std::optional<ProgressPattern> progress_;
  TailLines tail_;
  // What the script is told: a pending checkpoint request and whether to stop.
  std::optional<CheckpointRequest> request_;
  bool stop_told_ = false, preempted_ = false, stopping_ = false;
  // Whether the script has talked to this worker (the package says hello
  // when imported): only then can it hear a checkpoint request.
  bool talked_ = false;
  // A request that came before the script said hello, when its file imports
  // trainyard: told at the hello; refused after kImportWait or at its end.
  const bool imports_trainyard_;
  const Clock::time_point started_ = Clock::now();
  std::optional<CheckpointRequest> awaiting_import_;
  int64_t checkpoints_ = 0;
  Clock::time_point kill_at_ = Clock::time_point::max();
  // script.progress: lines of rank 0's output read as steps.
  std::string outbox_;
  Clock::time_point last_progress_at_ = Clock::now();
  int64_t last_progress_step_ = 0;
};

void ScriptSession::FollowControl(ScriptResult& result) {
  if (std::optional<CheckpointRequest> r = control_->TakeCheckpoint()) {
    if (talked_) {
      request_ = r;
      if (r->stop_after) stop_told_ = true;
      Tell();
    } else if (r->stop_after) {
      // cancel --checkpoint: nothing can save; the cancel goes on.
      if (sink_ != nullptr && where_.rank == 0) {
        sink_->OnNote(
            "cancel --checkpoint: the script has not imported trainyard, so it cannot save on request; cancelled "
            "without a checkpoint (SIGINT, then SIGKILL after the grace period)");
      }
      control_->RequestStop();
    } else if (imports_trainyard_) {
      awaiting_import_ = r;  // it has not got to its `import trainyard` yet
    } else {
      Refuse(*r, kNotListening, result);
    }
  }
  if (awaiting_import_ && Clock::now() - started_ >= kImportWait) {
    Refuse(*awaiting_import_,
           absl::StrCat("the script has not imported trainyard in its first ", kImportWait.count(),
                        " s, so no checkpoint request reaches it (docs/scripts.md)"),
           result);
    awaiting_import_.reset();
  }
  if (control_->preemption_requested() && !preempted_) {
    preempted_ = stop_told_ = true;
    Tell();
    child_.Signal(SIGTERM);  // a script without the package still hears it
  }
  if (control_->stop_requested() && !stopping_) {
    stopping_ = true;
    // SIGINT (KeyboardInterrupt), not SIGTERM: the package takes SIGTERM
    // for a preemption and would save first.
    child_.Signal(SIGINT);
    kill_at_ = Clock::now() + options_.stop_grace;
  }
}

void ScriptSession::Refuse(const CheckpointRequest& r, std::string_view why, const ScriptResult& result) {
  if (where_.rank != 0 || sink_ == nullptr) return;
  CheckpointEvent refused;
  refused.request_id = r.request_id;
  refused.trigger = "request";
  refused.step = result.last_step;
  refused.unix_millis = NowMillis();
  refused.error = std::string(why);
  refused.refused = true;
  sink_->OnCheckpoint(refused);
}

void ScriptSession::OnMessage(const ScriptMessage& message, ScriptResult& result) {
  if (!talked_ && awaiting_import_) {
    // The package's hello: the request that waited for it is the script's now.
    request_ = std::exchange(awaiting_import_, std::nullopt);
    Tell();
  }
  talked_ = true;
  if (const auto* r = std::get_if<ScriptReport>(&message)) {
    StepMetrics s;
    s.rank = where_.rank;
    s.step = r->step;
    s.loss = r->loss.value_or(s.loss);
    s.samples = r->samples.value_or(s.samples);
    s.step_seconds = r->seconds.value_or(s.step_seconds);
    s.total_steps = std::max<int64_t>(0, r->total.value_or(0));
    if (s.step_seconds > 0) s.samples_per_second = static_cast<double>(s.samples) / s.step_seconds;
    for (const auto& [name, v] : r->values) {
      if (s.values.size() < 64 && name.size() <= 128) s.values[name] = v;
    }
    // The numbers the coordinator has series of by these names are those series'.
    for (auto [name, field] : {std::pair{"eval_loss", &StepMetrics::eval_loss},
                               {"learning_rate", &StepMetrics::learning_rate},
                               {"grad_norm", &StepMetrics::grad_norm}}) {
      if (auto it = r->values.find(name); it != r->values.end()) s.*field = it->second;
    }
    s.unix_millis = NowMillis();
    result.reported = true;
    Step(s, result);
  } else if (const auto* saved = std::get_if<ScriptSaved>(&message)) {
    OnSaved(*saved, result);
  }
}

void ScriptSession::OnSaved(const ScriptSaved& saved, ScriptResult& result) {
  const int64_t step = saved.step.value_or(result.last_step);
  if (request_ && request_->request_id == saved.request_id) {
    // Answered: the script hears no request until the next one.
    request_.reset();
    Tell();
  }
  ++checkpoints_;
  if (where_.rank != 0) return;  // rank 0 seals and reports, once
  CheckpointEvent ev;
  ev.step = step;
  ev.path = saved.path;
  ev.request_id = saved.request_id;
  ev.trigger = saved.request_id == 0 ? (stop_told_ ? "preemption" : "script") : (stop_told_ ? "cancel" : "request");
  ev.unix_millis = NowMillis();
  CheckpointDir dir(spec_.checkpoint.project_dir);
  int64_t bytes = 0;  // what the script wrote (the manifest comes after)
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(saved.path, ec)) {
    if (e.is_regular_file(ec)) bytes += static_cast<int64_t>(e.file_size(ec));
  }
  auto index = dir.Seal(saved.path, nlohmann::json{{"step", step}, {"writer", "script"}}.dump());
  if (!index.ok()) {
    ev.error = std::string(index.status().message());
  } else {
    ev.ok = true;
    ev.index = *index;
    ev.bytes = bytes;
    if (spec_.checkpoint.total_limit > 0) (void)dir.ApplyTotalLimit(spec_.checkpoint.total_limit);
  }
  if (sink_ != nullptr) sink_->OnCheckpoint(ev);
}

// A line of rank 0's output that script.progress reads as a step (unless
// the script reports its steps itself).
void ScriptSession::OnOutputLine(std::string_view line, ScriptResult& result) {
  if (!progress_ || result.reported) return;
  std::optional<StepMetrics> m = progress_->Match(line);
  if (!m || m->step <= last_progress_step_) return;
  const Clock::time_point now = Clock::now();
  m->rank = where_.rank;
  m->step_seconds = std::chrono::duration<double>(now - last_progress_at_).count() /
                    static_cast<double>(m->step - last_progress_step_);
  m->unix_millis = NowMillis();
  last_progress_at_ = now;
  last_progress_step_ = m->step;
  Step(*m, result);
}

ScriptEnd ScriptSession::Run(ScriptResult& result) {
  const int err = child_.pipe(2), out = child_.pipe(1);
  fcntl(err, F_SETFL, O_NONBLOCK);
  if (out >= 0) fcntl(out, F_SETFL, O_NONBLOCK);
  std::optional<ChildExit> exit;
  bool err_open = true, out_open = out >= 0;
  while (!exit || channel_.open() || err_open || out_open) {
    // Requests from the coordinator and signals.
    if (control_ != nullptr && !exit) FollowControl(result);
    if (!exit && Clock::now() >= kill_at_) {
      child_.Signal(SIGKILL);
      kill_at_ = Clock::time_point::max();
    }
    pollfd fds[3] = {{channel_.open() ? channel_.fd() : -1, POLLIN, 0},
                     {err_open ? err : -1, POLLIN, 0},
                     {out_open ? out : -1, POLLIN, 0}};
    poll(fds, 3, exit ? 0 : 50);
    for (const ScriptMessage& m : channel_.Read()) OnMessage(m, result);
    if (err_open) {
      err_open = Drain(err, [&](const char* data, size_t n) {
        tail_.Add(data, n);
        (void)!write(2, data, n);  // the rank's log keeps it all
      });
    }
    if (out_open) {
      out_open = Drain(out, [&](const char* data, size_t n) {
        (void)!write(1, data, n);  // on to the rank's log
        outbox_.append(data, n);
        for (size_t at; (at = outbox_.find('\n')) != std::string::npos;) {
          OnOutputLine(std::string_view(outbox_).substr(0, at), result);
          outbox_.erase(0, at + 1);
        }
        if (outbox_.size() > 65536) outbox_.clear();  // a line that long is no progress line
      });
    }
    if (!exit) {
      exit = child_.Poll();
    } else {
      // The script is gone; what it wrote is read to the end (a grandchild
      // holding a pipe open must not keep this rank forever).
      break;
    }
  }
  if (awaiting_import_) Refuse(*awaiting_import_, "the script ended before it imported trainyard", result);
  return ScriptEnd{.exit = *exit,
                   .stopping = stopping_,
                   .preempted = preempted_,
                   .stop_told = stop_told_,
                   .talked = talked_,
                   .checkpoints = checkpoints_,
                   .last_step = result.last_step,
                   .last_stderr_line = tail_.Last()};
}

// How the script is started: its Python (through trainyard/_run_script.py
// where the package is: the script runs as `python SCRIPT` runs it and leaves
// without Python's finalization), this worker's environment with the rank's
// (the worker's secret is not the script's), the channel as descriptor
// kChannelFd, stderr through a pipe (its last lines are the reason of a
// failure), stdout too for script.progress, in script.working_dir.
ChildPlan ScriptPlan(const ScriptSpec& script, const ScriptRank& where, const std::map<std::string, std::string>& env,
                     int channel_end, bool read_stdout) {
  std::error_code ec;
  ChildPlan plan;
  const std::string runner = where.package_dir.empty() ? "" : where.package_dir + "/trainyard/_run_script.py";
  plan.argv = {script.python.empty() ? "python3" : script.python};
  if (!runner.empty() && fs::is_regular_file(runner, ec)) plan.argv.push_back(runner);
  plan.argv.push_back(script.path);
  plan.argv.insert(plan.argv.end(), script.args.begin(), script.args.end());
  for (const auto& [k, v] : env) plan.environment.push_back(k + "=" + v);
  plan.environment.push_back(absl::StrCat("TRAINYARD_CHANNEL_FD=", kChannelFd));
  plan.unset = {"TRAINYARD_WORKER_TOKEN"};
  plan.fds = {{2, ChildFd::Pipe()}, {kChannelFd, ChildFd::Parent(channel_end)}};
  if (read_stdout) plan.fds[1] = ChildFd::Pipe();
  plan.working_dir = script.working_dir.empty() ? fs::path(script.path).parent_path().string() : script.working_dir;
  // py-spy, started by the worker for a diagnosis, is no ancestor of the
  // script: allow the worker and what it starts (Yama's ptrace_scope 1),
  // no other process of the account.
  plan.allow_parent_tracer = true;
  return plan;
}

}  // namespace

ScriptResult ScriptRunner::Run() {
  const ScriptSpec& script = spec_.script;
  const std::string python = script.python.empty() ? "python3" : script.python;
  ScriptResult result;
  std::error_code ec;
  if (!fs::is_regular_file(script.path, ec)) {
    result.error = absl::StrCat("script.path ", script.path, " is not a file on this host");
    return result;
  }
  absl::StatusOr<ScriptChannel> channel = ScriptChannel::Open();
  if (!channel.ok()) {
    result.error = std::string(channel.status().message());
    return result;
  }
  const auto error_file = env_.find("TORCHELASTIC_ERROR_FILE");
  if (error_file != env_.end()) {
    // Its directory is this process's own (ErrorFilePath), made again if an
    // earlier run removed it; a stale file is not this run's.
    (void)MakeOwnDirectory(fs::path(error_file->second).parent_path().string());
    fs::remove(error_file->second, ec);
  }
  // script.progress: rank 0's standard output passes through this worker,
  // which reads steps from its lines (and writes them on to the log).
  std::optional<ProgressPattern> progress;
  if (!script.progress.empty() && where_.rank == 0) {
    auto p = ProgressPattern::Compile(script.progress);
    if (p.ok()) progress = *p;
  }
  const ChildPlan plan = ScriptPlan(script, where_, env_, channel->script_end(), progress.has_value());
  absl::StatusOr<ChildProcess> child = ChildProcess::Start(plan);
  if (!child.ok()) {
    result.outcome = WorkerOutcome::kUsage;
    result.error = std::string(child.status().message());
    return result;
  }
  channel->CloseScriptEnd();
  const pid_t pid = child->pid();
  log::Info("rank {}: started {} {} (pid {})", where_.rank, python, script.path, pid);
  FlightRecorder* flight = options_.flight_recorder;
  if (flight != nullptr) {
    flight->SetPhase("script", kStepUnknown);  // until the script reports one
    const std::string py_spy = options_.py_spy;
    flight->SetStackSource([pid, py_spy]() -> std::string {
      if (py_spy.empty()) return "(no py-spy here: its Python stack cannot be read)";
      auto run = RunCaptured({py_spy, "dump", "--pid", std::to_string(pid)}, {}, std::chrono::seconds(10));
      if (!run.ok()) return absl::StrCat("(", run.status().message(), ")");
      if (run->timed_out) return "(py-spy dump ran for 10 s: no stack)";
      return run->output.empty() ? "(py-spy said nothing)" : run->output;
    });
  }
  ScriptSession session(spec_, where_, sink_, control_, options_, std::move(*child), std::move(*channel),
                        std::move(progress), ImportsTrainyard(script.path));
  ScriptEnd end = session.Run(result);
  if (flight != nullptr) flight->SetStackSource(nullptr);  // the pid is gone
  end.script_path = script.path;
  if (error_file != env_.end()) {
    end.raised = RaisedException(error_file->second);
    (void)RemoveOwnTree(fs::path(error_file->second).parent_path().string(), ::geteuid());  // nothing left in /tmp
  }
  ScriptOutcome(end, result);
  // Steps read by script.progress count as reported (step 0 is never read).
  if (result.outcome == WorkerOutcome::kSucceeded && !result.reported && result.last_step == 0 && where_.rank == 0 &&
      sink_ != nullptr) {
    sink_->OnNote(
        "the script ended without reporting a step (trainyard.report, or script.progress): its progress is not "
        "known");
  }
  return result;
}

}  // namespace trainyard
