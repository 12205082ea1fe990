// Coordinator: this process's part in the service, over its store.
//
// SQLite ("" or sqlite:PATH, one host): one Server from Start to Shutdown.
//
// PostgreSQL: one of any number of coordinators sharing the database, of
// which one leads (server/leadership). A standby answers every call with the
// leader's address (StandbyServer) and serves /livez, /readyz (503) and
// /metrics. Once it holds the lease it starts a Server whose writes and
// worker commands carry its term (server/store/fence.h); the new Server loads
// the state and adopts the running jobs as a restarted coordinator does. When
// it loses the lease (replaced, cut off from the database past the lease, or
// a write found its term stale) that Server stops without stopping any job
// (detach) and this coordinator is a standby again.
// docs/operating/high-availability.md.
#ifndef TRAINYARD_SERVER_API_COORDINATOR_H_
#define TRAINYARD_SERVER_API_COORDINATOR_H_

#include <memory>

#include "absl/status/status.h"
#include "server/api/server.h"

namespace trainyard {

class Coordinator {
 public:
  explicit Coordinator(ServerOptions options);
  ~Coordinator();

  // What keeps it from serving at all: a flag, a port, the database.
  absl::Status Start();
  // Serves until Shutdown (from another thread).
  void Run();
  // Stops as --on-shutdown says; a leader gives up its lease after, so that
  // a standby takes over at once.
  void Shutdown();
  absl::Status ReloadPolicy();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_API_COORDINATOR_H_
