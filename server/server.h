// Server: wires the coordinator together — job store, launcher, job manager,
// gRPC services (with health checking and reflection) and the Prometheus
// exposer. Start() then Wait(); Shutdown() may be called from another thread.
#ifndef TRAINYARD_SERVER_SERVER_H_
#define TRAINYARD_SERVER_SERVER_H_

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/shutdown_mode.h"

namespace trainyard {

struct ServerOptions {
  std::string listen = "127.0.0.1:50051";         // gRPC; port 0 = any free port
  std::string metrics_listen = "127.0.0.1:9464";  // Prometheus /metrics; port 0 = any
  std::string state_dir = "trainyard-state";      // SQLite db and worker logs
  int slots = 0;                                  // 0 = number of CPUs
  std::string worker_binary;                      // empty = trainyard-worker beside the server
  std::chrono::milliseconds stop_grace{5000};     // SIGINT → SIGKILL
  // What stopping the server does to running jobs, and how long
  // kCheckpoint waits for their checkpoints before stopping them.
  ShutdownMode on_shutdown = ShutdownMode::kDetach;
  std::chrono::milliseconds shutdown_checkpoint_timeout{45000};
  // Base of the wait between repeated failures of a job (0: none).
  std::chrono::milliseconds restart_backoff{1000};
  // Peak FLOP/s of one device, for trainyard_job_mfu (0: no MFU).
  double peak_flops = 0;
  std::string ready_file;  // written once serving: {"grpc_port":..,"metrics_port":..}
  int max_queued_jobs = 1000;
  int max_num_processes = 1024;
  // Roots a job's paths must lie under; empty: the state dir and the
  // working directory.
  std::vector<std::string> allowed_roots;
  // The Python that runs script jobs whose spec names none.
  std::string script_python = "python3";
  // File holding the bearer token people's calls (JobService) must carry;
  // empty: no token needed.
  std::string auth_token_file;
  // The users' policy file (common/policy.h): users by token hash, groups,
  // roles, priority classes, quotas; reloaded by ReloadPolicy (SIGHUP).
  std::string policy_file;
  // Fair share's half-life and the minimum run time before a job is
  // preempted for another (server/scheduler.h).
  std::chrono::seconds fair_share_half_life{24 * 3600};
  std::chrono::seconds preemption_min_run_time{600};
  // TLS: certificate chain and key (PEM) of the server; with a client CA,
  // clients must present a certificate it signed (mutual TLS).
  std::string tls_cert, tls_key, tls_client_ca;
  // The CA workers check the server's certificate against (default:
  // tls_client_ca). Under mutual TLS, local workers present the server's
  // certificate and key, which must then allow client authentication.
  std::string tls_worker_ca;
  // Launcher of jobs whose spec names none: local, slurm or external.
  std::string launcher = "local";
  // GPUs for local CUDA jobs; -1: as many as the NVIDIA driver reports.
  int gpus = -1;
  // Ranks of local CUDA jobs one GPU may take at once (1: a GPU per rank).
  int ranks_per_gpu = 1;
  // HOST[:PORT] workers on other hosts (Slurm, external) reach the gRPC
  // service at; default: the --listen host, or this host's name when that
  // is a wildcard address.
  std::string advertise_addr;
  // Slurm launcher: where sbatch & co. are (empty: PATH), sbatch defaults,
  // and the worker binary as the compute nodes see it (default
  // --worker-binary).
  std::string slurm_bin_dir, slurm_partition, slurm_account, slurm_worker_binary;
  std::vector<std::string> slurm_extra_args;
};

class Server {
 public:
  explicit Server(ServerOptions options);
  ~Server();

  absl::Status Start();
  void Wait();
  void Shutdown();
  // Reads the policy file again: new users, classes and quotas apply to the
  // next calls and scheduling decisions; connections stay. On error the
  // previous policy stays.
  absl::Status ReloadPolicy();

  int grpc_port() const;
  int metrics_port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_SERVER_H_
