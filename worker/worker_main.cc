#include "worker/worker_main.h"

#include "common/paths.h"
#include "common/placement.h"

#include <signal.h>
#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/allocator_tuning.h"
#include "common/job_spec.h"
#include "common/leader_hint.h"
#include "common/log.h"
#include "common/secrets.h"
#include "common/worker_outcome.h"
#include "worker/base/device.h"
#include "worker/base/flight_recorder.h"
#include "worker/base/gpu_monitor.h"
#include "worker/collectives/collectives.h"
#include "worker/collectives/dist_setup.h"
#include "worker/collectives/process_group.h"
#include "worker/collectives/shm_collectives.h"
#include "worker/control/control_client.h"
#include "worker/control/stop_watchdog.h"
#include "worker/replicas/replica_group.h"
#include "worker/replicas/replica_session.h"
#include "worker/script/accelerate_env.h"
#include "worker/script/script_runner.h"
#include "worker/train/trainer.h"

namespace trainyard {
namespace {

TrainerControl g_control;

void OnSignal(int sig) {
  // SIGTERM (a cluster's preemption notice, Slurm's --signal): checkpoint,
  // then stop. SIGINT (the coordinator's stop): stop at once.
  if (sig == SIGTERM) {
    g_control.RequestPreemption();
  } else {
    g_control.RequestStop();
  }
}

// Logs progress lines for the worker's log file; forwards to the coordinator.
class LoggingSink final : public MetricsSink {
 public:
  LoggingSink(MetricsSink* next, int32_t rank, int64_t max_steps)
      : next_(next), rank_(rank), every_(std::max<int64_t>(1, max_steps / 20)) {}
  void OnCheckpoint(const CheckpointEvent& c) override {
    if (next_ != nullptr) next_->OnCheckpoint(c);
    if (c.ok) {
      log::Info("rank {}: {} {} checkpoint at step {}: {} ({} bytes, {:.2f} s)", rank_, c.trigger,
                CheckpointTypeName(c.type), c.step, c.path, c.bytes, c.seconds);
    } else {
      log::Error("rank {}: {} checkpoint at step {} failed: {}", rank_, c.trigger, c.step, c.error);
    }
  }
  void OnNote(const std::string& text) override {
    if (next_ != nullptr) next_->OnNote(text);
    log::Info("rank {}: {}", rank_, text);
  }
  void OnStep(const StepMetrics& m) override {
    if (next_ != nullptr) next_->OnStep(m);
    if (!std::isnan(m.eval_loss)) log::Info("rank {} step {} eval loss {:.4f}", rank_, m.step, m.eval_loss);
    if (m.step == 1 || m.step % every_ == 0) {
      log::Info(
          "rank {} step {} loss {:.4f} {:.1f} samples/s (data wait {:.2f} ms, compute {:.2f} ms of which forward "
          "{:.2f} ms, optimizer {:.2f} ms)",
          rank_, m.step, m.loss, m.samples_per_second, m.data_seconds * 1e3, m.compute_seconds * 1e3,
          m.forward_seconds * 1e3, m.optimizer_seconds * 1e3);
    }
  }

 private:
  MetricsSink* next_;
  int32_t rank_;
  int64_t every_;
};

// The rank's GPU as NVML reads it, sampled every few seconds
// (TRAINYARD_GPU_METRICS_INTERVAL_MS, default 5000); null for a CPU rank, and
// where NVML is missing (said once in the log).
std::unique_ptr<GpuMonitor> OpenGpuMonitor(c10::Device device, int32_t rank) {
  if (!device.is_cuda()) return nullptr;
  const std::string bus_id = PciBusId(device);
  auto monitor = GpuMonitor::Open(bus_id);
  if (!monitor.ok()) {
    log::Info("rank {}: no GPU metrics: {}", rank, monitor.status().message());
    return nullptr;
  }
  int64_t interval_ms = 5000;
  if (const char* v = std::getenv("TRAINYARD_GPU_METRICS_INTERVAL_MS")) interval_ms = std::max(100L, std::atol(v));
  log::Info("rank {}: GPU metrics from NVML for {} ({}) every {} ms", rank, (*monitor)->name(), bus_id, interval_ms);
  (*monitor)->StartSampling(std::chrono::milliseconds(interval_ms));
  return std::move(*monitor);
}

// Reports how this rank ended and returns its exit code: the one place both
// are decided, so they always agree.
int Finish(ControlClient& ctl, WorkerOutcome outcome, const std::string& error, int64_t final_step) {
  ctl.Finish(outcome, error, final_step);
  return ExitCodeOf(outcome);
}

// The directory holding the `trainyard` Python package: beside this binary
// in a build (bin/../python) or an installation (bin/../share/trainyard/python).
std::string PackageDir() {
  if (const char* dir = std::getenv("TRAINYARD_PACKAGE_DIR")) return dir;
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  for (const char* rel : {"../python", "../share/trainyard/python"}) {
    const std::filesystem::path p = (exe.parent_path() / rel).lexically_normal();
    if (std::filesystem::exists(p / "trainyard" / "__init__.py", ec)) return p.string();
  }
  return "";
}

// A script job's rank: the script runs under this worker (worker/script_runner.h).
// py-spy (a PyPI package, in the project venv): beside the script's Python,
// else on PATH; empty when there is none.
std::string FindPySpy(const std::string& python) {
  std::error_code ec;
  const std::filesystem::path beside = std::filesystem::path(python).parent_path() / "py-spy";
  if (!python.empty() && std::filesystem::exists(beside, ec)) return beside.string();
  if (const char* path = std::getenv("PATH")) {
    std::istringstream dirs(path);
    for (std::string d; std::getline(dirs, d, ':');) {
      if (std::filesystem::exists(std::filesystem::path(d) / "py-spy", ec)) return d + "/py-spy";
    }
  }
  return "";
}

int RunScriptRank(ControlClient& ctl, const JobSpec& spec, ScriptRank where, MetricsSink* checkpoints,
                  FlightRecorder* flight) {
  const char* local_world = std::getenv("LOCAL_WORLD_SIZE");
  const char* slurm_local_world = std::getenv("SLURM_NTASKS_PER_NODE");
  where.num_nodes = std::max(1, spec.slurm.nodes);
  where.local_world_size = local_world != nullptr         ? std::max(1, std::atoi(local_world))
                           : slurm_local_world != nullptr ? std::max(1, std::atoi(slurm_local_world))
                                                          : std::max(1, where.world_size / where.num_nodes);
  where.local_rank = std::getenv("LOCAL_RANK") != nullptr || std::getenv("SLURM_LOCALID") != nullptr
                         ? LocalRankFromEnvironment()
                         : where.rank % where.local_world_size;
  where.node_rank = where.rank / where.local_world_size;
  where.num_nodes = std::max(where.num_nodes, (where.world_size + where.local_world_size - 1) / where.local_world_size);
  where.package_dir = PackageDir();
  if (where.package_dir.empty()) {
    // Without it a script has no `import trainyard`, no teardown protection
    // and no Accelerate environment: refuse rather than run half supervised.
    return Finish(ctl, WorkerOutcome::kFailed,
                  "the trainyard Python package was not found beside this worker (bin/../python or "
                  "bin/../share/trainyard/python): build the worker with CMake (its target puts it there), "
                  "install it, or set TRAINYARD_PACKAGE_DIR to the directory that holds trainyard/",
                  0);
  }
  try {
    std::vector<std::string> notes;
    where.resume_dir = ResolveCheckpoint(spec.checkpoint.project_dir, spec.checkpoint.resume_from, &notes);
    if (where.rank == 0) {
      for (const std::string& note : notes) ctl.OnNote(note);
      if (!where.resume_dir.empty()) ctl.OnNote("the script resumes from " + where.resume_dir);
    }
  } catch (const std::exception& e) {
    return Finish(ctl, WorkerOutcome::kFailed, e.what(), 0);
  }
  auto accelerate =
      AccelerateLaunchEnvironment(spec.script.python, spec.script.accelerate_config, where, AccelerateEnvCacheDir());
  if (!accelerate.ok()) return Finish(ctl, WorkerOutcome::kFailed, std::string(accelerate.status().message()), 0);
  // Rank 0 reports the checkpoints; every rank its steps.
  class Sink final : public MetricsSink {
   public:
    Sink(ControlClient* ctl, MetricsSink* checkpoints) : ctl_(ctl), checkpoints_(checkpoints) {}
    void OnStep(const StepMetrics& m) override { ctl_->OnStep(m); }
    void OnCheckpoint(const CheckpointEvent& c) override {
      if (checkpoints_ != nullptr) checkpoints_->OnCheckpoint(c);
    }
    void OnNote(const std::string& text) override { ctl_->OnNote(text); }

   private:
    ControlClient* ctl_;
    MetricsSink* checkpoints_;
  } sink(&ctl, checkpoints);
  ScriptOptions options;
  options.flight_recorder = flight;
  options.py_spy = FindPySpy(spec.script.python);
  ScriptRunner runner(spec, where, ScriptEnvironment(spec, where, *accelerate), &sink, &g_control, options);
  const ScriptResult r = runner.Run();
  log::Info("rank {}: script ended: {}{}{}", where.rank, WorkerOutcomeName(r.outcome), r.error.empty() ? "" : ": ",
            r.error);
  return Finish(ctl, r.outcome, r.error, r.last_step);
}

std::string ErrorText(const std::exception& e) {
  if (const auto* ce = dynamic_cast<const c10::Error*>(&e)) return ce->what_without_backtrace();
  return e.what();
}

// The first coordinator of --server's list: the host this rank's own
// address is chosen toward (every coordinator of a list is on one network).
std::string FirstServer(const std::string& servers) {
  absl::StatusOr<std::vector<std::string>> list = SplitAddresses(servers);
  return list.ok() && !list->empty() ? list->front() : servers;
}

}  // namespace

int RunWorker(const WorkerArgs& args) {
  TuneAllocator();
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  // A peer that closed its socket (a rank that died, a store client gone)
  // is an error on the write (EPIPE), never this rank's end: as the
  // coordinator does. The children it starts get every signal back at its
  // default (ChildProcess).
  signal(SIGPIPE, SIG_IGN);

  ControlOptions co;
  co.leave_requested = [] { return g_control.stop_requested() || g_control.preemption_requested(); };
  co.server = args.server;
  co.job_id = args.job_id;
  co.rank = args.rank;
  co.attempt = args.attempt;
  co.token = args.token;
  co.join_timeout = args.join_timeout;
  if (args.attempt == 0 && args.rank == 0) {
    // Joining as rank 0: this host serves the rendezvous store.
    co.advertise_addr =
        args.advertise_addr.empty() ? LocalAddressToward(HostPart(FirstServer(args.server))) : args.advertise_addr;
    if (co.advertise_addr.empty()) {
      log::Error("rank 0: cannot tell this host's address toward {}; give --advertise-addr", args.server);
      return kExitUsage;
    }
    co.rendezvous_port =
        args.master_port > 0 ? args.master_port : PickFreePortOn(args.bind_addr.empty() ? "0.0.0.0" : args.bind_addr);
  }
  // fault_tolerance.mode replica (the launcher says --replica-store): every
  // rank serves a store of its own and says where in its hello.
  std::unique_ptr<ReplicaStore> replica_store;
  if (args.replica_store) {
    try {
      if (co.advertise_addr.empty()) {
        co.advertise_addr =
            args.advertise_addr.empty() ? LocalAddressToward(HostPart(FirstServer(args.server))) : args.advertise_addr;
      }
      // Served where the members reach it (the advertised address) only.
      replica_store = std::make_unique<ReplicaStore>(co.advertise_addr.empty() ? "127.0.0.1" : co.advertise_addr);
      co.replica_store_port = replica_store->port();
    } catch (const std::exception& e) {
      log::Warn("rank {}: no replica store ({}): this rank cannot train in fault_tolerance.mode replica", args.rank,
                e.what());
    }
  }
  for (const auto& [path, out] : {std::pair<std::string, std::string*>{args.coordinator_ca, &co.ca_pem},
                                  {args.tls_cert, &co.cert_pem},
                                  {args.tls_key, &co.key_pem}}) {
    if (!path.empty() && !ReadFileToString(path, out)) {
      log::Error("rank {}: cannot read {}", args.rank, path);
      return kExitUsage;
    }
  }
  // Outlives the control stream and the groups, which record into it.
  FlightRecorder flight_recorder(args.rank);
  co.flight_recorder = &flight_recorder;
  // fault_tolerance.mode replica: the memberships the coordinator offers.
  MembershipMailbox memberships;
  co.memberships = &memberships;
  auto control = ControlClient::Connect(co, &g_control);
  if (!control.ok()) {
    log::Error("rank {}: {}", args.rank, std::string(control.status().message()));
    return kExitFailed;
  }
  ControlClient& ctl = **control;
  auto spec = ParseJobSpec(ctl.welcome().spec_json, AcceptedSpecLimits());
  if (!spec.ok()) {
    const std::string err = absl::StrCat("the job's spec is invalid here: ", std::string(spec.status().message()));
    log::Error("rank {}: {}", args.rank, err);
    return Finish(ctl, WorkerOutcome::kFailed, err, 0);
  }
  const int32_t world_size = ctl.welcome().world_size;
  if (args.world_size != 0 && world_size != args.world_size) {
    const std::string err = absl::StrCat("world size mismatch: launched with ", args.world_size,
                                         ", the coordinator says ", ctl.welcome().world_size);
    return Finish(ctl, WorkerOutcome::kFailed, err, 0);
  }
  ctl.set_metrics_every_steps(spec->metrics_every_steps);
  at::set_num_threads(args.threads > 0 ? args.threads : spec->threads_per_process);
  // Denormal floats (a loss near 0 makes gradients and Adam's second moments
  // that small) cost the CPU several times a normal operation: flushed to
  // zero, as torch.set_flush_denormal(True) does. No effect on GPUs.
  at::globalContext().setFlushDenormal(true);
  // Where the rendezvous is, and the address this rank's transport uses.
  std::string master_addr = !ctl.welcome().master_addr.empty() ? ctl.welcome().master_addr : args.master_addr;
  if (master_addr.empty()) master_addr = RendezvousHostFromEnvironment();
  if (master_addr.empty()) master_addr = "127.0.0.1";
  const int master_port = ctl.welcome().master_port > 0 ? ctl.welcome().master_port : args.master_port;
  log::Info("rank {}: spec accepted: job {} ({}, {} processes); rendezvous at {}:{}", args.rank, args.job_id,
            spec->name, world_size, master_addr, master_port);
  if (!spec->script.empty()) {
    ScriptRank where;
    where.job_id = args.job_id;
    where.rank = args.rank;
    where.world_size = world_size;
    where.master_addr = master_addr;
    where.master_port = master_port;
    where.attempt = ctl.welcome().attempt;
    where.threads = args.threads > 0 ? args.threads : spec->threads_per_process;
    return RunScriptRank(ctl, *spec, where, args.rank == 0 ? &ctl : nullptr, &flight_recorder);
  }
  std::string bind_addr = args.bind_addr;
  if (bind_addr.empty()) bind_addr = IsLoopback(master_addr) ? "127.0.0.1" : LocalAddressToward(master_addr);
  if (bind_addr.empty()) {
    const std::string err =
        absl::StrCat("cannot tell this host's address toward the rendezvous host ", master_addr, "; give --bind-addr");
    return Finish(ctl, WorkerOutcome::kFailed, err, 0);
  }

  int64_t final_step = 0;
  try {
    // The rank's GPU is current before NCCL or any CUDA work starts.
    const c10::Device device = RankDevice(spec->device);
    UseDevice(device);
    const std::unique_ptr<GpuMonitor> gpu = OpenGpuMonitor(device, args.rank);
    RendezvousOptions ro;
    ro.master_addr = master_addr;
    ro.master_port = master_port;
    ro.rank = args.rank;
    ro.world_size = world_size;
    ro.bind_addr = bind_addr;
    // Only holders of the attempt's token steer the rendezvous.
    ro.secret = RendezvousSecret(args.token, args.job_id, ctl.welcome().attempt);
    // A replica job forms its groups from the coordinator's memberships.
    const bool replica = spec->replicas();
    if (replica && !replica_store)
      throw std::runtime_error(
          "fault_tolerance.mode replica needs this rank's store (trainyard-worker --replica-store)");
    // A stop leaves at once while the rank waits for its peers, and within
    // 4 s of it once training (worker/stop_watchdog.h).
    StopWatchdog watchdog(args.rank, &g_control, &flight_recorder,
                          replica ? "waiting for the job's first membership"
                                  : absl::StrCat("waiting in the rendezvous for the other ", world_size - 1,
                                                 " ranks (at ", master_addr, ":", master_port, ")"),
                          std::chrono::seconds(4), [](const std::string& line) {
                            log::Warn("{}", line);
                            std::fflush(nullptr);
                            std::_Exit(ExitCodeOf(WorkerOutcome::kStopped));
                          });
    const DistSetup dist = replica ? DistSetup{} : SetUpDistributed(*spec, ro, &flight_recorder);
    watchdog.Waiting("restoring the job's state with the other ranks");
    LoggingSink logging(&ctl, args.rank, spec->max_steps);
    std::optional<GpuSink> gpu_sink;
    if (gpu) gpu_sink.emplace(&logging, gpu.get());
    MetricsSink& sink = gpu_sink ? static_cast<MetricsSink&>(*gpu_sink) : logging;
    DistContext context = dist.context();
    context.flight_recorder = &flight_recorder;
    if (!args.job_id.empty()) context.snapshot_dir = SnapshotDir(args.job_id);
    ReplicaOptions replica_options = ReplicaOptionsFromEnvironment(args.rank);
    replica_options.bind_addr = bind_addr;
    replica_options.secret = ro.secret;
    replica_options.group_timeout =
        std::chrono::milliseconds(static_cast<int64_t>(spec->fault_tolerance.collective_timeout_s * 1000));
    replica_options.reporter = &ctl;
    std::unique_ptr<StepGuard> guard =
        replica ? std::make_unique<ReplicaSession>(*spec, replica_options, &memberships, context)
                : MakeWholeGroupGuard(args.rank, world_size, context);
    Trainer trainer(*spec, std::move(guard), &sink, &g_control);
    watchdog.Training();  // from here on, the training loop hears a stop at each step
    if (!trainer.resumed_from().empty()) {
      log::Info("rank {}: resumed from {} at step {}", args.rank, trainer.resumed_from(), trainer.step());
      if (args.rank == 0)
        ctl.OnNote(absl::StrCat("resumed at step ", trainer.step(), " from ", trainer.resumed_from()));
    }
    for (const std::string& note : trainer.resume_notes()) {
      log::Info("rank {}: {}", args.rank, note);
      if (args.rank == 0) ctl.OnNote(note);  // the same on every rank: one job event
    }
    log::Info("rank {}: training {} to step {} ({} processes)", args.rank, spec->name, spec->max_steps, world_size);
    TrainResult result = trainer.Run();
    final_step = result.final_step;
    if (result.preempted) {
      log::Info("rank {}: preempted; checkpoint {} at step {}", args.rank, result.final_checkpoint, result.final_step);
      return Finish(ctl, WorkerOutcome::kPreempted,
                    absl::StrCat("preempted at step ", result.final_step,
                                 result.final_checkpoint.empty() ? " (the checkpoint failed)"
                                                                 : "; checkpoint " + result.final_checkpoint),
                    final_step);
    }
    if (result.stopped) {
      log::Info("rank {}: stopped on request after step {}", args.rank, result.final_step);
      return Finish(ctl, WorkerOutcome::kStopped, absl::StrCat("stopped on request after step ", result.final_step),
                    final_step);
    }
    if (result.final_step == result.start_step) {
      log::Info("rank {}: done: already at step {} (max_steps {}), nothing to train", args.rank, result.final_step,
                spec->max_steps);
    } else {
      log::Info("rank {}: done at step {} ({} steps this attempt), loss {:.4f} -> {:.4f}", args.rank, result.final_step,
                result.final_step - result.start_step, result.first_loss, result.last_loss);
    }
    if (dist.world) dist.world->barrier()->wait();  // nobody tears down the group under a peer
  } catch (const std::exception& e) {
    const std::string err = ErrorText(e);
    log::Error("rank {}: training failed: {}", args.rank, err);
    return Finish(ctl, WorkerOutcome::kFailed, err, final_step);
  }
  return Finish(ctl, WorkerOutcome::kSucceeded, "", final_step);
}

}  // namespace trainyard
