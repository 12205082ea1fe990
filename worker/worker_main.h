// RunWorker: the whole life of one trainyard-worker process — connect to the
// coordinator, rendezvous, train, report. Returns the process exit code.
#ifndef TRAINYARD_WORKER_WORKER_MAIN_H_
#define TRAINYARD_WORKER_WORKER_MAIN_H_

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "common/worker_outcome.h"
#include "worker/collectives/collectives.h"

#include <chrono>
#include <memory>
#include <string>

namespace trainyard {

struct WorkerArgs {
  std::string server;
  std::string job_id;
  int32_t rank = 0;
  int32_t world_size = 0;  // 0: the coordinator's
  int32_t attempt = 1;     // 0: join the current attempt (--join)
  // Rendezvous: rank 0's store. Empty address: the coordinator's, else
  // the first node of the Slurm step, else MASTER_ADDR, else loopback.
  std::string master_addr;
  int master_port = 0;  // 0: the coordinator's; rank 0 joining: a free one
  // Address this rank's collectives bind to and peers reach it at; empty:
  // the local address toward the rendezvous host.
  std::string bind_addr;
  // Rank 0 joining: the address other ranks reach its store at; empty: the
  // local address toward the coordinator.
  std::string advertise_addr;
  // Joining: how long to wait for the job to start and rank 0 to join.
  std::chrono::milliseconds join_timeout{std::chrono::minutes(10)};
  std::string token;
  int32_t threads = 0;  // 0: the spec's threads_per_process
  // TLS to the coordinator: the CA its certificate is checked against, and
  // for mutual TLS this worker's certificate and key (PEM files).
  std::string coordinator_ca, tls_cert, tls_key;
  // fault_tolerance.mode replica: serve a store of this rank's own, where
  // the survivors of a membership form its next group.
  bool replica_store = false;
};

int RunWorker(const WorkerArgs& args);

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_WORKER_MAIN_H_
