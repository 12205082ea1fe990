#include "server/store/pg_connection.h"

#include <libpq-fe.h>
#include <poll.h>

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace trainyard::pg {
namespace {

using Clock = std::chrono::steady_clock;

// The statement's first words, to name it in an error.
std::string FirstWords(std::string_view text) {
  const absl::string_view sql(text.data(), text.size());
  std::string out;
  int words = 0;
  for (absl::string_view w : absl::StrSplit(sql, absl::ByAnyChar(" \n\t"), absl::SkipEmpty())) {
    if (++words > 4 || out.size() + w.size() > 48) break;
    absl::StrAppend(&out, out.empty() ? "" : " ", w);
  }
  return out;
}

std::string Trimmed(const char* message) { return std::string(absl::StripAsciiWhitespace(message ? message : "")); }

// Waits until the socket of `conn` is readable (and writable, with
// `write`), or `deadline`; false on the deadline or a poll error.
bool WaitSocket(pg_conn* conn, bool write, Clock::time_point deadline) {
  pollfd p{PQsocket(conn), static_cast<short>(POLLIN | (write ? POLLOUT : 0)), 0};
  if (p.fd < 0) return false;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    const int n = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1000 * 1000)));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return false;
  }
}

}  // namespace

Connection::Connection(std::string url, std::chrono::milliseconds connect_timeout,
                       std::chrono::milliseconds statement_timeout)
    : url_(std::move(url)), connect_timeout_(connect_timeout), statement_timeout_(statement_timeout) {}

Connection::~Connection() {
  if (conn_ != nullptr) PQfinish(conn_);
}

absl::StatusOr<std::unique_ptr<Connection>> Connection::Open(const std::string& url,
                                                             std::chrono::milliseconds connect_timeout,
                                                             std::chrono::milliseconds statement_timeout) {
  std::unique_ptr<Connection> c(new Connection(url, connect_timeout, statement_timeout));
  if (absl::Status s = c->Connect(); !s.ok()) return s;
  return c;
}

absl::Status Connection::Connect() {
  if (conn_ != nullptr) PQfinish(conn_);
  conn_ = nullptr;
  broken_ = true;
  const int64_t user_timeout_ms = statement_timeout_.count() > 0 ? statement_timeout_.count() : 10000;
  const std::string connect_s = std::to_string(std::max<int64_t>(2, (connect_timeout_.count() + 999) / 1000));
  const std::string user_timeout = std::to_string(user_timeout_ms);
  // Our defaults come before the URL: its own settings win.
  const char* keys[] = {"connect_timeout",     "keepalives",       "keepalives_idle",
                        "keepalives_interval", "keepalives_count", "tcp_user_timeout",
                        "application_name",    "dbname",           nullptr};
  const char* values[] = {connect_s.c_str(),    "1",         "5",          "2",    "3",
                          user_timeout.c_str(), "trainyard", url_.c_str(), nullptr};
  conn_ = PQconnectStartParams(keys, values, /*expand_dbname=*/1);
  if (conn_ == nullptr) return absl::ResourceExhaustedError("postgresql: out of memory");
  const auto deadline = Clock::now() + connect_timeout_;
  PostgresPollingStatusType st = PGRES_POLLING_WRITING;
  while (PQstatus(conn_) != CONNECTION_BAD && st != PGRES_POLLING_OK && st != PGRES_POLLING_FAILED) {
    if (!WaitSocket(conn_, st == PGRES_POLLING_WRITING, deadline)) {
      return absl::UnavailableError(
          absl::StrCat("cannot connect to ", Redacted(url_), ": no answer within ", connect_timeout_.count(), " ms"));
    }
    st = PQconnectPoll(conn_);
  }
  if (PQstatus(conn_) != CONNECTION_OK) {
    return absl::UnavailableError(
        absl::StrCat("cannot connect to ", Redacted(url_), ": ", Trimmed(PQerrorMessage(conn_))));
  }
  // PostgreSQL's notices (CREATE TABLE IF NOT EXISTS's "already exists,
  // skipping") are not errors: not on the program's stderr.
  PQsetNoticeProcessor(
      conn_, [](void*, const char*) {}, nullptr);
  if (PQsetnonblocking(conn_, 1) != 0) {
    return absl::InternalError(absl::StrCat("postgresql: cannot make the connection non-blocking"));
  }
  broken_ = false;
  auto set = Exec(absl::StrCat("SET statement_timeout = ", statement_timeout_.count()));
  if (!set.ok()) return set.status();
  // A coordinator stopped in the middle of a transaction (paused, cut off)
  // holds its locks, the lease row's FOR SHARE among them, until the
  // database ends its session: after this long, so that a standby's
  // takeover waits no longer. A live one never idles that long between the
  // statements of a transaction.
  set = Exec("SET idle_in_transaction_session_timeout = 2000");
  if (!set.ok()) return set.status();
  return absl::OkStatus();
}

absl::Status Connection::Broken(std::string_view sql, const std::string& why) {
  broken_ = true;
  if (conn_ != nullptr) PQfinish(conn_);  // a late answer must not be read as the next statement's
  conn_ = nullptr;
  return absl::UnavailableError(absl::StrCat("postgresql ", Redacted(url_), ": ", FirstWords(sql), ": ", why));
}

absl::StatusOr<Connection::Result> Connection::Exec(std::string_view sql,
                                                    const std::vector<std::optional<std::string>>& params) {
  if (broken_ || conn_ == nullptr || PQstatus(conn_) != CONNECTION_OK) {
    return Broken(sql, "the connection is broken");
  }
  const std::string text(sql);
  std::vector<const char*> values;
  values.reserve(params.size());
  for (const auto& p : params) values.push_back(p ? p->c_str() : nullptr);
  // Without parameters the simple protocol, which takes several statements (a migration's).
  const int sent = values.empty() ? PQsendQuery(conn_, text.c_str())
                                  : PQsendQueryParams(conn_, text.c_str(), static_cast<int>(values.size()), nullptr,
                                                      values.data(), nullptr, nullptr, 0);
  if (!sent) {
    return Broken(sql, Trimmed(PQerrorMessage(conn_)));
  }
  // Our bound on the answer: the server's statement_timeout and a margin.
  const auto deadline = statement_timeout_.count() > 0 ? Clock::now() + statement_timeout_ + std::chrono::seconds(2)
                                                       : Clock::time_point::max();
  int flushed;
  while ((flushed = PQflush(conn_)) == 1) {
    if (!WaitSocket(conn_, true, deadline)) return Broken(sql, "no answer in time");
    if (!PQconsumeInput(conn_)) return Broken(sql, Trimmed(PQerrorMessage(conn_)));
  }
  if (flushed < 0) return Broken(sql, Trimmed(PQerrorMessage(conn_)));
  Result out;
  absl::Status error;
  for (;;) {
    while (PQisBusy(conn_)) {
      if (!WaitSocket(conn_, false, deadline)) return Broken(sql, "no answer in time");
      if (!PQconsumeInput(conn_)) return Broken(sql, Trimmed(PQerrorMessage(conn_)));
    }
    PGresult* r = PQgetResult(conn_);
    if (r == nullptr) break;
    const ExecStatusType st = PQresultStatus(r);
    if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK) {
      const int rows = PQntuples(r), cols = PQnfields(r);
      out.rows.clear();  // several statements: the last one's
      out.rows.reserve(rows);
      for (int i = 0; i < rows; ++i) {
        std::vector<std::optional<std::string>> row(cols);
        for (int j = 0; j < cols; ++j) {
          if (!PQgetisnull(r, i, j)) row[j].emplace(PQgetvalue(r, i, j), PQgetlength(r, i, j));
        }
        out.rows.push_back(std::move(row));
      }
      int64_t affected = 0;
      if (absl::SimpleAtoi(PQcmdTuples(r), &affected)) out.affected = affected;
    } else if (error.ok()) {
      const char* state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
      const std::string sqlstate = state ? state : "";
      const char* primary = PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY);
      const std::string message =
          absl::StrCat("postgresql: ", FirstWords(sql), ": ", Trimmed(primary ? primary : PQresultErrorMessage(r)),
                       sqlstate.empty() ? "" : absl::StrCat(" (SQLSTATE ", sqlstate, ")"));
      if (PQstatus(conn_) == CONNECTION_BAD || absl::StartsWith(sqlstate, "08") || sqlstate == "57P01" ||
          sqlstate == "57P02" || sqlstate == "57P03") {
        error = absl::UnavailableError(message);
      } else if (sqlstate == "40001" || sqlstate == "40P01") {
        error = absl::AbortedError(message);
      } else if (sqlstate == "57014") {
        error = absl::DeadlineExceededError(message);
      } else {
        error = absl::InternalError(message);
      }
    }
    PQclear(r);
  }
  if (PQstatus(conn_) == CONNECTION_BAD) {
    return Broken(sql, error.ok() ? "the server closed the connection" : std::string(error.message()));
  }
  if (!error.ok()) return error;
  return out;
}

bool Connection::broken() const { return broken_ || conn_ == nullptr || PQstatus(conn_) != CONNECTION_OK; }

absl::Status Connection::Reset() { return Connect(); }

int Connection::backend_pid() const { return conn_ ? PQbackendPID(conn_) : 0; }

std::string Redacted(const std::string& url) {
  std::string out;
  absl::string_view rest = url;
  if (url.find("://") != std::string::npos) {  // a URI (ours, or another's in an error)
    const size_t scheme = url.find("://") + 3;
    out = url.substr(0, scheme);
    rest = absl::string_view(url).substr(scheme);
    const size_t query = rest.find('?');
    absl::string_view before = rest.substr(0, query);
    absl::string_view params = query == absl::string_view::npos ? absl::string_view() : rest.substr(query + 1);
    const size_t at = before.rfind('@');
    if (at != absl::string_view::npos) {
      absl::string_view userinfo = before.substr(0, at);
      absl::StrAppend(&out, userinfo.substr(0, userinfo.find(':')), "@");
      before = before.substr(at + 1);
    }
    absl::StrAppend(&out, before);
    std::string kept;
    for (absl::string_view p : absl::StrSplit(params, '&', absl::SkipEmpty())) {
      if (absl::StartsWith(p, "password=")) continue;
      absl::StrAppend(&kept, kept.empty() ? "?" : "&", p);
    }
    return out + kept;
  }
  // conninfo: key=value pairs; the password's value goes (quoted or not).
  for (absl::string_view p : absl::StrSplit(url, ' ', absl::SkipEmpty())) {
    if (absl::StartsWith(p, "password")) continue;
    absl::StrAppend(&out, out.empty() ? "" : " ", p);
  }
  return out;
}

bool IsPostgresUrl(const std::string& url) {
  return absl::StartsWith(url, "postgresql://") || absl::StartsWith(url, "postgres://");
}

std::string FormatDouble(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);  // the shortest text that reads back exactly
  return std::string(buf, end);
}

double ParseDouble(const std::optional<std::string>& text) {
  if (!text) return 0;
  if (*text == "NaN") return std::numeric_limits<double>::quiet_NaN();
  if (*text == "Infinity") return std::numeric_limits<double>::infinity();
  if (*text == "-Infinity") return -std::numeric_limits<double>::infinity();
  return std::strtod(text->c_str(), nullptr);
}

int64_t ParseInt(const std::optional<std::string>& text) {
  int64_t v = 0;
  if (!text || !absl::SimpleAtoi(*text, &v)) return 0;
  return v;
}

std::string ByteaParam(std::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "\\x";
  out.reserve(2 + 2 * bytes.size());
  for (unsigned char c : bytes) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

std::string ParseBytea(const std::optional<std::string>& text) {
  if (!text) return "";
  // bytea_output = hex (the default since PostgreSQL 9.0): "\x" and two digits a byte.
  absl::string_view hex = *text;
  if (!absl::ConsumePrefix(&hex, "\\x")) return *text;
  auto digit = [](char c) { return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10; };
  std::string out(hex.size() / 2, '\0');
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out[i / 2] = static_cast<char>(digit(hex[i]) * 16 + digit(hex[i + 1]));
  return out;
}

}  // namespace trainyard::pg
