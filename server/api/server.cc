#include "server/api/server.h"
#include "common/paths.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <prometheus/registry.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/credentials.h"
#include "common/keepalive.h"
#include "common/secrets.h"
#include "server/api/rpc_services.h"
#include "server/api/web_ui.h"
#include "server/jobs/job_manager.h"
#include "server/metrics/metrics_endpoint.h"
#include "server/notify/notifier.h"
#include "server/notify/notifying_job_store.h"
#include "server/store/fence.h"
#include "server/store/stores.h"
#include "spdlog/spdlog.h"

namespace trainyard {
namespace {

std::string SelfDir() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? "." : p.parent_path().string();
}

// "host:port" → host (IPv6 brackets kept).
std::string HostOf(const std::string& addr) {
  auto pos = addr.rfind(':');
  return pos == std::string::npos ? addr : addr.substr(0, pos);
}

}  // namespace

namespace {

// GPUs the NVIDIA driver reports on this host (0 without one).
int DetectGpus() {
  std::error_code ec;
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/driver/nvidia/gpus", ec)) {
    (void)e;
    ++n;
  }
  return n;
}

}  // namespace

struct Server::Impl {
  ServerOptions options;
  std::unique_ptr<JobStore> store;
  std::unique_ptr<Notifier> notifier;                  // the jobs' webhooks
  std::unique_ptr<NotifyingJobStore> notifying_store;  // `store`, announcing changes of state to `notifier`
  std::shared_ptr<prometheus::Registry> registry;
  std::unique_ptr<ServerMetrics> metrics;
  std::unique_ptr<MetricsEndpoint> own_endpoint;  // without options.metrics_endpoint
  MetricsEndpoint* endpoint = nullptr;            // where /metrics is served
  std::string store_description;                  // sqlite:PATH or the PostgreSQL URL without its password
  std::unique_ptr<JobManager> manager;
  std::unique_ptr<SweepStore> sweep_store;
  std::unique_ptr<SweepManager> sweeps;
  std::unique_ptr<Launcher> launcher;
  std::unique_ptr<Launcher> slurm_launcher;
  std::unique_ptr<Identities> identities;
  std::unique_ptr<JobServiceImpl> job_service;
  std::unique_ptr<WorkerServiceImpl> worker_service;
  std::unique_ptr<WebUi> web_ui;
  int http_port = 0;
  std::unique_ptr<grpc::Server> grpc_server;
  int grpc_port = 0;
  int metrics_port = 0;
  absl::Mutex shutdown_mu;
  bool shut_down ABSL_GUARDED_BY(shutdown_mu) = false;
  std::thread watchdog;  // calls JobManager::CheckProgress every 500 ms
  absl::Mutex watchdog_mu;
  bool watchdog_stop ABSL_GUARDED_BY(watchdog_mu) = false;
  std::string remote_addr;  // where workers on other hosts reach the server

  // An event on a job from outside the job manager (a webhook's delivery,
  // a sweep's exploit), in the store its events are read from.
  void NoteOnJob(const std::string& job_id, const std::string& text) {
    if (job_id.empty()) return;
    auto job = store->Get(job_id);
    if (!job.ok()) return;
    store->AddEvent(job_id, JobEvent{NowMillis(), job->state, text}).IgnoreError();
    spdlog::info("job {}: {}", job_id, text);
  }
  absl::Status PrepareStateDir();
  absl::Status OpenStoreAndMetrics();
  absl::StatusOr<std::vector<std::string>> WorkerTlsArgs() const;
  absl::Status MakeManagerAndLaunchers();
  absl::Status StartGrpc();
  void AdvertiseAddresses();
  void StartWatchdog();
  absl::Status WriteReadyFile();
};

Server::Server(ServerOptions options) : impl_(std::make_unique<Impl>()) { impl_->options = std::move(options); }

Server::~Server() { Shutdown(); }

// The steps of Start, in order; each returns what stops the server from
// starting, naming the flag at fault.
absl::Status Server::Impl::PrepareStateDir() {
  JobManagerOptions& o = options.jobs;
  if (o.slots <= 0) o.slots = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (o.gpus < 0) o.gpus = DetectGpus();
  if (o.default_launcher == LauncherKind::kDefault) {
    return absl::InvalidArgumentError("--launcher default: must be local, slurm or external");
  }
  std::string& worker_binary = options.local.worker_binary;
  if (worker_binary.empty()) worker_binary = SelfDir() + "/trainyard-worker";
  if (options.slurm.worker_binary.empty()) options.slurm.worker_binary = worker_binary;
  options.slurm.stop_grace = options.local.stop_grace;
  std::error_code ec;
  std::filesystem::create_directories(o.state_dir, ec);
  if (ec) return absl::FailedPreconditionError(absl::StrCat("--state-dir ", o.state_dir, ": ", ec.message()));
  o.state_dir = std::filesystem::absolute(o.state_dir).lexically_normal().string();
  if (!o.state_dir.empty() && o.state_dir.back() == '/') o.state_dir.pop_back();
  return absl::OkStatus();
}

absl::Status Server::Impl::OpenStoreAndMetrics() {
  auto opened = OpenStores(options.store, options.jobs.state_dir + "/trainyard.db", options.fence);
  if (!opened.ok()) return opened.status();
  store = std::move(opened->jobs);
  sweep_store = std::move(opened->sweeps);
  store_description = opened->description;
  NotifierOptions no;
  no.allowed_hosts = options.jobs.notify_allowed_hosts;
  if (!options.notify_secret_file.empty()) {
    auto key = ReadTokenFile(options.notify_secret_file, "--notify-secret-file");
    if (!key.ok()) return key.status();
    no.secret = *key;
  }
  notifier = std::make_unique<Notifier>(no, [this](const std::string& id, const std::string& text) {
    // A delivery of a sweep's webhook is one of the sweep's events.
    if (id.rfind("sweep-", 0) == 0) {
      if (sweeps) sweeps->Note(id, text);
      return;
    }
    NoteOnJob(id, text);
  });
  notifier->Start();
  notifying_store = std::make_unique<NotifyingJobStore>(store.get(), notifier.get());
  registry = std::make_shared<prometheus::Registry>();
  metrics = std::make_unique<ServerMetrics>(registry);
  metrics->SetPeakFlops(options.peak_flops);
  metrics->SetPerRankLimit(options.metrics_per_rank_max_ranks, options.metrics_slowest_ranks);
  endpoint = options.metrics_endpoint;
  if (endpoint == nullptr) {
    own_endpoint = std::make_unique<MetricsEndpoint>(options.metrics_listen);
    if (absl::Status st = own_endpoint->Start(); !st.ok()) return st;
    endpoint = own_endpoint.get();
  }
  endpoint->Add(metrics->collectable());
  metrics_port = endpoint->port();
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> Server::Impl::WorkerTlsArgs() const {
  const TlsOptions& o = options.tls;
  std::vector<std::string> args;
  if (o.cert.empty()) return args;
  const std::string ca = o.worker_ca.empty() ? o.client_ca : o.worker_ca;
  if (ca.empty()) {
    return absl::FailedPreconditionError(
        "with --tls-cert, workers need the CA of the server's certificate: give --tls-worker-ca (or "
        "--tls-client-ca)");
  }
  // The CA alone: a worker is known by its job's token, never by the
  // server's own key (which a job's processes must not see).
  args = {"--coordinator-ca", std::filesystem::absolute(ca).string()};
  return args;
}

absl::Status Server::Impl::MakeManagerAndLaunchers() {
  auto tls_args = WorkerTlsArgs();
  if (!tls_args.ok()) return tls_args.status();
  // The launchers report exits to the manager; they are destroyed before
  // the manager (Shutdown), so no callback outlives it.
  LocalLauncherOptions lo = options.local;
  lo.extra_worker_args = *tls_args;
  launcher = MakeLocalLauncher(lo, [this](const std::vector<RankExit>& e) { manager->workers().OnRankExits(e); });
  manager = std::make_unique<JobManager>(notifying_store.get(), launcher.get(), metrics.get(), options.jobs);
  sweeps = std::make_unique<SweepManager>(manager.get(), sweep_store.get(), notifier.get());
  sweeps->set_job_note([this](const std::string& job_id, const std::string& text) { NoteOnJob(job_id, text); });
  SlurmLauncherOptions so = options.slurm;
  so.extra_worker_args = *tls_args;
  slurm_launcher = MakeSlurmLauncher(
      so, [this](const std::vector<RankExit>& e) { manager->workers().OnRankExits(e); },
      [this](const std::string& job, int32_t attempt, const std::string& text) {
        manager->workers().OnLauncherNote(job, attempt, text);
      });
  manager->RegisterLauncher(LauncherKind::kSlurm, slurm_launcher.get());
  if (options.jobs.default_launcher == LauncherKind::kSlurm) return slurm_launcher->Available();
  return absl::OkStatus();
}

absl::Status Server::Impl::StartGrpc() {
  const ServerOptions& o = options;
  std::string token;
  if (!o.policy.auth_token_file.empty()) {
    auto t = ReadTokenFile(o.policy.auth_token_file, "--auth-token-file");
    if (!t.ok()) return t.status();
    token = *t;
  }
  auto creds = ServerCredentials(o.tls.cert, o.tls.key, o.tls.client_ca);
  if (!creds.ok()) return creds.status();
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  identities = std::make_unique<Identities>(token, o.policy.policy_file, o.jobs.allowed_roots);
  if (!o.tls.client_ca.empty()) {
    std::string own;
    if (!ReadFileToString(o.tls.cert, &own)) return absl::FailedPreconditionError("--tls-cert: cannot read it");
    identities->RequireClientCertificates(own);
  }
  if (auto s = identities->Reload(); !s.ok())
    return absl::InvalidArgumentError(absl::StrCat("--policy-file ", s.message()));
  if (!o.policy.policy_file.empty()) {
    spdlog::info("trainyard-server: policy {}: {} users", o.policy.policy_file, identities->policy()->users.size());
  }
  manager->SetPolicy(identities->policy());
  notifying_store->SetPolicy(identities->policy());
  // A sweep's trials act with its owner's rights as they are at each
  // submission, not as they were when the sweep was submitted.
  sweeps->set_caller_lookup([ids = identities.get()](const Caller& stored) { return ids->Current(stored); });
  job_service = std::make_unique<JobServiceImpl>(manager.get(), identities.get(), sweeps.get());
  worker_service = std::make_unique<WorkerServiceImpl>(&manager->workers());
  // Every message down to a worker carries the term this server leads
  // under: a worker obeys no coordinator older than the newest it has heard.
  if (options.fence) worker_service->set_term_source([fence = options.fence] { return fence->term(); });
  grpc::ServerBuilder builder;
  builder.AddListeningPort(o.listen, *creds, &grpc_port);
  builder.RegisterService(job_service.get());
  builder.RegisterService(worker_service.get());
  builder.SetMaxReceiveMessageSize(4 << 20);
  // The workers' keepalive pings on quiet control streams are welcome.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, kServerMinPingIntervalMs);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  grpc_server = builder.BuildAndStart();
  if (!grpc_server || grpc_port == 0) {
    return absl::UnavailableError(absl::StrCat("--listen ", o.listen, ": cannot listen there"));
  }
  if (!o.http_listen.empty()) {
    web_ui = std::make_unique<WebUi>(job_service.get(), identities.get(),
                                     WebUiOptions{o.http_listen, o.web_session_ttl, o.http_allowed_hosts});
    if (absl::Status st = web_ui->Start(); !st.ok()) return st;
    http_port = web_ui->port();
  }
  return absl::OkStatus();
}

void Server::Impl::AdvertiseAddresses() {
  const ServerOptions& o = options;
  const std::string host = HostOf(o.listen);
  const bool wildcard = host == "0.0.0.0" || host == "[::]" || host.empty();
  // Local workers use loopback when the server listens everywhere; remote
  // ones need a name of this host.
  remote_addr = o.advertise_addr;
  if (remote_addr.empty()) {
    char name[256] = {0};
    gethostname(name, sizeof(name) - 1);
    remote_addr = wildcard ? std::string(name) : host;
  }
  if (remote_addr.find(':') == std::string::npos || remote_addr.back() == ']') {
    remote_addr = absl::StrCat(remote_addr, ":", grpc_port);
  }
  const std::string local_addr = absl::StrCat(wildcard ? "127.0.0.1" : host, ":", grpc_port);
  // Over a shared store workers are given every coordinator, so that they
  // find the next leader after a takeover.
  if (!o.ha.coordinators.empty()) {
    manager->set_coordinator_addr(o.ha.coordinators, o.ha.coordinators);
  } else {
    manager->set_coordinator_addr(local_addr, remote_addr);
  }
}

void Server::Impl::StartWatchdog() {
  watchdog = std::thread([this] {
    absl::MutexLock lock(&watchdog_mu);
    auto stop = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(watchdog_mu) { return watchdog_stop; };
    while (!watchdog_mu.AwaitWithTimeout(absl::Condition(&stop), absl::Milliseconds(500))) manager->CheckProgress();
  });
}

absl::Status Server::Impl::WriteReadyFile() {
  const std::string& path = options.ready_file;
  if (path.empty()) return absl::OkStatus();
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << "{\"grpc_port\": " << grpc_port << ", \"metrics_port\": " << metrics_port << ", \"http_port\": " << http_port
        << ", \"pid\": " << getpid() << (options.fence ? ", \"role\": \"leader\"" : "") << "}\n";
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return absl::InternalError(absl::StrCat("--ready-file ", path, ": ", ec.message()));
  return absl::OkStatus();
}

absl::Status Server::Start() {
  Impl& s = *impl_;
  for (absl::Status (Impl::*step)() :
       {&Impl::PrepareStateDir, &Impl::OpenStoreAndMetrics, &Impl::MakeManagerAndLaunchers, &Impl::StartGrpc}) {
    if (absl::Status st = (s.*step)(); !st.ok()) return st;
  }
  s.AdvertiseAddresses();
  // Jobs of an earlier coordinator: requeued, or followed until their
  // workers reattach.
  if (absl::Status st = s.manager->Recover(); !st.ok()) return st;
  // Sweeps resume over them: their searchers replay what they decided.
  if (absl::Status st = s.sweeps->Recover(); !st.ok()) return st;
  s.sweeps->Start();
  s.StartWatchdog();
  const ServerOptions& o = s.options;
  spdlog::info(
      "trainyard-server: gRPC on {}:{} (workers elsewhere use {}), metrics on {}, web UI {}, state in {} ({}), {} "
      "slots, {} GPUs, default launcher {}, worker {}",
      HostOf(o.listen), s.grpc_port, s.remote_addr, absl::StrCat(HostOf(o.metrics_listen), ":", s.metrics_port),
      s.web_ui ? absl::StrCat("on http://", HostOf(o.http_listen), ":", s.http_port, "/ui/") : "off", o.jobs.state_dir,
      s.store_description, o.jobs.slots, o.jobs.gpus, LauncherKindName(o.jobs.default_launcher), o.local.worker_binary);
  return s.WriteReadyFile();
}

void Server::Wait() {
  if (impl_->grpc_server) impl_->grpc_server->Wait();
}

void Server::Shutdown() { Shutdown(impl_->options.on_shutdown); }

void Server::Shutdown(ShutdownMode mode) {
  Impl& s = *impl_;
  // A second caller waits until the first has finished.
  absl::MutexLock lock(&s.shutdown_mu);
  if (s.shut_down) return;
  s.shut_down = true;
  if (s.job_service) s.job_service->Shutdown();
  if (s.web_ui) s.web_ui->Stop();
  if (s.sweeps) s.sweeps->Stop();  // submits and cancels no more trials
  if (s.watchdog.joinable()) {
    {
      absl::MutexLock stop(&s.watchdog_mu);
      s.watchdog_stop = true;
    }
    s.watchdog.join();
  }
  std::vector<std::string> stopping;
  if (s.manager) stopping = s.manager->Shutdown(mode);
  if (mode == ShutdownMode::kDetach) {
    // The workers are the next coordinator's: nothing stops or reaps them.
    if (s.launcher) s.launcher->Detach();
    if (s.slurm_launcher) s.slurm_launcher->Detach();
  }
  auto live = [&] {
    int n = 0;
    for (const auto& id : stopping) {
      n += s.launcher ? s.launcher->LiveProcesses(id) : 0;
      n += s.slurm_launcher ? s.slurm_launcher->LiveProcesses(id) : 0;
    }
    return n;
  };
  // Polled: the launchers report exits from their own threads.
  auto wait_until = [&](std::chrono::steady_clock::time_point deadline) {
    while (live() > 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  };
  if (mode == ShutdownMode::kCheckpoint) {
    wait_until(std::chrono::steady_clock::now() + s.options.shutdown_checkpoint_timeout);
    if (live() > 0) {
      spdlog::warn("trainyard-server: checkpoints not done within {} ms; stopping the groups",
                   s.options.shutdown_checkpoint_timeout.count());
      s.manager->StopGroups(stopping);
    }
  }
  // Give stopping workers their grace before the launcher kills what is left.
  wait_until(std::chrono::steady_clock::now() + s.options.local.stop_grace + std::chrono::seconds(1));
  // Calls in flight get a moment to finish; the streams still open then (a
  // detached job's workers, clients watching) are cancelled: they never end
  // by themselves, and the workers reconnect to the next coordinator.
  if (s.grpc_server) s.grpc_server->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(250));
  s.launcher.reset();  // kills and reaps what is left; no callback after this
  s.slurm_launcher.reset();
  if (s.notifier) s.notifier->Stop();  // what is still waiting is recorded as not delivered
  if (s.endpoint && s.metrics) s.endpoint->Remove(s.metrics->collectable());
  if (s.own_endpoint) s.own_endpoint->Stop();
}

absl::Status Server::ReloadPolicy() {
  Impl& s = *impl_;
  if (!s.identities) return absl::FailedPreconditionError("the server has not started");
  if (s.options.policy.policy_file.empty()) return absl::FailedPreconditionError("no --policy-file to reload");
  if (auto st = s.identities->Reload(); !st.ok()) return st;
  s.manager->SetPolicy(s.identities->policy());
  s.notifying_store->SetPolicy(s.identities->policy());
  const auto policy = s.identities->policy();
  spdlog::info("policy {} reloaded: {} users, {} priority classes", s.options.policy.policy_file, policy->users.size(),
               policy->priority_classes.size());
  return absl::OkStatus();
}

int Server::grpc_port() const { return impl_->grpc_port; }
int Server::metrics_port() const { return impl_->metrics_port; }
int Server::http_port() const { return impl_->http_port; }

}  // namespace trainyard
