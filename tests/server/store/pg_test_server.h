// A throwaway PostgreSQL 15 for the store tests: initdb (-A trust) in a
// temporary directory, the server on 127.0.0.1 and a free port (and a Unix
// socket in that directory), run as user postgres when the tests run as
// root (initdb refuses root). A test program shares one (Shared(), started
// on first use, so programs and tests that use only SQLite start none) and
// gives each test a fresh database (NewDatabase). initdb runs once a build:
// later programs copy its data directory (build/tests/pg-template-UID). A
// helper process stops the
// server (pg_ctl stop -m immediate) and removes its directory when the test
// program exits, however it exits.
//
// The store tests run against both backends: StoreBackend names them for
// INSTANTIATE_TEST_SUITE_P, and StoreUrl gives a test's store URL.
#ifndef TRAINYARD_TESTS_SERVER_STORE_PG_TEST_SERVER_H_
#define TRAINYARD_TESTS_SERVER_STORE_PG_TEST_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/store/pg_connection.h"

namespace trainyard::test {

class PgTestServer {
 public:
  // A server of its own (a test that stops it); a missing PostgreSQL is an
  // error naming the package (postgresql-15) to install.
  static absl::StatusOr<std::unique_ptr<PgTestServer>> Start();
  // The test program's one server: null, with the reason in `error`, when
  // it cannot start.
  static PgTestServer* Shared(std::string* error);
  ~PgTestServer();

  // A fresh, empty database on this server: its postgresql:// URL.
  absl::StatusOr<std::string> NewDatabase();
  std::string Url(const std::string& database) const;
  int port() const { return port_; }
  // Stops the server as a crash would (pg_ctl stop -m immediate), and starts
  // it again on the same port with the same data.
  absl::Status Kill();
  absl::Status Restart();

 private:
  PgTestServer() = default;
  absl::Status Init();
  absl::Status MakeDataDirectory();
  // Runs `command` (as postgres when root); its output in the error.
  absl::Status Run(const std::string& command) const;

  std::string dir_, bin_, as_postgres_;
  int port_ = 0;
  int watcher_pipe_ = -1;
  int watcher_pid_ = -1;
  absl::Mutex mu_;
  std::unique_ptr<pg::Connection> admin_ ABSL_GUARDED_BY(mu_);
  int databases_ ABSL_GUARDED_BY(mu_) = 0;
};

enum class StoreBackend { kSqlite, kPostgres };
// "sqlite" / "postgresql": the parameterized tests' name suffixes.
std::string BackendName(StoreBackend backend);
// The URL of a fresh store for a test: SQLite in `dir`, or a new database
// of the shared server (an error saying why it could not start).
absl::StatusOr<std::string> StoreUrl(StoreBackend backend, const std::string& dir);

}  // namespace trainyard::test

#endif  // TRAINYARD_TESTS_SERVER_STORE_PG_TEST_SERVER_H_
