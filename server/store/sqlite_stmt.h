// Stmt: one prepared SQLite statement, its bindings and its columns; the
// stores' (job_store, sweep_store) one way to run SQL.
#ifndef TRAINYARD_SERVER_STORE_SQLITE_STMT_H_
#define TRAINYARD_SERVER_STORE_SQLITE_STMT_H_

#include <sqlite3.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace trainyard {

// Runs `sql` (statements without results) on `db`.
inline absl::Status SqliteExec(sqlite3* db, const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    return absl::InternalError(absl::StrCat("sqlite: ", msg));
  }
  return absl::OkStatus();
}

// The error of the last call on `db`, with what was being done.
inline absl::Status SqliteError(sqlite3* db, const std::string& what) {
  return absl::InternalError(absl::StrCat("sqlite: ", what, ": ", sqlite3_errmsg(db)));
}

// The schema's version in the file's PRAGMA user_version: the tables as
// they are now (the job and the sweep store's) are version 1, a file from
// before versions (0) becomes 1, and a file of a newer version than this
// binary knows is refused (FailedPrecondition), untouched.
inline constexpr int kSqliteSchemaVersion = 1;
inline absl::Status SqliteSchemaVersion(sqlite3* db) {
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(db, "PRAGMA user_version;", -1, &st, nullptr) != SQLITE_OK) {
    return SqliteError(db, "read the schema's version");
  }
  const int64_t version = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
  sqlite3_finalize(st);
  if (version > kSqliteSchemaVersion) {
    return absl::FailedPreconditionError(absl::StrCat("the store's schema is at version ", version,
                                                      ", newer than this trainyard-server knows (",
                                                      kSqliteSchemaVersion, "): run the version that wrote it"));
  }
  if (version < kSqliteSchemaVersion) {
    return SqliteExec(db, absl::StrCat("PRAGMA user_version = ", kSqliteSchemaVersion, ";").c_str());
  }
  return absl::OkStatus();
}

// Owns one prepared statement.
class Stmt {
 public:
  Stmt(sqlite3* db, const std::string& sql) { rc_ = sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt_, nullptr); }
  ~Stmt() { sqlite3_finalize(stmt_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  bool ok() const { return rc_ == SQLITE_OK; }
  sqlite3_stmt* get() { return stmt_; }
  void Bind(int i, const std::string& v) {
    sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  }
  void Bind(int i, int64_t v) { sqlite3_bind_int64(stmt_, i, v); }
  void Bind(int i, double v) { sqlite3_bind_double(stmt_, i, v); }
  void BindBlob(int i, const std::string& v) {
    sqlite3_bind_blob(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  }
  std::string Blob(int i) {
    const void* b = sqlite3_column_blob(stmt_, i);
    return b ? std::string(static_cast<const char*>(b), sqlite3_column_bytes(stmt_, i)) : std::string();
  }
  // Binds the parameter `:name`.
  template <typename T>
  void Bind(const std::string& name, const T& v) {
    Bind(sqlite3_bind_parameter_index(stmt_, (":" + name).c_str()), v);
  }
  std::string Text(int i) {
    const unsigned char* t = sqlite3_column_text(stmt_, i);
    return t ? std::string(reinterpret_cast<const char*>(t), sqlite3_column_bytes(stmt_, i)) : std::string();
  }
  int64_t Int(int i) { return sqlite3_column_int64(stmt_, i); }
  double Real(int i) { return sqlite3_column_double(stmt_, i); }
  // The result's column `name` (-1, read as NULL, when there is none).
  int Column(std::string_view name) {
    for (int i = 0; i < sqlite3_column_count(stmt_); ++i) {
      if (name == sqlite3_column_name(stmt_, i)) return i;
    }
    return -1;
  }
  std::string Text(std::string_view name) { return Text(Column(name)); }
  int64_t Int(std::string_view name) { return Int(Column(name)); }
  double Real(std::string_view name) { return Real(Column(name)); }

 private:
  sqlite3_stmt* stmt_ = nullptr;
  int rc_ = SQLITE_ERROR;
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_STORE_SQLITE_STMT_H_
