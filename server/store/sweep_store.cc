// SQLite implementation of SweepStore: a sweep a row, a trial a row (its
// fields as JSON), the searcher's decisions in order.
#include "server/store/sweep_store.h"

#include <sqlite3.h>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "nlohmann/json.hpp"
#include "server/store/sqlite_stmt.h"
#include "server/store/sweep_trial_json.h"

namespace trainyard {
namespace {

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS sweeps (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL UNIQUE,
  name TEXT NOT NULL,
  owner TEXT NOT NULL,
  state TEXT NOT NULL,
  reason TEXT NOT NULL,
  spec TEXT NOT NULL,
  caller TEXT NOT NULL,
  created_ms INTEGER NOT NULL,
  ended_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS sweep_trials (
  sweep_id TEXT NOT NULL REFERENCES sweeps(id),
  number INTEGER NOT NULL,
  data TEXT NOT NULL,
  PRIMARY KEY (sweep_id, number)
);
CREATE TABLE IF NOT EXISTS sweep_rung_results (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  sweep_id TEXT NOT NULL REFERENCES sweeps(id),
  trial INTEGER NOT NULL,
  step INTEGER NOT NULL,
  value REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS sweep_events (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  sweep_id TEXT NOT NULL REFERENCES sweeps(id),
  unix_ms INTEGER NOT NULL,
  state TEXT NOT NULL,
  reason TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS sweep_events_by_sweep ON sweep_events (sweep_id, seq);
)sql";

}  // namespace

std::string TrialJson(const SweepTrialRecord& t) {
  nlohmann::json j = {{"job_id", t.job_id},
                      {"values", t.values},
                      {"state", JobStateName(t.state)},
                      {"early_stopped", t.early_stopped},
                      {"rungs_passed", t.rungs_passed},
                      {"step", t.step},
                      {"rank_seconds", t.rank_seconds},
                      {"reason", t.reason},
                      {"parent", t.parent},
                      {"from_step", t.from_step}};
  if (t.best_metric) j["best_metric"] = *t.best_metric;
  return j.dump();
}

absl::StatusOr<SweepTrialRecord> TrialFromJson(int32_t number, const std::string& text) {
  SweepTrialRecord t;
  t.number = number;
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    t.job_id = j.at("job_id").get<std::string>();
    t.values = j.at("values").get<std::vector<std::string>>();
    t.state = ParseJobState(j.at("state").get<std::string>()).value_or(JobState::kFailed);
    t.early_stopped = j.at("early_stopped").get<bool>();
    t.rungs_passed = j.at("rungs_passed").get<int32_t>();
    t.step = j.at("step").get<int64_t>();
    t.rank_seconds = j.at("rank_seconds").get<double>();
    t.reason = j.at("reason").get<std::string>();
    if (j.contains("best_metric")) t.best_metric = j["best_metric"].get<double>();
    t.parent = j.value("parent", -1);
    t.from_step = j.value("from_step", int64_t{0});
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat("sweep trial ", number, ": ", e.what()));
  }
  return t;
}

namespace {

class SqliteSweepStore final : public SweepStore {
 public:
  explicit SqliteSweepStore(sqlite3* db) : db_(db) {}
  ~SqliteSweepStore() override {
    absl::MutexLock lock(&mu_);
    sqlite3_close(db_);
  }

  absl::Status Init() {
    absl::MutexLock lock(&mu_);
    for (const char* sql : {"PRAGMA journal_mode=WAL;", "PRAGMA synchronous=FULL;", "PRAGMA foreign_keys=ON;",
                            "PRAGMA busy_timeout=5000;"}) {
      if (auto s = Exec(sql); !s.ok()) return s;
    }
    if (auto s = SqliteSchemaVersion(db_); !s.ok()) return s;
    return Exec(kSchema);
  }

  absl::Status Insert(const SweepRecord& w) override {
    absl::MutexLock lock(&mu_);
    Stmt st(db_,
            "INSERT INTO sweeps (id, name, owner, state, reason, spec, caller, created_ms, ended_ms) "
            "VALUES (:id, :name, :owner, :state, :reason, :spec, :caller, :created_ms, :ended_ms);");
    if (!st.ok()) return Error("prepare insert sweep");
    BindSweep(st, w);
    if (sqlite3_step(st.get()) != SQLITE_DONE) return Error("insert sweep " + w.id);
    return absl::OkStatus();
  }

  absl::Status Update(const SweepRecord& w) override {
    absl::MutexLock lock(&mu_);
    Stmt st(db_,
            "UPDATE sweeps SET name=:name, owner=:owner, state=:state, reason=:reason, spec=:spec, caller=:caller, "
            "created_ms=:created_ms, ended_ms=:ended_ms WHERE id=:id;");
    if (!st.ok()) return Error("prepare update sweep");
    BindSweep(st, w);
    if (sqlite3_step(st.get()) != SQLITE_DONE) return Error("update sweep " + w.id);
    if (sqlite3_changes(db_) != 1) return absl::NotFoundError(absl::StrCat("sweep ", w.id, " not found"));
    return absl::OkStatus();
  }

  absl::Status SaveTrial(const std::string& sweep_id, const SweepTrialRecord& t) override {
    absl::MutexLock lock(&mu_);
    Stmt st(db_, "INSERT OR REPLACE INTO sweep_trials (sweep_id, number, data) VALUES (?,?,?);");
    if (!st.ok()) return Error("prepare save trial");
    st.Bind(1, sweep_id);
    st.Bind(2, int64_t{t.number});
    st.Bind(3, TrialJson(t));
    if (sqlite3_step(st.get()) != SQLITE_DONE) return Error(absl::StrCat("save trial ", t.number, " of ", sweep_id));
    return absl::OkStatus();
  }

  absl::Status AddRungResult(const std::string& sweep_id, const RungResult& r) override {
    absl::MutexLock lock(&mu_);
    Stmt st(db_, "INSERT INTO sweep_rung_results (sweep_id, trial, step, value) VALUES (?,?,?,?);");
    if (!st.ok()) return Error("prepare rung result");
    st.Bind(1, sweep_id);
    st.Bind(2, int64_t{r.trial});
    st.Bind(3, r.step);
    st.Bind(4, r.value);
    if (sqlite3_step(st.get()) != SQLITE_DONE) return Error("insert rung result of " + sweep_id);
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<SweepRecord>> List() override {
    absl::MutexLock lock(&mu_);
    std::vector<SweepRecord> out;
    {
      Stmt st(db_,
              "SELECT id, name, owner, state, reason, spec, caller, created_ms, ended_ms FROM sweeps ORDER BY seq;");
      if (!st.ok()) return Error("prepare list sweeps");
      int rc;
      while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) {
        SweepRecord w;
        w.id = st.Text("id");
        w.name = st.Text("name");
        w.owner = st.Text("owner");
        w.state = ParseJobState(st.Text("state")).value_or(JobState::kFailed);
        w.reason = st.Text("reason");
        w.spec_text = st.Text("spec");
        w.caller = st.Text("caller");
        w.created_unix_millis = st.Int("created_ms");
        w.ended_unix_millis = st.Int("ended_ms");
        out.push_back(std::move(w));
      }
      if (rc != SQLITE_DONE) return Error("list sweeps");
    }
    for (SweepRecord& w : out) {
      Stmt st(db_, "SELECT number, data FROM sweep_trials WHERE sweep_id=? ORDER BY number;");
      if (!st.ok()) return Error("prepare list trials");
      st.Bind(1, w.id);
      int rc;
      while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) {
        auto t = TrialFromJson(static_cast<int32_t>(st.Int(0)), st.Text(1));
        if (!t.ok()) return t.status();
        w.trials.push_back(std::move(*t));
      }
      if (rc != SQLITE_DONE) return Error("list trials of " + w.id);
    }
    return out;
  }

  absl::StatusOr<std::vector<RungResult>> RungResults(const std::string& sweep_id) override {
    absl::MutexLock lock(&mu_);
    Stmt st(db_, "SELECT trial, step, value FROM sweep_rung_results WHERE sweep_id=? ORDER BY seq;");
    if (!st.ok()) return Error("prepare rung results");
    st.Bind(1, sweep_id);
    std::vector<RungResult> out;
    int rc;
    while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) {
      out.push_back(RungResult{static_cast<int32_t>(st.Int(0)), st.Int(1), st.Real(2)});
    }
    if (rc != SQLITE_DONE) return Error("rung results of " + sweep_id);
    return out;
  }

  absl::Status AddEvent(const std::string& sweep_id, const JobEvent& e) override {
    absl::MutexLock lock(&mu_);
    Stmt st(db_, "INSERT INTO sweep_events (sweep_id, unix_ms, state, reason) VALUES (?,?,?,?);");
    if (!st.ok()) return Error("prepare sweep event");
    st.Bind(1, sweep_id);
    st.Bind(2, e.unix_millis);
    st.Bind(3, std::string(JobStateName(e.state)));
    st.Bind(4, e.reason);
    if (sqlite3_step(st.get()) != SQLITE_DONE) return Error("insert event of " + sweep_id);
    // Only the newest kMaxEvents stay: a long sweep's oldest go first.
    Stmt trim(db_,
              "DELETE FROM sweep_events WHERE sweep_id=?1 AND seq <= (SELECT seq FROM sweep_events WHERE sweep_id=?1 "
              "ORDER BY seq DESC LIMIT 1 OFFSET ?2);");
    if (!trim.ok()) return Error("prepare trim sweep events");
    trim.Bind(1, sweep_id);
    trim.Bind(2, int64_t{kMaxEvents});
    if (sqlite3_step(trim.get()) != SQLITE_DONE) return Error("trim events of " + sweep_id);
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<JobEvent>> Events(const std::string& sweep_id) override {
    absl::MutexLock lock(&mu_);
    Stmt st(db_, "SELECT unix_ms, state, reason FROM sweep_events WHERE sweep_id=? ORDER BY seq;");
    if (!st.ok()) return Error("prepare sweep events");
    st.Bind(1, sweep_id);
    std::vector<JobEvent> out;
    int rc;
    while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) {
      out.push_back(
          JobEvent{st.Int(0), ParseJobState(st.Text(1)).value_or(JobState::kRunning), std::string(st.Text(2))});
    }
    if (rc != SQLITE_DONE) return Error("events of " + sweep_id);
    return out;
  }

 private:
  static void BindSweep(Stmt& st, const SweepRecord& w) {
    st.Bind("id", w.id);
    st.Bind("name", w.name);
    st.Bind("owner", w.owner);
    st.Bind("state", std::string(JobStateName(w.state)));
    st.Bind("reason", w.reason);
    st.Bind("spec", w.spec_text);
    st.Bind("caller", w.caller);
    st.Bind("created_ms", w.created_unix_millis);
    st.Bind("ended_ms", w.ended_unix_millis);
  }
  absl::Status Exec(const char* sql) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return SqliteExec(db_, sql); }
  absl::Status Error(const std::string& what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return SqliteError(db_, what); }

  absl::Mutex mu_;
  sqlite3* const db_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<SweepStore>> SweepStore::Open(const std::string& path) {
  sqlite3* db = nullptr;
  const int rc =
      sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return absl::UnavailableError(absl::StrCat("open ", path, ": ", msg));
  }
  auto store = std::make_unique<SqliteSweepStore>(db);
  if (auto s = store->Init(); !s.ok()) return s;
  return std::unique_ptr<SweepStore>(std::move(store));
}

}  // namespace trainyard
