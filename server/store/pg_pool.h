// pg::Pool: a few connections to one PostgreSQL database, shared by a
// coordinator's PostgreSQL stores (job and sweep store), so that concurrent
// writes commit together (PostgreSQL flushes the WAL of commits that arrive
// together once). Thread-safe.
#ifndef TRAINYARD_SERVER_STORE_PG_POOL_H_
#define TRAINYARD_SERVER_STORE_PG_POOL_H_

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/store/fence.h"
#include "server/store/pg_connection.h"

namespace trainyard::pg {

class Pool {
 public:
  // Connects once (to fail now on a wrong URL), the other connections when
  // first needed. `fence`: the term every Write checks (null or term 0:
  // unfenced).
  static absl::StatusOr<std::shared_ptr<Pool>> Open(const std::string& url, int size = 4,
                                                    std::shared_ptr<Fence> fence = nullptr);

  // The URL without its password.
  const std::string& description() const { return description_; }

  // Runs `body` in one transaction on a connection of the pool: BEGIN, the
  // fence's check (SELECT term FROM trainyard_leader WHERE id = 1 FOR SHARE:
  // another term writes nothing, calls fence->Lost and is
  // FailedPrecondition), `body`, COMMIT; a failing body rolls back and its
  // status is returned. A connection found broken before COMMIT was sent
  // (nothing can have committed) is reset and the transaction run once more;
  // one that breaks during COMMIT is UNAVAILABLE saying the outcome is
  // unknown (never retried). `what` names the write in errors.
  absl::Status Write(std::string_view what, const std::function<absl::Status(Connection&)>& body);
  // Runs `body` (reads; no transaction) on a connection: a broken one is
  // reset and `body` run once more.
  absl::Status Read(const std::function<absl::Status(Connection&)>& body);

 private:
  Pool(std::string url, int size, std::shared_ptr<Fence> fence);
  // A connection of the pool (waits for one), connected.
  absl::StatusOr<Connection*> Acquire();
  void Release(Connection* c);
  absl::Status WriteOnce(Connection& c, std::string_view what, const std::function<absl::Status(Connection&)>& body,
                         bool* retry);

  const std::string url_, description_;
  const std::shared_ptr<Fence> fence_;
  absl::Mutex mu_;
  std::vector<std::unique_ptr<Connection>> all_ ABSL_GUARDED_BY(mu_);
  std::vector<Connection*> free_ ABSL_GUARDED_BY(mu_);
  int unopened_ ABSL_GUARDED_BY(mu_);  // connections not made yet
};

}  // namespace trainyard::pg

#endif  // TRAINYARD_SERVER_STORE_PG_POOL_H_
