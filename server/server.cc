#include "server/server.h"
#include "common/paths.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <prometheus/exposer.h>
#include <prometheus/registry.h>
#include <unistd.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/credentials.h"
#include "common/secrets.h"
#include "server/job_manager.h"
#include "server/rpc_services.h"
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
  std::shared_ptr<prometheus::Registry> registry;
  std::unique_ptr<ServerMetrics> metrics;
  std::unique_ptr<prometheus::Exposer> exposer;
  std::unique_ptr<JobManager> manager;
  std::unique_ptr<Launcher> launcher;
  std::unique_ptr<Launcher> slurm_launcher;
  std::unique_ptr<JobServiceImpl> job_service;
  std::unique_ptr<WorkerServiceImpl> worker_service;
  std::unique_ptr<grpc::Server> grpc_server;
  int grpc_port = 0;
  int metrics_port = 0;
  std::mutex shutdown_mu;
  bool shut_down = false;  // guarded by shutdown_mu
  std::thread watchdog;    // calls JobManager::CheckProgress every 500 ms
  std::mutex watchdog_mu;
  std::condition_variable watchdog_cv;
  bool watchdog_stop = false;  // guarded by watchdog_mu
};

Server::Server(ServerOptions options) : impl_(std::make_unique<Impl>()) { impl_->options = std::move(options); }

Server::~Server() { Shutdown(); }

absl::Status Server::Start() {
  Impl& s = *impl_;
  ServerOptions& o = s.options;
  if (o.slots <= 0) o.slots = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (o.worker_binary.empty()) o.worker_binary = SelfDir() + "/trainyard-worker";
  std::error_code ec;
  std::filesystem::create_directories(o.state_dir, ec);
  if (ec) return absl::FailedPreconditionError(absl::StrCat("--state-dir ", o.state_dir, ": ", ec.message()));
  o.state_dir = std::filesystem::absolute(o.state_dir).lexically_normal().string();
  if (!o.state_dir.empty() && o.state_dir.back() == '/') o.state_dir.pop_back();

  auto store = JobStore::Open(o.state_dir + "/trainyard.db");
  if (!store.ok()) return store.status();
  s.store = std::move(*store);

  s.registry = std::make_shared<prometheus::Registry>();
  s.metrics = std::make_unique<ServerMetrics>(s.registry);
  try {
    s.exposer = std::make_unique<prometheus::Exposer>(o.metrics_listen);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("--metrics-listen ", o.metrics_listen, ": ", e.what()));
  }
  s.exposer->RegisterCollectable(s.registry);
  auto ports = s.exposer->GetListeningPorts();
  s.metrics_port = ports.empty() ? 0 : ports.front();

  JobManagerOptions mo;
  mo.slots = o.slots;
  if (o.launcher == "local") {
    mo.default_launcher = LauncherKind::kLocal;
  } else if (o.launcher == "slurm") {
    mo.default_launcher = LauncherKind::kSlurm;
  } else if (o.launcher == "external") {
    mo.default_launcher = LauncherKind::kExternal;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("--launcher ", o.launcher, ": must be local, slurm or external"));
  }
  mo.gpus = o.gpus >= 0 ? o.gpus : DetectGpus();
  mo.state_dir = o.state_dir;
  mo.max_queued_jobs = o.max_queued_jobs;
  mo.limits.max_num_processes = o.max_num_processes;
  mo.allowed_roots = o.allowed_roots;
  mo.stop_grace = o.stop_grace;
  // The launcher reports exits to the manager; it is destroyed before the
  // manager (Shutdown), so no callback outlives it.
  LocalLauncherOptions lo;
  lo.worker_binary = o.worker_binary;
  if (!o.tls_cert.empty()) {
    const std::string ca = o.tls_worker_ca.empty() ? o.tls_client_ca : o.tls_worker_ca;
    if (ca.empty()) {
      return absl::FailedPreconditionError(
          "with --tls-cert, workers need the CA of the server's certificate: give --tls-worker-ca (or "
          "--tls-client-ca)");
    }
    lo.extra_worker_args = {"--coordinator-ca", std::filesystem::absolute(ca).string()};
    if (!o.tls_client_ca.empty()) {
      for (const std::string& a : {std::string("--tls-cert"), std::filesystem::absolute(o.tls_cert).string(),
                                   std::string("--tls-key"), std::filesystem::absolute(o.tls_key).string()}) {
        lo.extra_worker_args.push_back(a);
      }
    }
  }
  lo.stop_grace = o.stop_grace;
  Impl* self = impl_.get();
  s.launcher = MakeLocalLauncher(lo, [self](const RankExit& e) { self->manager->OnRankExit(e); });
  s.manager = std::make_unique<JobManager>(s.store.get(), s.launcher.get(), s.metrics.get(), mo);
  SlurmLauncherOptions so;
  so.worker_binary = o.slurm_worker_binary.empty() ? o.worker_binary : o.slurm_worker_binary;
  so.stop_grace = o.stop_grace;
  so.slurm_bin_dir = o.slurm_bin_dir;
  so.partition = o.slurm_partition;
  so.account = o.slurm_account;
  so.extra_sbatch_args = o.slurm_extra_args;
  so.extra_worker_args = lo.extra_worker_args;
  s.slurm_launcher = MakeSlurmLauncher(so, [self](const RankExit& e) { self->manager->OnRankExit(e); });
  s.manager->RegisterLauncher(LauncherKind::kSlurm, s.slurm_launcher.get());
  if (mo.default_launcher == LauncherKind::kSlurm) {
    if (auto st = s.slurm_launcher->Available(); !st.ok()) return st;
  }

  std::string token;
  if (!o.auth_token_file.empty()) {
    auto t = ReadTokenFile(o.auth_token_file, "--auth-token-file");
    if (!t.ok()) return t.status();
    token = *t;
  }
  auto server_creds = ServerCredentials(o.tls_cert, o.tls_key, o.tls_client_ca);
  if (!server_creds.ok()) return server_creds.status();
  std::shared_ptr<grpc::ServerCredentials> creds = *server_creds;

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  s.job_service = std::make_unique<JobServiceImpl>(s.manager.get(), token);
  s.worker_service = std::make_unique<WorkerServiceImpl>(s.manager.get());
  grpc::ServerBuilder builder;
  builder.AddListeningPort(o.listen, creds, &s.grpc_port);
  builder.RegisterService(s.job_service.get());
  builder.RegisterService(s.worker_service.get());
  builder.SetMaxReceiveMessageSize(4 << 20);
  s.grpc_server = builder.BuildAndStart();
  if (!s.grpc_server || s.grpc_port == 0) {
    return absl::UnavailableError(absl::StrCat("--listen ", o.listen, ": cannot listen there"));
  }
  std::string host = HostOf(o.listen);
  const bool wildcard = host == "0.0.0.0" || host == "[::]" || host.empty();
  // Local workers use loopback when the server listens everywhere; remote
  // ones need a name of this host.
  std::string remote = o.advertise_addr;
  if (remote.empty()) {
    char name[256] = {0};
    gethostname(name, sizeof(name) - 1);
    remote = wildcard ? std::string(name) : host;
  }
  if (remote.find(':') == std::string::npos || remote.back() == ']') remote = absl::StrCat(remote, ":", s.grpc_port);
  s.manager->set_coordinator_addr(absl::StrCat(wildcard ? "127.0.0.1" : host, ":", s.grpc_port), remote);
  if (auto st = s.manager->Recover(); !st.ok()) return st;
  // The hang watchdog.
  s.watchdog = std::thread([self] {
    std::unique_lock<std::mutex> lock(self->watchdog_mu);
    while (!self->watchdog_cv.wait_for(lock, std::chrono::milliseconds(500), [self] { return self->watchdog_stop; })) {
      self->manager->CheckProgress();
    }
  });

  spdlog::info(
      "trainyard-server: gRPC on {}:{} (workers elsewhere use {}), metrics on {}, state in {}, {} slots, "
      "{} GPUs, default launcher {}, worker {}",
      HostOf(o.listen), s.grpc_port, remote, absl::StrCat(HostOf(o.metrics_listen), ":", s.metrics_port), o.state_dir,
      o.slots, mo.gpus, o.launcher, o.worker_binary);
  if (!o.ready_file.empty()) {
    std::string tmp = o.ready_file + ".tmp";
    {
      std::ofstream out(tmp);
      out << "{\"grpc_port\": " << s.grpc_port << ", \"metrics_port\": " << s.metrics_port << ", \"pid\": " << getpid()
          << "}\n";
    }
    std::filesystem::rename(tmp, o.ready_file, ec);
    if (ec) return absl::InternalError(absl::StrCat("--ready-file ", o.ready_file, ": ", ec.message()));
  }
  return absl::OkStatus();
}

void Server::Wait() {
  if (impl_->grpc_server) impl_->grpc_server->Wait();
}

void Server::Shutdown() {
  Impl& s = *impl_;
  // A second caller waits until the first has finished.
  std::lock_guard<std::mutex> lock(s.shutdown_mu);
  if (s.shut_down) return;
  s.shut_down = true;
  if (s.job_service) s.job_service->Shutdown();
  if (s.watchdog.joinable()) {
    {
      std::lock_guard<std::mutex> lock(s.watchdog_mu);
      s.watchdog_stop = true;
    }
    s.watchdog_cv.notify_all();
    s.watchdog.join();
  }
  std::vector<std::string> stopping;
  if (s.manager) stopping = s.manager->Shutdown();
  // Give stopping workers their grace before the launcher kills what is left.
  const auto deadline = std::chrono::steady_clock::now() + s.options.stop_grace + std::chrono::seconds(1);
  auto live = [&] {
    int n = 0;
    for (const auto& id : stopping) {
      n += s.launcher ? s.launcher->LiveProcesses(id) : 0;
      n += s.slurm_launcher ? s.slurm_launcher->LiveProcesses(id) : 0;
    }
    return n;
  };
  while (live() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (s.grpc_server) s.grpc_server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  s.launcher.reset();  // kills and reaps what is left; no callback after this
  s.slurm_launcher.reset();
}

int Server::grpc_port() const { return impl_->grpc_port; }
int Server::metrics_port() const { return impl_->metrics_port; }

}  // namespace trainyard
