// The PostgreSQL stores' schema, as numbered migrations: table
// trainyard_schema holds a row (version, applied_at) for each one applied.
// Migrate applies the missing ones in order, in one transaction under an
// advisory lock (pg_advisory_xact_lock), so that two coordinators starting
// at once migrate once; a database at a newer version than this binary
// knows is refused (FailedPrecondition), and nothing is changed.
#ifndef TRAINYARD_SERVER_STORE_PG_SCHEMA_H_
#define TRAINYARD_SERVER_STORE_PG_SCHEMA_H_

#include <cstdint>

#include "absl/status/status.h"
#include "server/store/pg_connection.h"

namespace trainyard::pg {

// The newest schema version this binary knows.
int64_t SchemaVersion();
// Brings the database of `c` to SchemaVersion().
absl::Status Migrate(Connection& c);

}  // namespace trainyard::pg

#endif  // TRAINYARD_SERVER_STORE_PG_SCHEMA_H_
