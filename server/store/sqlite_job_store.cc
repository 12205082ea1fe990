// SQLite implementation of JobStore.
#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <limits>
#include <set>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/store/job_store.h"
#include "server/store/sqlite_stmt.h"

namespace trainyard {
namespace {

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS jobs (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL UNIQUE,
  name TEXT NOT NULL,
  state TEXT NOT NULL,
  reason TEXT NOT NULL,
  spec_json TEXT NOT NULL,
  num_processes INTEGER NOT NULL,
  max_steps INTEGER NOT NULL,
  step INTEGER NOT NULL,
  loss REAL NOT NULL,
  first_loss REAL NOT NULL,
  samples_per_second REAL NOT NULL,
  created_ms INTEGER NOT NULL,
  started_ms INTEGER NOT NULL,
  ended_ms INTEGER NOT NULL,
  attempt INTEGER NOT NULL,
  failed_rank INTEGER NOT NULL,
  worker_token TEXT NOT NULL,
  owner TEXT NOT NULL DEFAULT '',
  grp TEXT NOT NULL DEFAULT '',
  priority INTEGER NOT NULL DEFAULT 0,
  run_as TEXT NOT NULL DEFAULT '',
  sweep_id TEXT NOT NULL DEFAULT '',
  sweep_trial INTEGER NOT NULL DEFAULT -1
);
CREATE TABLE IF NOT EXISTS job_events (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  job_id TEXT NOT NULL REFERENCES jobs(id),
  unix_ms INTEGER NOT NULL,
  state TEXT NOT NULL,
  reason TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS job_events_by_job ON job_events(job_id, seq);
CREATE TABLE IF NOT EXISTS checkpoints (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  job_id TEXT NOT NULL REFERENCES jobs(id),
  attempt INTEGER NOT NULL,
  idx INTEGER NOT NULL,
  step INTEGER NOT NULL,
  type TEXT NOT NULL,
  trigger TEXT NOT NULL,
  request_id INTEGER NOT NULL,
  path TEXT NOT NULL,
  bytes INTEGER NOT NULL,
  seconds REAL NOT NULL,
  unix_ms INTEGER NOT NULL,
  ok INTEGER NOT NULL,
  error TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS checkpoints_by_job ON checkpoints(job_id, seq);
CREATE TABLE IF NOT EXISTS job_history (
  job_id TEXT PRIMARY KEY REFERENCES jobs(id),
  data BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS job_history_tails (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  job_id TEXT NOT NULL REFERENCES jobs(id),
  data BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS job_history_tails_by_job ON job_history_tails(job_id, seq);
)sql";

// The jobs table's columns: the statements name them, and bind and read
// them by these names (BindJob, ReadJob).
constexpr const char* kJobColumnNames[] = {
    "id",         "name",     "state",   "reason",      "spec_json",          "num_processes",
    "max_steps",  "step",     "loss",    "first_loss",  "samples_per_second", "created_ms",
    "started_ms", "ended_ms", "attempt", "failed_rank", "worker_token",       "owner",
    "grp",        "priority", "run_as",  "sweep_id",    "sweep_trial"};

// The job columns joined as `format` makes each ("id" -> "id", ":id", "id=:id").
template <typename F>
std::string JobColumns(F format) {
  std::string out;
  for (const char* c : kJobColumnNames) absl::StrAppend(&out, out.empty() ? "" : ", ", format(std::string(c)));
  return out;
}
const std::string kJobColumns = JobColumns([](const std::string& c) { return c; });

class SqliteJobStore final : public JobStore {
 public:
  explicit SqliteJobStore(sqlite3* db) : db_(db) {}
  ~SqliteJobStore() override {
    absl::MutexLock lock(&mu_);
    sqlite3_close(db_);
  }

  absl::Status Init() {
    absl::MutexLock lock(&mu_);
    // WAL + synchronous=FULL: a committed transaction is on disk when
    // COMMIT returns, and readers never block the writer.
    for (const char* pragma : {"PRAGMA journal_mode=WAL;", "PRAGMA synchronous=FULL;", "PRAGMA foreign_keys=ON;",
                               "PRAGMA busy_timeout=5000;"}) {
      if (auto s = Exec(pragma); !s.ok()) return s;
    }
    if (auto s = SqliteSchemaVersion(db_); !s.ok()) return s;
    if (auto s = Exec(kSchema); !s.ok()) return s;
    return AddMissingColumns();
  }

  absl::Status Insert(const JobRecord& job, const JobEvent& event) override {
    absl::MutexLock lock(&mu_);
    if (auto s = Exec("BEGIN IMMEDIATE;"); !s.ok()) return s;
    Stmt st(db_, absl::StrCat("INSERT INTO jobs (", kJobColumns, ") VALUES (",
                              JobColumns([](const std::string& c) { return ":" + c; }), ");"));
    if (!st.ok()) return Rollback(Error("prepare insert"));
    BindJob(st, job);
    if (sqlite3_step(st.get()) != SQLITE_DONE) return Rollback(Error("insert job " + job.id));
    if (auto s = AppendEvent(job.id, event); !s.ok()) return Rollback(s);
    return Exec("COMMIT;");
  }

  absl::Status InsertCopy(int64_t number, const JobRecord& job, const std::vector<JobEvent>& events) override {
    absl::MutexLock lock(&mu_);
    if (auto s = Exec("BEGIN IMMEDIATE;"); !s.ok()) return s;
    // AUTOINCREMENT numbers the jobs inserted later after the largest number.
    Stmt st(db_, absl::StrCat("INSERT INTO jobs (seq, ", kJobColumns, ") VALUES (:seq, ",
                              JobColumns([](const std::string& c) { return ":" + c; }), ");"));
    if (!st.ok()) return Rollback(Error("prepare insert"));
    st.Bind("seq", number);
    BindJob(st, job);
    if (sqlite3_step(st.get()) != SQLITE_DONE) return Rollback(Error("insert job " + job.id));
    for (const JobEvent& e : events) {
      if (auto s = AppendEvent(job.id, e); !s.ok()) return Rollback(s);
    }
    return Exec("COMMIT;");
  }

  absl::Status Update(const JobRecord& job, const JobEvent* event) override {
    absl::MutexLock lock(&mu_);
    if (auto s = Exec("BEGIN IMMEDIATE;"); !s.ok()) return s;
    Stmt st(db_, absl::StrCat("UPDATE jobs SET ", JobColumns([](const std::string& c) { return c + "=:" + c; }),
                              " WHERE id=:id;"));
    if (!st.ok()) return Rollback(Error("prepare update"));
    BindJob(st, job);
    if (sqlite3_step(st.get()) != SQLITE_DONE) return Rollback(Error("update job " + job.id));
    if (sqlite3_changes(db_) != 1) {
      Exec("ROLLBACK;").IgnoreError();  // the missing row is the error to report
      return absl::NotFoundError(absl::StrCat("job ", job.id, " not found"));
    }
    if (event != nullptr) {
      if (auto s = AppendEvent(job.id, *event); !s.ok()) return Rollback(s);
    }
    return Exec("COMMIT;");
  }

  absl::Status AddEvent(const std::string& id, const JobEvent& event) override {
    absl::MutexLock lock(&mu_);
    return AppendEvent(id, event);
  }

  absl::StatusOr<JobRecord> Get(const std::string& id) override {
    absl::MutexLock lock(&mu_);
    Stmt st(db_, absl::StrCat("SELECT ", kJobColumns, " FROM jobs WHERE id=?;"));
    if (!st.ok()) return Error("prepare get");
    st.Bind(1, id);
    int rc = sqlite3_step(st.get());
    if (rc == SQLITE_DONE) return absl::NotFoundError(absl::StrCat("job ", id, " not found"));
    if (rc != SQLITE_ROW) return Error("get job " + id);
    return ReadJob(st);
  }

  absl::StatusOr<std::vector<JobRecord>> List(int limit) override {
    absl::MutexLock lock(&mu_);
    Stmt st(db_, absl::StrCat("SELECT ", kJobColumns,
                              " FROM (SELECT * FROM jobs ORDER BY seq DESC LIMIT ?) ORDER BY seq ASC;"));
    if (!st.ok()) return Error("prepare list");
    st.Bind(1, static_cast<int64_t>(limit));
    std::vector<JobRecord> out;
    int rc;
    while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) out.push_back(ReadJob(st));
    if (rc != SQLITE_DONE) return Error("list jobs");
    return out;
  }

  absl::StatusOr<Page> ListPage(const std::vector<JobState>& states, int64_t after, int limit,
                                const std::vector<std::string>& owners, const std::vector<std::string>& groups,
                                bool newest_first) override {
    absl::MutexLock lock(&mu_);
    auto in = [](size_t n) {
      std::string list = "(";
      for (size_t i = 0; i < n; ++i) list += i ? ",?" : "?";
      return list + ")";
    };
    std::string where = newest_first ? "seq < ?" : "seq > ?";
    if (!states.empty()) where += " AND state IN " + in(states.size());
    if (!owners.empty() || !groups.empty()) {
      where += absl::StrCat(" AND (owner IN ", in(owners.size()), " OR grp IN ", in(groups.size()), ")");
    }
    Stmt st(db_, absl::StrCat("SELECT seq, ", kJobColumns, " FROM jobs WHERE ", where, " ORDER BY seq",
                              newest_first ? " DESC" : "", " LIMIT ?;"));
    if (!st.ok()) return Error("prepare list page");
    int i = 1;
    st.Bind(i++, newest_first && after == 0 ? std::numeric_limits<int64_t>::max() : after);
    for (JobState s : states) st.Bind(i++, std::string(JobStateName(s)));
    if (!owners.empty() || !groups.empty()) {
      for (const std::string& o : owners) st.Bind(i++, o);
      for (const std::string& g : groups) st.Bind(i++, g);
    }
    st.Bind(i, static_cast<int64_t>(limit) + 1);
    Page page;
    int rc;
    while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) {
      if (static_cast<int>(page.jobs.size()) == limit) {
        page.more = true;
        break;
      }
      page.last = st.Int(0);
      page.numbers.push_back(page.last);
      page.jobs.push_back(ReadJob(st));
    }
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) return Error("list jobs");
    return page;
  }

  absl::Status Delete(const std::string& id) override {
    absl::MutexLock lock(&mu_);
    if (auto s = Exec("BEGIN IMMEDIATE;"); !s.ok()) return s;
    // The rows that name the job first: they reference its row.
    for (const char* table : {"job_history_tails", "job_history", "checkpoints", "job_events"}) {
      Stmt st(db_, absl::StrCat("DELETE FROM ", table, " WHERE job_id=?;"));
      if (!st.ok()) return Rollback(Error(absl::StrCat("prepare delete from ", table)));
      st.Bind(1, id);
      if (sqlite3_step(st.get()) != SQLITE_DONE) return Rollback(Error(absl::StrCat("delete ", table, " of ", id)));
    }
    Stmt st(db_, "DELETE FROM jobs WHERE id=?;");
    if (!st.ok()) return Rollback(Error("prepare delete job"));
    st.Bind(1, id);
    if (sqlite3_step(st.get()) != SQLITE_DONE) return Rollback(Error("delete job " + id));
    if (sqlite3_changes(db_) == 0) return Rollback(absl::NotFoundError(absl::StrCat("job ", id, " not found")));
    return Exec("COMMIT;");
  }

  absl::StatusOr<std::vector<JobEvent>> Events(const std::string& id) override {
    absl::MutexLock lock(&mu_);
    Stmt st(db_, "SELECT unix_ms, state, reason FROM job_events WHERE job_id=? ORDER BY seq;");
    if (!st.ok()) return Error("prepare events");
    st.Bind(1, id);
    std::vector<JobEvent> out;
    int rc;
    while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) {
      JobEvent e;
      e.unix_millis = st.Int(0);
      e.state = ParseJobState(st.Text(1)).value_or(JobState::kFailed);
      e.reason = st.Text(2);
      out.push_back(std::move(e));
    }
    if (rc != SQLITE_DONE) return Error("list events");
    return out;
  }

  absl::Status AddCheckpoint(const std::string& id, const CheckpointRecord& r) override {
    absl::MutexLock lock(&mu_);
    Stmt st(db_,
            "INSERT INTO checkpoints (job_id, attempt, idx, step, type, trigger, request_id, path, bytes, seconds, "
            "unix_ms, ok, error) VALUES (:job_id, :attempt, :idx, :step, :type, :trigger, :request_id, :path, :bytes, "
            ":seconds, :unix_ms, :ok, :error);");
    if (!st.ok()) return Error("prepare checkpoint");
    const CheckpointEvent& c = r.checkpoint;
    st.Bind("job_id", id);
    st.Bind("attempt", static_cast<int64_t>(r.attempt));
    st.Bind("idx", c.index);
    st.Bind("step", c.step);
    st.Bind("type", std::string(CheckpointTypeName(c.type)));
    st.Bind("trigger", c.trigger);
    st.Bind("request_id", c.request_id);
    st.Bind("path", c.path);
    st.Bind("bytes", c.bytes);
    st.Bind("seconds", c.seconds);
    st.Bind("unix_ms", c.unix_millis);
    st.Bind("ok", static_cast<int64_t>(c.ok ? 1 : 0));
    st.Bind("error", c.error);
    if (sqlite3_step(st.get()) != SQLITE_DONE) return Error("insert checkpoint of " + id);
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<CheckpointRecord>> Checkpoints(const std::string& id) override {
    absl::MutexLock lock(&mu_);
    Stmt st(db_,
            "SELECT attempt, idx, step, type, trigger, request_id, path, bytes, seconds, unix_ms, ok, error "
            "FROM checkpoints WHERE job_id=? ORDER BY seq;");
    if (!st.ok()) return Error("prepare checkpoints");
    st.Bind(1, id);
    std::vector<CheckpointRecord> out;
    int rc;
    while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) {
      CheckpointRecord r;
      r.attempt = static_cast<int32_t>(st.Int("attempt"));
      CheckpointEvent& c = r.checkpoint;
      c.index = st.Int("idx");
      c.step = st.Int("step");
      c.type = ValueOf(kCheckpointTypeNames, st.Text("type")).value_or(CheckpointType::kFull);
      c.trigger = st.Text("trigger");
      c.request_id = st.Int("request_id");
      c.path = st.Text("path");
      c.bytes = st.Int("bytes");
      c.seconds = st.Real("seconds");
      c.unix_millis = st.Int("unix_ms");
      c.ok = st.Int("ok") != 0;
      c.error = st.Text("error");
      out.push_back(std::move(r));
    }
    if (rc != SQLITE_DONE) return Error("list checkpoints");
    return out;
  }

  absl::Status SaveHistory(const std::string& id, const std::string& data) override {
    absl::MutexLock lock(&mu_);
    if (auto s = Exec("BEGIN IMMEDIATE;"); !s.ok()) return s;
    Stmt st(
        db_,
        "INSERT INTO job_history (job_id, data) VALUES (?, ?) ON CONFLICT(job_id) DO UPDATE SET data=excluded.data;");
    if (!st.ok()) return Rollback(Error("prepare history"));
    st.Bind(1, id);
    st.BindBlob(2, data);
    if (sqlite3_step(st.get()) != SQLITE_DONE) return Rollback(Error("save history of " + id));
    Stmt drop(db_, "DELETE FROM job_history_tails WHERE job_id=?;");  // in the whole history now
    if (!drop.ok()) return Rollback(Error("prepare history tails"));
    drop.Bind(1, id);
    if (sqlite3_step(drop.get()) != SQLITE_DONE) return Rollback(Error("drop history tails of " + id));
    return Exec("COMMIT;");
  }

  absl::Status AppendHistory(const std::string& id, const std::string& tail) override {
    absl::MutexLock lock(&mu_);
    Stmt st(db_, "INSERT INTO job_history_tails (job_id, data) VALUES (?, ?);");
    if (!st.ok()) return Error("prepare history tail");
    st.Bind(1, id);
    st.BindBlob(2, tail);
    if (sqlite3_step(st.get()) != SQLITE_DONE) return Error("append history of " + id);
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<std::string>> HistoryTails(const std::string& id) override {
    absl::MutexLock lock(&mu_);
    Stmt st(db_, "SELECT data FROM job_history_tails WHERE job_id=? ORDER BY seq;");
    if (!st.ok()) return Error("prepare history tails");
    st.Bind(1, id);
    std::vector<std::string> out;
    int rc;
    while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) out.push_back(st.Blob(0));
    if (rc != SQLITE_DONE) return Error("read history tails of " + id);
    return out;
  }

  absl::StatusOr<std::string> History(const std::string& id) override {
    absl::MutexLock lock(&mu_);
    Stmt st(db_, "SELECT data FROM job_history WHERE job_id=?;");
    if (!st.ok()) return Error("prepare history");
    st.Bind(1, id);
    const int rc = sqlite3_step(st.get());
    if (rc == SQLITE_DONE) return std::string();
    if (rc != SQLITE_ROW) return Error("read history of " + id);
    return st.Blob(0);
  }

 private:
  absl::Status Exec(const char* sql) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return SqliteExec(db_, sql); }
  absl::Status Error(const std::string& what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return SqliteError(db_, what); }

  absl::Status Rollback(absl::Status s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Exec("ROLLBACK;").IgnoreError();  // `s`, the first error, is the one to report
    return s;
  }

  absl::Status AppendEvent(const std::string& id, const JobEvent& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Stmt st(db_, "INSERT INTO job_events (job_id, unix_ms, state, reason) VALUES (?,?,?,?);");
    if (!st.ok()) return Error("prepare event");
    st.Bind(1, id);
    st.Bind(2, e.unix_millis);
    st.Bind(3, std::string(JobStateName(e.state)));
    st.Bind(4, e.reason);
    if (sqlite3_step(st.get()) != SQLITE_DONE) return Error("insert event");
    return absl::OkStatus();
  }

  // A store written by an earlier version gets the columns it lacks: before
  // jobs had owners (its jobs belong to nobody: admins see them), before
  // they ran as their owners' accounts (the server's own).
  absl::Status AddMissingColumns() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::set<std::string> have;
    {
      Stmt st(db_, "SELECT name FROM pragma_table_info('jobs');");
      if (!st.ok()) return Error("read the jobs table's columns");
      while (sqlite3_step(st.get()) == SQLITE_ROW) have.insert(st.Text(0));
    }
    if (!have.count("owner")) {
      if (absl::Status s = Exec("ALTER TABLE jobs ADD COLUMN owner TEXT NOT NULL DEFAULT '';"
                                "ALTER TABLE jobs ADD COLUMN grp TEXT NOT NULL DEFAULT '';"
                                "ALTER TABLE jobs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;");
          !s.ok()) {
        return s;
      }
    }
    if (!have.count("run_as")) {
      if (absl::Status s = Exec("ALTER TABLE jobs ADD COLUMN run_as TEXT NOT NULL DEFAULT '';"); !s.ok()) return s;
    }
    // Before a job named the sweep whose trial it is (none: -1).
    if (!have.count("sweep_id")) {
      return Exec(
          "ALTER TABLE jobs ADD COLUMN sweep_id TEXT NOT NULL DEFAULT '';"
          "ALTER TABLE jobs ADD COLUMN sweep_trial INTEGER NOT NULL DEFAULT -1;");
    }
    return absl::OkStatus();
  }

  static void BindJob(Stmt& st, const JobRecord& j) {
    st.Bind("id", j.id);
    st.Bind("name", j.name);
    st.Bind("state", std::string(JobStateName(j.state)));
    st.Bind("reason", j.reason);
    st.Bind("spec_json", j.spec_json);
    st.Bind("num_processes", static_cast<int64_t>(j.num_processes));
    st.Bind("max_steps", j.max_steps);
    st.Bind("step", j.step);
    st.Bind("loss", j.loss);
    st.Bind("first_loss", j.first_loss);
    st.Bind("samples_per_second", j.samples_per_second);
    st.Bind("created_ms", j.created_unix_millis);
    st.Bind("started_ms", j.started_unix_millis);
    st.Bind("ended_ms", j.ended_unix_millis);
    st.Bind("attempt", static_cast<int64_t>(j.attempt));
    st.Bind("failed_rank", static_cast<int64_t>(j.failed_rank));
    st.Bind("worker_token", j.worker_token);
    st.Bind("owner", j.owner);
    st.Bind("grp", j.group);
    st.Bind("priority", j.priority);
    st.Bind("run_as", j.run_as);
    st.Bind("sweep_id", j.sweep_id);
    st.Bind("sweep_trial", static_cast<int64_t>(j.sweep_trial));
  }

  // The job columns of the current row, by name.
  static JobRecord ReadJob(Stmt& st) {
    JobRecord j;
    j.id = st.Text("id");
    j.name = st.Text("name");
    j.state = ParseJobState(st.Text("state")).value_or(JobState::kFailed);
    j.reason = st.Text("reason");
    j.spec_json = st.Text("spec_json");
    j.num_processes = static_cast<int32_t>(st.Int("num_processes"));
    j.max_steps = st.Int("max_steps");
    j.step = st.Int("step");
    j.loss = st.Real("loss");
    j.first_loss = st.Real("first_loss");
    j.samples_per_second = st.Real("samples_per_second");
    j.created_unix_millis = st.Int("created_ms");
    j.started_unix_millis = st.Int("started_ms");
    j.ended_unix_millis = st.Int("ended_ms");
    j.attempt = static_cast<int32_t>(st.Int("attempt"));
    j.failed_rank = static_cast<int32_t>(st.Int("failed_rank"));
    j.worker_token = st.Text("worker_token");
    j.owner = st.Text("owner");
    j.group = st.Text("grp");
    j.priority = st.Int("priority");
    j.run_as = st.Text("run_as");
    j.sweep_id = st.Text("sweep_id");
    j.sweep_trial = static_cast<int32_t>(st.Int("sweep_trial"));
    return j;
  }

  absl::Mutex mu_;
  sqlite3* db_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::StatusOr<std::unique_ptr<JobStore>> JobStore::Open(const std::string& path) {
  sqlite3* db = nullptr;
  // The store holds every job's worker token: made the server account's
  // alone before SQLite opens it (not with the umask, then narrowed).
  if (path != ":memory:") {
    const int fd = ::open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd >= 0) ::close(fd);
  }
  int rc =
      sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return absl::UnavailableError(absl::StrCat("cannot open job store ", path, ": ", msg));
  }
  // The store holds every job's worker token: the server's account's alone
  // (SQLite gives its journal files the same mode).
  if (path != ":memory:") chmod(path.c_str(), 0600);
  auto store = std::make_unique<SqliteJobStore>(db);
  if (auto s = store->Init(); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("cannot initialize job store ", path, ": ", s.message()));
  }
  return std::unique_ptr<JobStore>(std::move(store));
}

std::string JobPageToken(int64_t last, bool newest_first) {
  return absl::StrCat(newest_first ? "jobs-before-" : "jobs-after-", last);
}

absl::StatusOr<int64_t> JobPageAfter(const std::string& page_token, bool newest_first) {
  if (page_token.empty()) return 0;
  const std::string_view prefix = newest_first ? "jobs-before-" : "jobs-after-";
  int64_t after = 0;
  if (page_token.rfind(prefix, 0) != 0 || page_token.size() == prefix.size() ||
      !absl::SimpleAtoi(page_token.substr(prefix.size()), &after) || after < 0 ||
      JobPageToken(after, newest_first) != page_token) {
    return absl::InvalidArgumentError("field 'page_token': not a token this server gave");
  }
  return after;
}

}  // namespace trainyard
