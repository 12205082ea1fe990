#include "worker/script_runner.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/checkpoint_dir.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/progress_pattern.h"
#include "common/subprocess.h"
#include "worker/flight_recorder.h"

namespace trainyard {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// The exit code of a child that could not start its Python (exec failed).
constexpr int kExecFailed = 127;
constexpr const char* kExecFailedMarker = "trainyard-worker: cannot run ";

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
  bool Contains(const std::string& text) const {
    for (const std::string& l : lines_) {
      if (l.find(text) != std::string::npos) return true;
    }
    return partial_.find(text) != std::string::npos;
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

// The message of the exception a torch error file records ({"message":
// {"message": "ValueError: ...", "extraInfo": {...}}}), or "".
std::string RaisedException(const std::string& path) {
  std::ifstream in(path);
  if (!in) return "";
  auto j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("message")) return "";
  const auto& m = j["message"];
  if (m.is_string()) return m.get<std::string>();
  if (m.is_object() && m.contains("message") && m["message"].is_string()) return m["message"].get<std::string>();
  return "";
}

}  // namespace

std::string ErrorFilePath(const ScriptRank& w) {
  return (fs::temp_directory_path() /
          absl::StrCat("trainyard-", w.job_id, "-attempt", w.attempt, "-rank", w.rank, "-error.json"))
      .string();
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
  set("TORCHELASTIC_ERROR_FILE", ErrorFilePath(w));
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

ScriptResult ScriptRunner::Run() {
  const ScriptSpec& script = spec_.script;
  const std::string python = script.python.empty() ? "python3" : script.python;
  const std::string working_dir =
      script.working_dir.empty() ? fs::path(script.path).parent_path().string() : script.working_dir;
  ScriptResult result;
  std::error_code ec;
  if (!fs::is_regular_file(script.path, ec)) {
    result.error = absl::StrCat("script.path ", script.path, " is not a file on this host");
    return result;
  }
  int channel[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, channel) != 0) {
    result.error = absl::StrCat("socketpair: ", std::strerror(errno));
    return result;
  }
  const auto error_file = env_.find("TORCHELASTIC_ERROR_FILE");
  if (error_file != env_.end()) fs::remove(error_file->second, ec);  // a stale one is not this run's
  int err_pipe[2];
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    result.error = absl::StrCat("pipe: ", std::strerror(errno));
    close(channel[0]);
    close(channel[1]);
    return result;
  }
  // script.progress: rank 0's standard output passes through this worker,
  // which reads steps from its lines (and writes them on to the log).
  std::optional<ProgressPattern> progress;
  if (!script.progress.empty() && where_.rank == 0) {
    auto p = ProgressPattern::Compile(script.progress);
    if (p.ok()) progress = *p;
  }
  int out_pipe[2] = {-1, -1};
  if (progress && pipe2(out_pipe, O_CLOEXEC) != 0) progress.reset();
  // The environment: this worker's, then the rank's.
  std::vector<std::string> overrides;
  for (const auto& [k, v] : env_) overrides.push_back(k + "=" + v);
  overrides.push_back(absl::StrCat("TRAINYARD_CHANNEL_FD=", channel[1]));
  std::vector<std::string> env_strings = EnvironmentWith(overrides);
  // The worker's secret is not the script's.
  std::erase_if(env_strings, [](const std::string& e) { return e.starts_with("TRAINYARD_WORKER_TOKEN="); });
  std::vector<char*> envp = ExecEnvironment(env_strings);
  // Through trainyard/_run_script.py where the package is: the script runs
  // as `python SCRIPT` runs it and leaves without Python's finalization.
  const std::string runner = where_.package_dir.empty() ? "" : where_.package_dir + "/trainyard/_run_script.py";
  std::vector<std::string> argv_strings = {python};
  if (!runner.empty() && fs::is_regular_file(runner, ec)) argv_strings.push_back(runner);
  argv_strings.push_back(script.path);
  argv_strings.insert(argv_strings.end(), script.args.begin(), script.args.end());
  std::vector<char*> argv;
  for (std::string& s : argv_strings) argv.push_back(s.data());
  argv.push_back(nullptr);

  const pid_t pid = fork();
  if (pid < 0) {
    result.error = absl::StrCat("fork: ", std::strerror(errno));
    return result;
  }
  if (pid == 0) {
    // The child: its channel end survives exec, stderr goes through the pipe.
    fcntl(channel[1], F_SETFD, 0);
    dup2(err_pipe[1], 2);
    if (out_pipe[1] >= 0) dup2(out_pipe[1], 1);
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    // py-spy, started by the worker for a diagnosis, is no ancestor of the
    // script: allow it (Yama's ptrace_scope 1); without CAP_SYS_PTRACE it
    // needs this.
    prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
    if (chdir(working_dir.c_str()) != 0) {
      dprintf(2, "%s%s: cannot enter working_dir %s: %s\n", kExecFailedMarker, python.c_str(), working_dir.c_str(),
              std::strerror(errno));
      _exit(kExecFailed);
    }
    execvpe(argv[0], argv.data(), envp.data());
    dprintf(2, "%s%s: %s\n", kExecFailedMarker, python.c_str(), std::strerror(errno));
    _exit(kExecFailed);
  }
  close(channel[1]);
  close(err_pipe[1]);
  if (out_pipe[1] >= 0) close(out_pipe[1]);
  const int chan = channel[0];
  const int err = err_pipe[0];
  const int out = out_pipe[0];
  fcntl(chan, F_SETFL, O_NONBLOCK);
  fcntl(err, F_SETFL, O_NONBLOCK);
  if (out >= 0) fcntl(out, F_SETFL, O_NONBLOCK);
  log::Info("rank {}: started {} {} (pid {})", where_.rank, python, script.path, pid);
  FlightRecorder* flight = options_.flight_recorder;
  if (flight != nullptr) {
    flight->SetPhase("script", 0);
    const std::string py_spy = options_.py_spy;
    flight->SetStackSource([pid, py_spy]() -> std::string {
      if (py_spy.empty()) return "(no py-spy here: its Python stack cannot be read)";
      auto run = RunCaptured({py_spy, "dump", "--pid", std::to_string(pid)}, {}, std::chrono::seconds(10));
      if (!run.ok()) return absl::StrCat("(", run.status().message(), ")");
      if (run->timed_out) return "(py-spy dump ran for 10 s: no stack)";
      return run->output.empty() ? "(py-spy said nothing)" : run->output;
    });
  }

  TailLines tail(options_.stderr_lines);
  std::string inbox;
  // What the script is told: a pending checkpoint request and whether to stop.
  std::optional<CheckpointRequest> request;
  bool stop_told = false, preempted = false, stopping = false;
  // Whether the script has talked to this worker (the package says hello
  // when imported): only then can it hear a checkpoint request.
  bool talked = false;
  Clock::time_point kill_at = Clock::time_point::max();
  int64_t checkpoints = 0;
  auto tell = [&] {
    nlohmann::json j = {{"checkpoint", nullptr}, {"request_id", 0}, {"stop", stop_told}};
    if (request) {
      j["checkpoint"] = request->type == CheckpointType::kSharded ? "sharded" : "full";
      j["request_id"] = request->request_id;
    }
    const std::string line = j.dump() + "\n";
    // Small and rare: a blocking write is fine (the socket buffer holds it).
    fcntl(chan, F_SETFL, 0);
    (void)!write(chan, line.data(), line.size());
    fcntl(chan, F_SETFL, O_NONBLOCK);
  };
  auto handle = [&](const nlohmann::json& m) {
    const std::string op = m.value("op", "");
    talked = true;
    if (op == "report") {
      StepMetrics s;
      s.rank = where_.rank;
      s.step = m.value("step", int64_t{0});
      if (m.contains("loss") && m["loss"].is_number()) s.loss = m["loss"].get<double>();
      if (m.contains("samples") && m["samples"].is_number()) s.samples = m["samples"].get<int64_t>();
      if (m.contains("seconds") && m["seconds"].is_number()) s.step_seconds = m["seconds"].get<double>();
      if (s.step_seconds > 0) s.samples_per_second = static_cast<double>(s.samples) / s.step_seconds;
      if (m.contains("values") && m["values"].is_object()) {
        for (auto& [name, v] : m["values"].items()) {
          if (v.is_number() && s.values.size() < 64 && name.size() <= 128) s.values[name] = v.get<double>();
        }
      }
      s.unix_millis = NowMillis();
      result.reported = true;
      result.last_step = s.step;
      if (flight != nullptr) flight->SetPhase("script", s.step);
      if (sink_ != nullptr) sink_->OnStep(s);
    } else if (op == "saved") {
      const std::string path = m.value("path", "");
      const int64_t request_id = m.value("request_id", int64_t{0});
      const int64_t step = m.contains("step") && m["step"].is_number() ? m["step"].get<int64_t>() : result.last_step;
      if (request && request->request_id == request_id) request.reset();
      ++checkpoints;
      if (where_.rank != 0) return;  // rank 0 seals and reports, once
      CheckpointEvent ev;
      ev.step = step;
      ev.path = path;
      ev.request_id = request_id;
      ev.trigger = request_id == 0 ? (stop_told ? "preemption" : "script") : (stop_told ? "cancel" : "request");
      ev.unix_millis = NowMillis();
      CheckpointDir dir(spec_.checkpoint.project_dir);
      int64_t bytes = 0;  // what the script wrote (the manifest comes after)
      for (const auto& e : fs::recursive_directory_iterator(path, ec)) {
        if (e.is_regular_file(ec)) bytes += static_cast<int64_t>(e.file_size(ec));
      }
      auto index = dir.Seal(path, nlohmann::json{{"step", step}, {"writer", "script"}}.dump());
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
  };

  // A line of rank 0's output that script.progress reads as a step (unless
  // the script reports its steps itself).
  std::string outbox;
  Clock::time_point last_progress_at = Clock::now();
  int64_t last_progress_step = 0;
  auto progress_line = [&](std::string_view line) {
    if (!progress || result.reported) return;
    std::optional<StepMetrics> m = progress->Match(line);
    if (!m || m->step <= last_progress_step) return;
    const Clock::time_point now = Clock::now();
    m->rank = where_.rank;
    m->step_seconds = std::chrono::duration<double>(now - last_progress_at).count() /
                      static_cast<double>(m->step - last_progress_step);
    m->unix_millis = NowMillis();
    last_progress_at = now;
    last_progress_step = m->step;
    result.last_step = m->step;
    if (flight != nullptr) flight->SetPhase("script", m->step);
    if (sink_ != nullptr) sink_->OnStep(*m);
  };

  int status = 0;
  bool exited = false, chan_open = true, err_open = true, out_open = out >= 0;
  while (!exited || chan_open || err_open || out_open) {
    // Requests from the coordinator and signals.
    if (control_ != nullptr && !exited) {
      if (std::optional<CheckpointRequest> r = control_->TakeCheckpoint()) {
        if (talked) {
          request = r;
          if (r->stop_after) stop_told = true;
          tell();
        } else if (r->stop_after) {
          // cancel --checkpoint: nothing can save; the cancel goes on.
          if (sink_ != nullptr && where_.rank == 0) {
            sink_->OnNote(
                "cancel --checkpoint: the script has not imported trainyard, so it cannot save on request; cancelled "
                "without a checkpoint (SIGINT, then SIGKILL after the grace period)");
          }
          control_->RequestStop();
        } else if (where_.rank == 0 && sink_ != nullptr) {
          CheckpointEvent refused;
          refused.request_id = r->request_id;
          refused.trigger = "request";
          refused.step = result.last_step;
          refused.unix_millis = NowMillis();
          refused.error = kNotListening;
          sink_->OnCheckpoint(refused);
        }
      }
      if (control_->preemption_requested() && !preempted) {
        preempted = stop_told = true;
        tell();
        kill(pid, SIGTERM);  // a script without the package still hears it
      }
      if (control_->stop_requested() && !stopping) {
        stopping = true;
        // SIGINT (KeyboardInterrupt), not SIGTERM: the package takes SIGTERM
        // for a preemption and would save first.
        kill(pid, SIGINT);
        kill_at = Clock::now() + options_.stop_grace;
      }
    }
    if (!exited && Clock::now() >= kill_at) {
      kill(pid, SIGKILL);
      kill_at = Clock::time_point::max();
    }
    pollfd fds[3] = {
        {chan_open ? chan : -1, POLLIN, 0}, {err_open ? err : -1, POLLIN, 0}, {out_open ? out : -1, POLLIN, 0}};
    poll(fds, 3, exited ? 0 : 50);
    char buf[65536];
    if (chan_open) {
      for (;;) {
        const ssize_t n = read(chan, buf, sizeof(buf));
        if (n > 0) {
          inbox.append(buf, static_cast<size_t>(n));
          continue;
        }
        if (n == 0) chan_open = false;  // the script (and its children) closed it
        break;
      }
      for (size_t at; (at = inbox.find('\n')) != std::string::npos;) {
        auto m = nlohmann::json::parse(inbox.substr(0, at), nullptr, false);
        inbox.erase(0, at + 1);
        if (m.is_object()) handle(m);
      }
    }
    if (err_open) {
      for (;;) {
        const ssize_t n = read(err, buf, sizeof(buf));
        if (n > 0) {
          tail.Add(buf, static_cast<size_t>(n));
          (void)!write(2, buf, static_cast<size_t>(n));  // the rank's log keeps it all
          continue;
        }
        if (n == 0) err_open = false;
        break;
      }
    }
    if (out_open) {
      for (;;) {
        const ssize_t n = read(out, buf, sizeof(buf));
        if (n > 0) {
          (void)!write(1, buf, static_cast<size_t>(n));  // on to the rank's log
          outbox.append(buf, static_cast<size_t>(n));
          for (size_t at; (at = outbox.find('\n')) != std::string::npos;) {
            progress_line(std::string_view(outbox).substr(0, at));
            outbox.erase(0, at + 1);
          }
          if (outbox.size() > 65536) outbox.clear();  // a line that long is no progress line
          continue;
        }
        if (n == 0) out_open = false;
        break;
      }
    }
    if (!exited) {
      const pid_t r = waitpid(pid, &status, WNOHANG);
      if (r == pid) exited = true;
    } else if (chan_open || err_open || out_open) {
      // The script is gone; what it wrote is read to the end (a grandchild
      // holding a pipe open must not keep this rank forever).
      chan_open = err_open = out_open = false;
    }
  }
  close(chan);
  close(err);
  if (out >= 0) close(out);
  if (flight != nullptr) flight->SetStackSource(nullptr);  // the pid is gone

  const std::string last = tail.Last();
  const std::string raised = error_file == env_.end() ? "" : RaisedException(error_file->second);
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    if (stopping) {
      result.outcome = WorkerOutcome::kStopped;
    } else if (preempted) {
      // A script without the package ends on the SIGTERM passed on (or on
      // its peers' going first): it is preempted all the same, and resumes
      // from its latest checkpoint.
      result.outcome = WorkerOutcome::kPreempted;
      result.error = absl::StrCat("preempted at step ", result.last_step, "; the script ended on ",
                                  sig == SIGTERM ? "SIGTERM" : absl::StrCat("signal ", sig, " after SIGTERM"),
                                  checkpoints > 0 ? "" : " without saving a checkpoint");
    } else {
      result.error = absl::StrCat("script ", script.path, " was killed by signal ", sig, " (", strsignal(sig), ")",
                                  last.empty() ? "" : "; last stderr line before the signal: " + last);
    }
    return result;
  }
  const int code = WEXITSTATUS(status);
  if (code == kExecFailed && tail.Contains(kExecFailedMarker)) {
    result.outcome = WorkerOutcome::kUsage;
    result.error = last.substr(std::min(last.size(), std::strlen(kExecFailedMarker)));
    return result;
  }
  if (code != 0) {
    if (stopping) {
      result.outcome = WorkerOutcome::kStopped;
      return result;
    }
    if (preempted && !talked) {
      // Told to leave (SIGTERM) and unable to save: its end, or its peers'
      // (a torch.distributed error when they went first), is the preemption.
      result.outcome = WorkerOutcome::kPreempted;
      result.error = absl::StrCat("preempted at step ", result.last_step, "; the script exited with code ", code,
                                  " after SIGTERM, without saving a checkpoint");
      return result;
    }
    // The exception it raised (torch's error file), else its last stderr line.
    const std::string why = !raised.empty() ? raised : last;
    result.error = absl::StrCat("script ", script.path, " exited with code ", code, why.empty() ? "" : ": " + why);
    return result;
  }
  // Exit 0: done, or saved and returned after being told to stop.
  if (preempted) {
    result.outcome = WorkerOutcome::kPreempted;
    result.error = absl::StrCat("preempted at step ", result.last_step,
                                checkpoints > 0 ? "; the script saved a checkpoint" : "; no checkpoint was saved");
  } else if (stop_told || stopping) {
    result.outcome = WorkerOutcome::kStopped;
  } else {
    result.outcome = WorkerOutcome::kSucceeded;
  }
  return result;
}

}  // namespace trainyard
