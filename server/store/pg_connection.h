// pg::Connection: one libpq connection to PostgreSQL, the PostgreSQL
// stores' (and server/leadership's) one way to run SQL; statements take
// text parameters $1, $2, ... (values are never spliced into SQL).
//
// A call is bounded: the connect by connect_timeout, each statement by the
// session's statement_timeout on the server and, on this side, by that plus
// two seconds (a database that stopped answering, a cut-off link, fails the
// call UNAVAILABLE then and leaves the connection broken), with TCP
// keepalives and tcp_user_timeout under it.
#ifndef TRAINYARD_SERVER_STORE_PG_CONNECTION_H_
#define TRAINYARD_SERVER_STORE_PG_CONNECTION_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

struct pg_conn;

namespace trainyard::pg {

// One libpq connection; not thread-safe (its user holds a lock).
class Connection {
 public:
  // url: a libpq URI (postgresql://user@host:port/db?...) or conninfo; its
  // own settings (connect_timeout, ...) win over the defaults here.
  // connect_timeout bounds the connect; the session gets statement_timeout
  // = statement_timeout (0: none), and TCP keepalives / tcp_user_timeout so
  // a cut-off database fails a call within about that long. UNAVAILABLE,
  // naming the URL without its password, when it cannot connect.
  static absl::StatusOr<std::unique_ptr<Connection>> Open(
      const std::string& url, std::chrono::milliseconds connect_timeout = std::chrono::seconds(5),
      std::chrono::milliseconds statement_timeout = std::chrono::seconds(10));
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  struct Result {
    std::vector<std::vector<std::optional<std::string>>> rows;  // text format; NULL = nullopt
    int64_t affected = 0;                                       // PQcmdTuples
  };
  // One statement with text parameters $1, $2, ... (nullopt: NULL); without
  // parameters, several statements may go at once (the last one's rows come
  // back). An error
  // is a Status whose message names the statement's first words and
  // PostgreSQL's message (and SQLSTATE): UNAVAILABLE when the connection is
  // broken (or breaks: no answer in time, the server went away; broken()
  // says so from then on until Reset), ABORTED for a serialization failure
  // or deadlock, DEADLINE_EXCEEDED for statement_timeout, INTERNAL for the
  // rest (a constraint, a syntax error).
  absl::StatusOr<Result> Exec(std::string_view sql, const std::vector<std::optional<std::string>>& params = {});
  bool broken() const;
  // Reconnects (the session's settings again); UNAVAILABLE when it cannot.
  absl::Status Reset();
  // The server's process serving this connection (tests: to stop it).
  int backend_pid() const;

 private:
  Connection(std::string url, std::chrono::milliseconds connect_timeout, std::chrono::milliseconds statement_timeout);
  absl::Status Connect();
  absl::Status Broken(std::string_view sql, const std::string& why);

  const std::string url_;
  const std::chrono::milliseconds connect_timeout_, statement_timeout_;
  pg_conn* conn_ = nullptr;
  bool broken_ = true;
};

// The URL (or conninfo) without its password, for logs and errors.
std::string Redacted(const std::string& url);
// Whether `url` is a PostgreSQL URI: postgresql:// or postgres://.
bool IsPostgresUrl(const std::string& url);

// A double as PostgreSQL's float8 input reads it back exactly ("NaN",
// "Infinity", "-Infinity" included), and back.
std::string FormatDouble(double v);
double ParseDouble(const std::optional<std::string>& text);
// An integer column's text (0 for NULL or garbage).
int64_t ParseInt(const std::optional<std::string>& text);
// BYTEA: bytes as a text parameter ("\x" and hex), and a text-format value back.
std::string ByteaParam(std::string_view bytes);
std::string ParseBytea(const std::optional<std::string>& text);

}  // namespace trainyard::pg

#endif  // TRAINYARD_SERVER_STORE_PG_CONNECTION_H_
