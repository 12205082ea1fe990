// trainyard-worker: one rank of a training job. Started by a launcher
// (local, Slurm), or by anyone with `--join JOB` for jobs whose launcher is
// external (Kubernetes Indexed Jobs, a person on each node).
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "common/command_line.h"
#include "common/leader_hint.h"
#include "common/placement.h"
#include "worker/base/crash_report.h"
#include "worker/worker_main.h"

namespace {

// Leaves <dir>/rank-<r>.exit holding the exit code, for launchers that
// cannot wait for the process (Slurm).
void WriteExitStatus(const std::string& dir, int32_t rank, int code) {
  const std::string path = dir + "/rank-" + std::to_string(rank) + ".exit";
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << code << "\n";
    if (!out.good()) return;
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
}

// The token the local launcher hands over on descriptor
// $TRAINYARD_WORKER_TOKEN_FD (kept out of /proc/<pid>/environ); "" when
// there is none. The descriptor is closed after.
std::string TokenFromLauncher() {
  const char* fd_text = std::getenv("TRAINYARD_WORKER_TOKEN_FD");
  if (fd_text == nullptr || *fd_text == '\0') return "";
  const int fd = std::atoi(fd_text);
  if (fd <= 2) return "";
  std::string token;
  char buf[256];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n > 0) {
      token.append(buf, static_cast<size_t>(n));
      if (token.size() > 4096) break;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    break;
  }
  close(fd);
  unsetenv("TRAINYARD_WORKER_TOKEN_FD");
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) token.pop_back();
  return token;
}

}  // namespace

int main(int argc, char** argv) {
  trainyard::InstallCrashReport("trainyard-worker");
  trainyard::WorkerArgs a;
  std::string join, exit_status_dir;
  int rank = -1;
  double join_timeout_s = 600;
  CLI::App app{"trainyard-worker: one rank of a Trainyard training job"};
  app.add_option("--server", a.server,
                 "Coordinator address HOST:PORT; several, comma-separated, for coordinators of which one leads (the "
                 "worker goes to the leader, and to the next one after a takeover)")
      ->type_name("HOST:PORT[,HOST:PORT...]")
      ->required()
      ->envname("TRAINYARD_SERVER");
  auto* job = app.add_option("--job", a.job_id, "Job id (started by the coordinator's launcher)");
  app.add_option("--join", join,
                 "Join job JOB's current attempt (launcher: external); world size and rendezvous come from the "
                 "coordinator")
      ->envname("TRAINYARD_JOB")
      ->excludes(job);
  app.add_option("--rank", rank,
                 "This process's rank (default: env TRAINYARD_RANK, SLURM_PROCID, RANK or JOB_COMPLETION_INDEX)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--world-size", a.world_size, "Number of ranks (default: the coordinator's)")
      ->check(CLI::PositiveNumber);
  app.add_option("--attempt", a.attempt, "Attempt number of the job")->capture_default_str();
  app.add_option("--master-addr", a.master_addr,
                 "Rendezvous host, where rank 0 serves the store, when the coordinator names none (then: this, "
                 "else the Slurm step's first node, else MASTER_ADDR, else loopback)");
  app.add_option("--master-port", a.master_port,
                 "Rendezvous port when the coordinator names none; rank 0 joining: the port its store listens on "
                 "(default: a free one)")
      ->check(CLI::Range(1, 65535));
  app.add_option("--bind-addr", a.bind_addr,
                 "Address this rank's collectives bind to and peers reach it at (default: this host's address "
                 "toward the rendezvous host)");
  app.add_option("--advertise-addr", a.advertise_addr,
                 "Rank 0 joining: the address other ranks reach its store at (default: this host's address toward "
                 "the coordinator)")
      ->envname("TRAINYARD_ADVERTISE_ADDR");
  app.add_option("--join-timeout-s", join_timeout_s,
                 "How long a joining worker waits for the job to start and rank 0 to join")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 7 * 86400.0));
  app.add_option("--threads", a.threads, "Intra-op threads (default: the spec's threads_per_process)")
      ->check(CLI::Range(1, 256));
  app.add_option("--token", a.token, "Worker token (default: env TRAINYARD_WORKER_TOKEN)");
  app.add_option("--coordinator-ca", a.coordinator_ca, "CA (PEM) of a TLS coordinator's certificate");
  app.add_option("--tls-cert", a.tls_cert, "This worker's certificate (PEM), for a mutual-TLS coordinator");
  app.add_option("--tls-key", a.tls_key, "This worker's private key (PEM)");
  app.add_flag("--replica-store", a.replica_store,
               "Serve a store of this rank's own for fault_tolerance.mode replica (the launcher sets it)");
  app.add_option("--exit-status-dir", exit_status_dir,
                 "Write the exit code to DIR/rank-<rank>.exit before exiting (for launchers such as Slurm's)");
  if (const int rc = trainyard::ParseCommandLine(app, argc, argv, "trainyard-worker"); rc >= 0) return rc;
  if (a.job_id.empty() && join.empty()) {
    std::fprintf(stderr,
                 "trainyard-worker: give --job JOB (started by a launcher) or --join JOB (env TRAINYARD_JOB)\n");
    return trainyard::kExitUsage;
  }
  if (absl::StatusOr<std::vector<std::string>> servers = trainyard::SplitAddresses(a.server); !servers.ok()) {
    std::fprintf(stderr, "trainyard-worker: --server: %s\n", std::string(servers.status().message()).c_str());
    return trainyard::kExitUsage;
  }
  if (!join.empty()) {
    a.job_id = join;
    a.attempt = 0;
  }
  a.join_timeout = std::chrono::milliseconds(static_cast<int64_t>(join_timeout_s * 1000));
  if (rank < 0) {
    std::string source;
    auto env_rank = trainyard::RankFromEnvironment(&source);
    if (!env_rank) {
      std::fprintf(stderr,
                   "trainyard-worker: no rank: give --rank R or set TRAINYARD_RANK (Slurm's SLURM_PROCID, torchrun's "
                   "RANK and Kubernetes' JOB_COMPLETION_INDEX are read too)\n");
      return trainyard::kExitUsage;
    }
    rank = *env_rank;
  }
  a.rank = rank;
  if (a.world_size > 0 && a.rank >= a.world_size) {
    std::fprintf(stderr, "trainyard-worker: --rank %d must be below --world-size %d\n", a.rank, a.world_size);
    return trainyard::kExitUsage;
  }
  if (a.token.empty()) a.token = TokenFromLauncher();
  if (a.token.empty()) {
    if (const char* t = std::getenv("TRAINYARD_WORKER_TOKEN")) a.token = t;
  }
  const int code = trainyard::RunWorker(a);
  if (!exit_status_dir.empty()) WriteExitStatus(exit_status_dir, a.rank, code);
  return code;
}
