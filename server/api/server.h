// Server: wires the coordinator together — job store, launcher, job manager,
// gRPC services (with health checking and reflection) and the Prometheus
// exposer. Start() then Wait(); Shutdown() may be called from another thread.
#ifndef TRAINYARD_SERVER_API_SERVER_H_
#define TRAINYARD_SERVER_API_SERVER_H_

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/jobs/job_manager_options.h"
#include "server/jobs/shutdown_mode.h"
#include "server/launch/launcher.h"

namespace trainyard {

// TLS: certificate chain and key (PEM) of the server; with a client CA,
// clients must present a certificate it signed (mutual TLS).
struct TlsOptions {
  std::string cert, key, client_ca;
  // The CA workers check the server's certificate against (default:
  // client_ca). Under mutual TLS, local workers present the server's
  // certificate and key, which must then allow client authentication.
  std::string worker_ca;
};

// Who may call the JobService.
struct AccessOptions {
  // File holding the bearer token people's calls (JobService) must carry;
  // empty: no token needed.
  std::string auth_token_file;
  // The users' policy file (common/policy.h): users by token hash, groups,
  // roles, priority classes, quotas; reloaded by ReloadPolicy (SIGHUP).
  std::string policy_file;
};

class Fence;
class MetricsEndpoint;

// Several coordinators over one shared store (PostgreSQL), one leading
// (server/leadership; docs/operating/high-availability.md).
struct HighAvailabilityOptions {
  // Every coordinator's gRPC address as workers reach it, comma-separated:
  // what workers are given, so that they find the next leader after a
  // takeover. Empty: this coordinator's advertised address alone.
  std::string coordinators;
  std::chrono::milliseconds lease{5000};
  std::chrono::milliseconds renew_every{1000};
};

// The server's options, nested per part; server/api/main.cc sets them from its
// flags (docs/reference/server.md).
struct ServerOptions {
  // Where the state is kept: "" (SQLite in --state-dir), sqlite:PATH, or
  // postgresql://... (server/store/stores.h), which other coordinators may
  // share: then one leads at a time.
  std::string store;
  HighAvailabilityOptions ha;
  std::string listen = "127.0.0.1:50051";         // gRPC; port 0 = any free port
  std::string metrics_listen = "127.0.0.1:9464";  // Prometheus /metrics; port 0 = any
  // What stopping the server does to running jobs, and how long
  // kCheckpoint waits for their checkpoints before stopping them.
  ShutdownMode on_shutdown = ShutdownMode::kDetach;
  std::chrono::milliseconds shutdown_checkpoint_timeout{45000};
  // Peak FLOP/s of one device, for trainyard_job_mfu (0: no MFU).
  double peak_flops = 0;
  // Jobs of more ranks export aggregates, naming their slowest ranks
  // (server/metrics/server_metrics.h).
  int32_t metrics_per_rank_max_ranks = 64;
  int32_t metrics_slowest_ranks = 5;
  // The web UI and its JSON API (server/api/web_ui.h); empty: none. Port 0 = any.
  std::string http_listen;
  std::chrono::seconds web_session_ttl{12 * 3600};
  std::vector<std::string> http_allowed_hosts;  // --http-allowed-host
  std::string notify_secret_file;               // webhooks' signing key (--notify-secret-file)
  std::string ready_file;  // written once serving: {"grpc_port":..,"metrics_port":..,"http_port":..}
  // HOST[:PORT] workers on other hosts (Slurm, external) reach the gRPC
  // service at; default: the --listen host, or this host's name when that
  // is a wildcard address.
  std::string advertise_addr;

  // The jobs: state_dir holds the SQLite db and worker logs; slots 0: the
  // number of CPUs; gpus -1: as many as the NVIDIA driver reports.
  JobManagerOptions jobs = [] {
    JobManagerOptions o;
    o.slots = 0;
    o.gpus = -1;
    return o;
  }();
  // The local launcher: worker_binary empty = trainyard-worker beside the
  // server; stop_grace between SIGINT and SIGKILL (the Slurm launcher's too).
  LocalLauncherOptions local;
  // The Slurm launcher: where sbatch & co. are (empty: PATH), sbatch
  // defaults, and the worker binary as the compute nodes see it (empty:
  // local.worker_binary).
  SlurmLauncherOptions slurm;
  TlsOptions tls;
  AccessOptions policy;

  // Not flags: set by the Coordinator (server/api/coordinator.h) when this
  // server leads a shared store. fence: the term its writes and its workers'
  // commands carry (null: none, SQLite). metrics_endpoint: the process's
  // /metrics port, which outlives this server (null: the server's own).
  std::shared_ptr<Fence> fence;
  MetricsEndpoint* metrics_endpoint = nullptr;
};

class Server {
 public:
  explicit Server(ServerOptions options);
  ~Server();

  absl::Status Start();
  void Wait();
  // Stops as options.on_shutdown says.
  void Shutdown();
  // Stops as `mode` says (a leader that lost its lease: kDetach, whatever
  // --on-shutdown is, for the next leader adopts the jobs).
  void Shutdown(ShutdownMode mode);
  // Reads the policy file again: new users, classes and quotas apply to the
  // next calls and scheduling decisions; connections stay. On error the
  // previous policy stays.
  absl::Status ReloadPolicy();

  int grpc_port() const;
  int metrics_port() const;
  int http_port() const;  // 0: no web UI

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_API_SERVER_H_
