// OpenStores: the coordinator's job and sweep stores from the --store URL,
// SQLite (the embedded default, one host) or PostgreSQL (shared by several
// coordinators, of which one leads: server/leadership).
#ifndef TRAINYARD_SERVER_STORE_STORES_H_
#define TRAINYARD_SERVER_STORE_STORES_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/store/fence.h"
#include "server/store/job_store.h"
#include "server/store/sweep_store.h"

namespace trainyard {

struct Stores {
  std::unique_ptr<JobStore> jobs;
  std::unique_ptr<SweepStore> sweeps;
  std::string description;  // "sqlite:/abs/path" or the redacted postgresql URL
  bool shared = false;      // PostgreSQL: other coordinators may use it (leadership applies)
};

// url "": SQLite at default_sqlite_path; "sqlite:PATH": SQLite at PATH;
// "postgresql://..." / "postgres://...": PostgreSQL (schema migrated to the
// newest version first, under an advisory lock so two coordinators starting
// at once migrate once; a database of a newer schema is FailedPrecondition),
// its stores sharing a pool of 4 connections. Anything else: InvalidArgument
// naming --store and the accepted forms. fence: the term PostgreSQL writes
// check (null or term 0: unfenced); unused by SQLite.
absl::StatusOr<Stores> OpenStores(const std::string& url, const std::string& default_sqlite_path,
                                  std::shared_ptr<Fence> fence = nullptr);

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_STORE_STORES_H_
