// MigrateStore: copies a coordinator's state from one store to another
// (`trainyard-server migrate-store --from sqlite:PATH --to postgresql://...`).
#ifndef TRAINYARD_SERVER_STORE_MIGRATE_STORE_H_
#define TRAINYARD_SERVER_STORE_MIGRATE_STORE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace trainyard {

// What a copy copied.
struct MigrateReport {
  int64_t jobs = 0, events = 0, checkpoints = 0, histories = 0, sweeps = 0, trials = 0, rung_results = 0,
          sweep_events = 0;
  std::string from, to;  // the stores' descriptions (OpenStores), passwords left out
};

// One line a person reads: "copied 12 jobs (40 events, 3 checkpoints, 12
// histories) and 1 sweep (4 trials, 6 rung results, 9 events) from
// sqlite:/x to postgresql://h/db".
std::string Describe(const MigrateReport& report);

// Copies every job (its row with its insertion number, events, checkpoints,
// history and its tails, in insertion order so pages and ids stay as they
// were) and every sweep (row, trials, rung results, events) from the store
// at `from_url` to the one at `to_url` (OpenStores' forms; a PostgreSQL
// target is migrated to the newest schema first; writes are unfenced). A
// SQLite source must exist (NotFound otherwise: no empty file is made); the
// target must be empty (FailedPrecondition otherwise, saying what it holds).
// The source is read while it is not written: stop its coordinator first.
// Returns what it copied; an error part-way leaves the target part-filled
// (empty it, or use another, to try again).
absl::StatusOr<MigrateReport> MigrateStore(const std::string& from_url, const std::string& to_url);

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_STORE_MIGRATE_STORE_H_
