// LeaseTable: the leader's lease as one row of the shared PostgreSQL database
// (table trainyard_leader, made by the store's schema, server/store): who
// leads, under which term, and until when by the database's clock. Every
// time in here is the database's (clock_timestamp()), never a host's, so
// hosts whose clocks disagree still agree on who leads.
//
// The term is the fencing token: it grows by one at each takeover, and every
// write of a shared store checks it in its own transaction (server/store/
// fence.h), so a leader that was replaced cannot write any more.
//
// Not thread-safe: one caller (Leadership's thread) owns it.
#ifndef TRAINYARD_SERVER_LEADERSHIP_LEASE_TABLE_H_
#define TRAINYARD_SERVER_LEADERSHIP_LEASE_TABLE_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace trainyard {
namespace pg {
class Connection;
}

// The row as last read.
struct LeaseRow {
  int64_t term = 0;
  std::string holder, address, http_address;
  bool live = false;  // not expired by the database's clock
};

// Who claims the lease: a coordinator's own id and where it is reached.
struct LeaseClaim {
  std::string holder;        // unique per coordinator process (host:pid:random)
  std::string address;       // gRPC, as clients and workers reach it
  std::string http_address;  // /metrics, /readyz
};

class LeaseTable {
 public:
  // The connection must reach a database whose schema holds trainyard_leader.
  LeaseTable(std::unique_ptr<pg::Connection> connection, LeaseClaim claim, std::chrono::milliseconds lease);
  ~LeaseTable();

  // Takes the lease when it has expired (or was never held): the next term,
  // this claim, valid for `lease` from now. The new term, or nullopt when
  // another coordinator holds a live lease. UNAVAILABLE: the database is
  // not reachable (the connection is reset for the next call).
  absl::StatusOr<std::optional<int64_t>> TryTake();
  // Extends the lease held under `term` by `lease` from now. false: the
  // row holds another term or holder (this coordinator was replaced).
  absl::StatusOr<bool> Renew(int64_t term);
  // Gives up the lease held under `term` at once (a clean stop), so that a
  // standby takes over without waiting for it to expire.
  absl::Status Resign(int64_t term);
  absl::StatusOr<LeaseRow> Read();

  const LeaseClaim& claim() const { return claim_; }

 private:
  absl::StatusOr<pg::Connection*> Connected();

  std::unique_ptr<pg::Connection> connection_;
  LeaseClaim claim_;
  std::string lease_ms_;  // as the queries' parameter
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_LEADERSHIP_LEASE_TABLE_H_
