// The PostgreSQL implementations of JobStore and SweepStore (the same
// behaviour as the SQLite ones: tests/server/store runs every store test
// against both), over one pg::Pool whose database Migrate has brought to
// the newest schema. Every write is a transaction that first checks the
// pool's Fence (server/store/fence.h).
#ifndef TRAINYARD_SERVER_STORE_PG_STORES_H_
#define TRAINYARD_SERVER_STORE_PG_STORES_H_

#include <memory>

#include "server/store/job_store.h"
#include "server/store/pg_pool.h"
#include "server/store/sweep_store.h"

namespace trainyard {

std::unique_ptr<JobStore> NewPgJobStore(std::shared_ptr<pg::Pool> pool);
std::unique_ptr<SweepStore> NewPgSweepStore(std::shared_ptr<pg::Pool> pool);

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_STORE_PG_STORES_H_
