// trainyard-server: the coordinator daemon.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <iostream>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "common/command_line.h"
#include "common/job_spec.h"
#include "server/api/coordinator.h"
#include "server/api/server.h"
#include "server/store/migrate_store.h"
#include "spdlog/spdlog.h"

int main(int argc, char** argv) {
#ifdef NDEBUG
  // absl's deadlock detection keeps a graph of every lock order it sees
  // (several % of the CPU with thousands of ranks); clang's thread-safety
  // analysis checks the locks at build time (tests/server/thread_safety_check.py).
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#endif
  trainyard::ServerOptions o;
  int stop_grace_ms = static_cast<int>(o.local.stop_grace.count());
  CLI::App app{"trainyard-server: schedules and tracks distributed training jobs"};
  app.add_option("--listen", o.listen, "gRPC address HOST:PORT (port 0 = any free port)")->capture_default_str();
  app.add_option("--metrics-listen", o.metrics_listen, "Prometheus /metrics address HOST:PORT")->capture_default_str();
  o.http_listen = "127.0.0.1:9465";
  app.add_option("--http-listen", o.http_listen, "Web UI address HOST:PORT (its pages under /ui/); '' for none")
      ->capture_default_str();
  app.add_option("--http-allowed-host", o.http_allowed_hosts,
                 "A host name the web UI answers to (repeat for several); IP addresses and localhost always")
      ->take_all();
  int64_t web_session_hours = 12;
  app.add_option("--web-session-hours", web_session_hours, "How long a web UI sign-in lasts, hours")
      ->check(CLI::Range(int64_t{1}, int64_t{24 * 30}))
      ->capture_default_str();
  app.add_option("--state-dir", o.jobs.state_dir, "Directory for the SQLite job store and worker logs")
      ->capture_default_str();
  app.add_option("--store", o.store,
                 "Where the state is kept: sqlite:PATH, or postgresql://USER@HOST:PORT/DB shared by several "
                 "coordinators of which one leads (docs/operating/high-availability.md); default: SQLite in "
                 "--state-dir");
  app.add_option("--coordinators", o.ha.coordinators,
                 "With a shared store: every coordinator's HOST:PORT as workers reach it, comma-separated; "
                 "workers are given this list and find the next leader after a takeover");
  int64_t lease_ms = o.ha.lease.count(), renew_ms = o.ha.renew_every.count();
  app.add_option("--lease-ms", lease_ms,
                 "With a shared store: how long the leader's lease lasts unrenewed (a standby takes over after it)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{300}, int64_t{600000}));
  app.add_option("--lease-renew-ms", renew_ms, "With a shared store: how often the leader renews its lease")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{50}, int64_t{600000}));
  app.add_option("--slots", o.jobs.slots,
                 "CPU slots (worker processes) this host runs at once; default: number of CPUs")
      ->check(CLI::Range(1, 1 << 16));
  app.add_option("--worker-binary", o.local.worker_binary, "trainyard-worker to launch; default: beside this binary");
  app.add_option("--stop-grace-ms", stop_grace_ms, "Grace between SIGINT and SIGKILL when stopping workers")
      ->capture_default_str()
      ->check(CLI::Range(0, 3600000));
  app.add_option("--max-queued-jobs", o.jobs.max_queued_jobs, "Jobs the queue holds at most")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  app.add_option("--max-num-processes", o.jobs.limits.max_num_processes, "Largest num_processes a spec may ask for")
      ->capture_default_str()
      ->check(CLI::Range(1, trainyard::kMaxNumProcessesCeiling));
  app.add_option(
      "--allowed-root", o.jobs.allowed_roots,
      "Directory a job's paths (checkpoint.project_dir, resume sources, model and data files) may lie under; "
      "repeatable. "
      "Default: the state dir and the working directory");
#ifdef TRAINYARD_DEFAULT_SCRIPT_PYTHON
  o.jobs.script_python = TRAINYARD_DEFAULT_SCRIPT_PYTHON;  // the Python the build used (the project venv's)
#endif
  app.add_option("--script-python", o.jobs.script_python,
                 "Python that runs script jobs whose spec names no script.python")
      ->capture_default_str();
  app.add_option("--notify-allowed-host", o.jobs.notify_allowed_hosts,
                 "A host a spec's notify.urls may name (repeat for several; *.example.com for a domain's), even "
                 "on the local network; default: any host not on the local network (loopback, private, link-local)")
      ->take_all();
  app.add_option("--notify-secret-file", o.notify_secret_file,
                 "File with the key webhooks are signed with (X-Trainyard-Signature-256: sha256=HMAC-SHA256 of the "
                 "body); default: unsigned");
  app.add_option("--auth-token-file", o.policy.auth_token_file,
                 "File with the bearer token every client call must carry (authorization: Bearer <token>)");
  app.add_option("--policy-file", o.policy.policy_file,
                 "Users (by the SHA-256 of their tokens), groups, roles, priority classes and quotas (YAML; "
                 "docs/operating/users.md); reloaded on SIGHUP")
      ->check(CLI::ExistingFile);
  double half_life_h = 24, min_run_s = 600;
  app.add_option("--fair-share-half-life-hours", half_life_h, "How fast past usage fades from fair share (hours)")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 24.0 * 365));
  app.add_option("--preemption-min-run-time-s", min_run_s,
                 "A job runs at least this long after it starts before it is preempted for a job of higher priority")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 7.0 * 86400));
  app.add_option("--tls-cert", o.tls.cert, "Server certificate chain (PEM): serve TLS");
  app.add_option("--tls-key", o.tls.key, "Server private key (PEM)");
  app.add_option("--tls-client-ca", o.tls.client_ca, "CA (PEM) client certificates must be signed by: mutual TLS");
  app.add_option("--tls-worker-ca", o.tls.worker_ca,
                 "CA (PEM) workers check the server's certificate against (default: --tls-client-ca)");
  std::string launcher = "local";
  app.add_option("--launcher", launcher,
                 "Launcher of jobs whose spec names none: local (fork/exec here), slurm (sbatch/srun) or external "
                 "(workers join with trainyard-worker --join)")
      ->capture_default_str()
      ->check(CLI::IsMember({"local", "slurm", "external"}));
  app.add_option("--gpus", o.jobs.gpus,
                 "GPUs for local CUDA jobs, one per rank; default: as many as the driver reports")
      ->check(CLI::Range(0, 1024));
  app.add_option("--ranks-per-gpu", o.jobs.ranks_per_gpu,
                 "Ranks of local CUDA jobs one GPU may take at once (several share it: Gloo, not NCCL, which refuses "
                 "two ranks on one device)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  app.add_option("--advertise-addr", o.advertise_addr,
                 "HOST[:PORT] workers on other hosts (Slurm, external) reach this server at; default: the --listen "
                 "host, or this host's name when listening on all addresses");
  app.add_option("--slurm-bin-dir", o.slurm.slurm_bin_dir, "Directory of sbatch, squeue and scancel (default: PATH)");
  app.add_option("--slurm-partition", o.slurm.partition, "sbatch --partition for jobs that name none");
  app.add_option("--slurm-account", o.slurm.account, "sbatch --account for jobs that name none");
  app.add_option("--slurm-sbatch-arg", o.slurm.extra_sbatch_args,
                 "Extra sbatch option for every Slurm job; repeatable");
  app.add_option("--slurm-worker-binary", o.slurm.worker_binary,
                 "trainyard-worker as the compute nodes see it (default: --worker-binary)");
  app.add_option("--ready-file", o.ready_file, "Write the bound ports as JSON to this file once serving");
  app.add_option(
         "--peak-flops", o.peak_flops,
         "Peak FLOP/s of one device (GPU, or the CPU cores one rank uses) in the jobs' precision, e.g. 989e12 "
         "for an H100 SXM in bf16; exports trainyard_job_mfu for every job. 0: the peak of the device each rank "
         "reports from the worker's table (known GPUs), else no trainyard_job_mfu")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--metrics-per-rank-max-ranks", o.metrics_per_rank_max_ranks,
                 "Jobs of at most this many ranks export every rank's series on /metrics; larger jobs export "
                 "each number's minimum, median and maximum over the ranks (label aggregate), counters and "
                 "histograms summed over the ranks, and their slowest ranks")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--metrics-slowest-ranks", o.metrics_slowest_ranks,
                 "How many of a large job's slowest ranks (longest forward pass) /metrics names")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000));
  int restart_backoff_ms = static_cast<int>(o.jobs.restart_backoff.count());
  app.add_option("--restart-backoff-ms", restart_backoff_ms,
                 "Wait before a job's restart after its second and later failures: this, doubling up to 30 s (0: "
                 "restart at once)")
      ->capture_default_str()
      ->check(CLI::Range(0, 3600000));
  int node_loss_grace_ms = static_cast<int>(o.jobs.node_loss_grace.count());
  app.add_option("--node-loss-grace-ms", node_loss_grace_ms,
                 "Ranks on other hosts (Slurm): a rank whose control stream is lost without a result, and whose end "
                 "the cluster has not reported within this, is ended; its node is presumed lost and left out of "
                 "the job's later attempts and replacements (sbatch --exclude)")
      ->capture_default_str()
      ->check(CLI::Range(100, 3600000));
  std::string on_shutdown = "detach";
  int shutdown_timeout_s = static_cast<int>(o.shutdown_checkpoint_timeout.count() / 1000);
  app.add_option("--on-shutdown", on_shutdown,
                 "What SIGTERM/SIGINT does to running jobs: detach (workers keep training; the next server adopts "
                 "them), checkpoint (each job checkpoints and stops, and resumes when the server starts again), "
                 "stop (workers are stopped and the jobs end FAILED)")
      ->capture_default_str()
      ->check(CLI::IsMember({"detach", "checkpoint", "stop"}));
  app.add_option("--shutdown-checkpoint-timeout-s", shutdown_timeout_s,
                 "--on-shutdown checkpoint: how long to wait for the checkpoints before stopping the groups")
      ->capture_default_str()
      ->check(CLI::Range(1, 86400));
  // trainyard-server migrate-store --from sqlite:PATH --to postgresql://...
  std::string migrate_from, migrate_to;
  CLI::App* migrate = app.add_subcommand(
      "migrate-store", "Copy a service's state from one store to another (an empty one), and say what was copied");
  migrate->add_option("--from", migrate_from, "The store to copy: sqlite:PATH")->required();
  migrate->add_option("--to", migrate_to, "The empty store to copy into: postgresql://USER@HOST:PORT/DB")->required();
  if (const int rc = trainyard::ParseCommandLine(app, argc, argv, "trainyard-server"); rc >= 0) return rc;
  if (migrate->parsed()) {
    auto report = trainyard::MigrateStore(migrate_from, migrate_to);
    if (!report.ok()) {
      std::cerr << "trainyard-server migrate-store: " << report.status().message() << "\n";
      return 1;
    }
    std::cout << trainyard::Describe(*report) << "\n";
    return 0;
  }
  if (lease_ms <= renew_ms * 2) {
    std::cerr << "trainyard-server: --lease-ms " << lease_ms << " must be more than twice --lease-renew-ms " << renew_ms
              << " (a renewal may fail once without losing the lease)\n";
    return 2;
  }
  o.ha.lease = std::chrono::milliseconds(lease_ms);
  o.ha.renew_every = std::chrono::milliseconds(renew_ms);
  o.jobs.default_launcher = *trainyard::ValueOf(trainyard::kLauncherKindNames, launcher);
  o.local.stop_grace = std::chrono::milliseconds(stop_grace_ms);
  o.web_session_ttl = std::chrono::hours(web_session_hours);
  o.jobs.restart_backoff = std::chrono::milliseconds(restart_backoff_ms);
  o.jobs.node_loss_grace = std::chrono::milliseconds(node_loss_grace_ms);
  o.on_shutdown = *trainyard::ValueOf(trainyard::kShutdownModeNames, on_shutdown);
  o.jobs.fair_share_half_life = std::chrono::seconds(static_cast<int64_t>(half_life_h * 3600));
  o.jobs.preemption_min_run_time = std::chrono::seconds(static_cast<int64_t>(min_run_s));
  o.shutdown_checkpoint_timeout = std::chrono::seconds(shutdown_timeout_s);

  // Signals are taken by one thread with sigwait; every other thread (gRPC's,
  // the launcher's) inherits the blocked mask. Workers get a clean mask.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);

  trainyard::Coordinator server(o);
  if (auto s = server.Start(); !s.ok()) {
    std::cerr << "trainyard-server: " << s.message() << "\n";
    return 1;
  }
  std::thread signals([&] {
    int sig = 0;
    // SIGHUP reloads the policy file; the others stop the server.
    while (sigwait(&set, &sig) == 0 && sig == SIGHUP) {
      if (auto s = server.ReloadPolicy(); !s.ok())
        spdlog::error("trainyard-server: SIGHUP: {}", std::string(s.message()));
    }
    spdlog::info("trainyard-server: signal {} received, shutting down", sig);
    server.Shutdown();
  });
  signals.detach();
  server.Run();
  server.Shutdown();
  spdlog::info("trainyard-server: stopped");
  return 0;
}
