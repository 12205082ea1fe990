// PostgreSQL implementation of JobStore: the SQLite store's tables and
// behaviour (sqlite_job_store.cc), each write one fenced transaction of the
// pool (pg_pool.h).
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/store/pg_stores.h"

namespace trainyard {
namespace {

using Params = std::vector<std::optional<std::string>>;
using Row = std::vector<std::optional<std::string>>;

// The jobs table's columns, in the order BindJob gives and ReadJob reads them.
constexpr const char* kJobColumnNames[] = {
    "id",         "name",     "state",   "reason",      "spec_json",          "num_processes",
    "max_steps",  "step",     "loss",    "first_loss",  "samples_per_second", "created_ms",
    "started_ms", "ended_ms", "attempt", "failed_rank", "worker_token",       "owner",
    "grp",        "priority", "run_as",  "sweep_id",    "sweep_trial"};
constexpr int kJobColumnCount = std::size(kJobColumnNames);

std::string JobColumns() {
  std::string out;
  for (const char* c : kJobColumnNames) absl::StrAppend(&out, out.empty() ? "" : ", ", c);
  return out;
}
const std::string kJobColumns = JobColumns();

// "$first, $first+1, ..." for the job's columns.
std::string Placeholders(int first, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) absl::StrAppend(&out, i ? ", $" : "$", first + i);
  return out;
}

std::string Int(int64_t v) { return std::to_string(v); }

// The job's columns as parameters, after `params`.
void BindJob(Params& p, const JobRecord& j) {
  p.push_back(j.id);
  p.push_back(j.name);
  p.push_back(std::string(JobStateName(j.state)));
  p.push_back(j.reason);
  p.push_back(j.spec_json);
  p.push_back(Int(j.num_processes));
  p.push_back(Int(j.max_steps));
  p.push_back(Int(j.step));
  p.push_back(pg::FormatDouble(j.loss));
  p.push_back(pg::FormatDouble(j.first_loss));
  p.push_back(pg::FormatDouble(j.samples_per_second));
  p.push_back(Int(j.created_unix_millis));
  p.push_back(Int(j.started_unix_millis));
  p.push_back(Int(j.ended_unix_millis));
  p.push_back(Int(j.attempt));
  p.push_back(Int(j.failed_rank));
  p.push_back(j.worker_token);
  p.push_back(j.owner);
  p.push_back(j.group);
  p.push_back(Int(j.priority));
  p.push_back(j.run_as);
  p.push_back(j.sweep_id);
  p.push_back(Int(j.sweep_trial));
}

// The job columns of `row` from column `at` on (kJobColumns' order).
JobRecord ReadJob(const Row& row, size_t at = 0) {
  auto text = [&](int i) { return row.at(at + i).value_or(""); };
  auto num = [&](int i) { return pg::ParseInt(row.at(at + i)); };
  auto real = [&](int i) { return pg::ParseDouble(row.at(at + i)); };
  JobRecord j;
  j.id = text(0);
  j.name = text(1);
  j.state = ParseJobState(text(2)).value_or(JobState::kFailed);
  j.reason = text(3);
  j.spec_json = text(4);
  j.num_processes = static_cast<int32_t>(num(5));
  j.max_steps = num(6);
  j.step = num(7);
  j.loss = real(8);
  j.first_loss = real(9);
  j.samples_per_second = real(10);
  j.created_unix_millis = num(11);
  j.started_unix_millis = num(12);
  j.ended_unix_millis = num(13);
  j.attempt = static_cast<int32_t>(num(14));
  j.failed_rank = static_cast<int32_t>(num(15));
  j.worker_token = text(16);
  j.owner = text(17);
  j.group = text(18);
  j.priority = num(19);
  j.run_as = text(20);
  j.sweep_id = text(21);
  j.sweep_trial = static_cast<int32_t>(num(22));
  return j;
}

absl::Status InsertEvent(pg::Connection& c, const std::string& id, const JobEvent& e) {
  return c
      .Exec("INSERT INTO job_events (job_id, unix_ms, state, reason) VALUES ($1, $2, $3, $4)",
            {id, Int(e.unix_millis), std::string(JobStateName(e.state)), e.reason})
      .status();
}

absl::Status NotFound(const std::string& id) { return absl::NotFoundError(absl::StrCat("job ", id, " not found")); }

class PgJobStore final : public JobStore {
 public:
  explicit PgJobStore(std::shared_ptr<pg::Pool> pool) : pool_(std::move(pool)) {}

  absl::Status Insert(const JobRecord& job, const JobEvent& event) override {
    return pool_->Write("insert job " + job.id, [&](pg::Connection& c) {
      Params p;
      BindJob(p, job);
      auto r = c.Exec(
          absl::StrCat("INSERT INTO jobs (", kJobColumns, ") VALUES (", Placeholders(1, kJobColumnCount), ")"), p);
      if (!r.ok()) return r.status();
      return InsertEvent(c, job.id, event);
    });
  }

  absl::Status InsertCopy(int64_t number, const JobRecord& job, const std::vector<JobEvent>& events) override {
    return pool_->Write("copy job " + job.id, [&](pg::Connection& c) {
      Params p{Int(number)};
      BindJob(p, job);
      auto r = c.Exec(
          absl::StrCat("INSERT INTO jobs (seq, ", kJobColumns, ") VALUES ($1, ", Placeholders(2, kJobColumnCount), ")"),
          p);
      if (!r.ok()) return r.status();
      // New jobs are numbered after it.
      r = c.Exec("SELECT setval(pg_get_serial_sequence('jobs', 'seq'), (SELECT max(seq) FROM jobs))");
      if (!r.ok()) return r.status();
      for (const JobEvent& e : events) {
        if (absl::Status s = InsertEvent(c, job.id, e); !s.ok()) return s;
      }
      return absl::OkStatus();
    });
  }

  absl::Status Update(const JobRecord& job, const JobEvent* event) override {
    return pool_->Write("update job " + job.id, [&](pg::Connection& c) {
      std::string set;
      for (int i = 1; i < kJobColumnCount; ++i) {
        absl::StrAppend(&set, i > 1 ? ", " : "", kJobColumnNames[i], " = $", i + 1);
      }
      Params p;
      BindJob(p, job);
      auto r = c.Exec(absl::StrCat("UPDATE jobs SET ", set, " WHERE id = $1"), p);
      if (!r.ok()) return r.status();
      if (r->affected != 1) return NotFound(job.id);
      return event != nullptr ? InsertEvent(c, job.id, *event) : absl::OkStatus();
    });
  }

  absl::Status AddEvent(const std::string& id, const JobEvent& event) override {
    return pool_->Write("add event of " + id, [&](pg::Connection& c) { return InsertEvent(c, id, event); });
  }

  absl::StatusOr<JobRecord> Get(const std::string& id) override {
    JobRecord out;
    absl::Status s = pool_->Read([&](pg::Connection& c) {
      auto r = c.Exec(absl::StrCat("SELECT ", kJobColumns, " FROM jobs WHERE id = $1"), {id});
      if (!r.ok()) return r.status();
      if (r->rows.empty()) return NotFound(id);
      out = ReadJob(r->rows[0]);
      return absl::OkStatus();
    });
    if (!s.ok()) return s;
    return out;
  }

  absl::StatusOr<std::vector<JobRecord>> List(int limit) override {
    std::vector<JobRecord> out;
    absl::Status s = pool_->Read([&](pg::Connection& c) {
      // A negative limit is none (as SQLite's LIMIT -1).
      auto r = c.Exec(absl::StrCat("SELECT ", kJobColumns,
                                   " FROM (SELECT * FROM jobs ORDER BY seq DESC LIMIT $1) AS newest ORDER BY seq"),
                      {limit < 0 ? std::nullopt : std::optional<std::string>(Int(limit))});
      if (!r.ok()) return r.status();
      out.clear();
      for (const Row& row : r->rows) out.push_back(ReadJob(row));
      return absl::OkStatus();
    });
    if (!s.ok()) return s;
    return out;
  }

  absl::StatusOr<Page> ListPage(const std::vector<JobState>& states, int64_t after, int limit,
                                const std::vector<std::string>& owners, const std::vector<std::string>& groups,
                                bool newest_first) override {
    Params p{Int(newest_first && after == 0 ? std::numeric_limits<int64_t>::max() : after)};
    auto in = [&p](const std::vector<std::string>& values) {
      std::string list = "(";
      for (const std::string& v : values) {
        p.push_back(v);
        absl::StrAppend(&list, list.size() > 1 ? ", $" : "$", p.size());
      }
      return list + ")";
    };
    std::string where = newest_first ? "seq < $1" : "seq > $1";
    if (!states.empty()) {
      std::vector<std::string> names;
      for (JobState s : states) names.emplace_back(JobStateName(s));
      absl::StrAppend(&where, " AND state IN ", in(names));
    }
    if (!owners.empty() && !groups.empty()) {
      absl::StrAppend(&where, " AND (owner IN ", in(owners), " OR grp IN ", in(groups), ")");
    } else if (!owners.empty()) {
      absl::StrAppend(&where, " AND owner IN ", in(owners));
    } else if (!groups.empty()) {
      absl::StrAppend(&where, " AND grp IN ", in(groups));
    }
    p.push_back(Int(static_cast<int64_t>(std::max(limit, 0)) + 1));
    const std::string sql = absl::StrCat("SELECT seq, ", kJobColumns, " FROM jobs WHERE ", where, " ORDER BY seq",
                                         newest_first ? " DESC" : "", " LIMIT $", p.size());
    Page page;
    absl::Status s = pool_->Read([&](pg::Connection& c) {
      auto r = c.Exec(sql, p);
      if (!r.ok()) return r.status();
      page = Page();
      for (const Row& row : r->rows) {
        if (static_cast<int>(page.jobs.size()) == limit) {
          page.more = true;
          break;
        }
        page.last = pg::ParseInt(row.at(0));
        page.numbers.push_back(page.last);
        page.jobs.push_back(ReadJob(row, 1));
      }
      return absl::OkStatus();
    });
    if (!s.ok()) return s;
    return page;
  }

  absl::Status Delete(const std::string& id) override {
    return pool_->Write("delete job " + id, [&](pg::Connection& c) {
      // The rows that name the job first: they reference its row.
      for (const char* table : {"job_history_tails", "job_history", "checkpoints", "job_events"}) {
        if (auto r = c.Exec(absl::StrCat("DELETE FROM ", table, " WHERE job_id = $1"), {id}); !r.ok()) {
          return r.status();
        }
      }
      auto r = c.Exec("DELETE FROM jobs WHERE id = $1", {id});
      if (!r.ok()) return r.status();
      return r->affected == 0 ? NotFound(id) : absl::OkStatus();
    });
  }

  absl::StatusOr<std::vector<JobEvent>> Events(const std::string& id) override {
    std::vector<JobEvent> out;
    absl::Status s = pool_->Read([&](pg::Connection& c) {
      auto r = c.Exec("SELECT unix_ms, state, reason FROM job_events WHERE job_id = $1 ORDER BY seq", {id});
      if (!r.ok()) return r.status();
      out.clear();
      for (const Row& row : r->rows) {
        out.push_back(JobEvent{pg::ParseInt(row[0]), ParseJobState(row[1].value_or("")).value_or(JobState::kFailed),
                               row[2].value_or("")});
      }
      return absl::OkStatus();
    });
    if (!s.ok()) return s;
    return out;
  }

  absl::Status AddCheckpoint(const std::string& id, const CheckpointRecord& r) override {
    const CheckpointEvent& c = r.checkpoint;
    Params p{id,
             Int(r.attempt),
             Int(c.index),
             Int(c.step),
             std::string(CheckpointTypeName(c.type)),
             c.trigger,
             Int(c.request_id),
             c.path,
             Int(c.bytes),
             pg::FormatDouble(c.seconds),
             Int(c.unix_millis),
             c.ok ? "true" : "false",
             c.error};
    return pool_->Write("add checkpoint of " + id, [&](pg::Connection& conn) {
      return conn
          .Exec(
              "INSERT INTO checkpoints (job_id, attempt, idx, step, type, trigger, request_id, path, bytes, seconds, "
              "unix_ms, ok, error) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
              p)
          .status();
    });
  }

  absl::StatusOr<std::vector<CheckpointRecord>> Checkpoints(const std::string& id) override {
    std::vector<CheckpointRecord> out;
    absl::Status s = pool_->Read([&](pg::Connection& conn) {
      auto r = conn.Exec(
          "SELECT attempt, idx, step, type, trigger, request_id, path, bytes, seconds, unix_ms, ok, error "
          "FROM checkpoints WHERE job_id = $1 ORDER BY seq",
          {id});
      if (!r.ok()) return r.status();
      out.clear();
      for (const Row& row : r->rows) {
        CheckpointRecord rec;
        rec.attempt = static_cast<int32_t>(pg::ParseInt(row[0]));
        CheckpointEvent& c = rec.checkpoint;
        c.index = pg::ParseInt(row[1]);
        c.step = pg::ParseInt(row[2]);
        c.type = ValueOf(kCheckpointTypeNames, row[3].value_or("")).value_or(CheckpointType::kFull);
        c.trigger = row[4].value_or("");
        c.request_id = pg::ParseInt(row[5]);
        c.path = row[6].value_or("");
        c.bytes = pg::ParseInt(row[7]);
        c.seconds = pg::ParseDouble(row[8]);
        c.unix_millis = pg::ParseInt(row[9]);
        c.ok = row[10].value_or("") == "t";
        c.error = row[11].value_or("");
        out.push_back(std::move(rec));
      }
      return absl::OkStatus();
    });
    if (!s.ok()) return s;
    return out;
  }

  absl::Status SaveHistory(const std::string& id, const std::string& data) override {
    const std::string bytes = pg::ByteaParam(data);
    return pool_->Write("save history of " + id, [&](pg::Connection& c) {
      auto r = c.Exec(
          "INSERT INTO job_history (job_id, data) VALUES ($1, $2::bytea) "
          "ON CONFLICT (job_id) DO UPDATE SET data = excluded.data",
          {id, bytes});
      if (!r.ok()) return r.status();
      // In the whole history now.
      return c.Exec("DELETE FROM job_history_tails WHERE job_id = $1", {id}).status();
    });
  }

  absl::StatusOr<std::string> History(const std::string& id) override {
    std::string out;
    absl::Status s = pool_->Read([&](pg::Connection& c) {
      auto r = c.Exec("SELECT data FROM job_history WHERE job_id = $1", {id});
      if (!r.ok()) return r.status();
      out = r->rows.empty() ? "" : pg::ParseBytea(r->rows[0][0]);
      return absl::OkStatus();
    });
    if (!s.ok()) return s;
    return out;
  }

  absl::Status AppendHistory(const std::string& id, const std::string& tail) override {
    const std::string bytes = pg::ByteaParam(tail);
    return pool_->Write("append history of " + id, [&](pg::Connection& c) {
      return c.Exec("INSERT INTO job_history_tails (job_id, data) VALUES ($1, $2::bytea)", {id, bytes}).status();
    });
  }

  absl::StatusOr<std::vector<std::string>> HistoryTails(const std::string& id) override {
    std::vector<std::string> out;
    absl::Status s = pool_->Read([&](pg::Connection& c) {
      auto r = c.Exec("SELECT data FROM job_history_tails WHERE job_id = $1 ORDER BY seq", {id});
      if (!r.ok()) return r.status();
      out.clear();
      for (const Row& row : r->rows) out.push_back(pg::ParseBytea(row[0]));
      return absl::OkStatus();
    });
    if (!s.ok()) return s;
    return out;
  }

 private:
  const std::shared_ptr<pg::Pool> pool_;
};

}  // namespace

std::unique_ptr<JobStore> NewPgJobStore(std::shared_ptr<pg::Pool> pool) {
  return std::make_unique<PgJobStore>(std::move(pool));
}

}  // namespace trainyard
