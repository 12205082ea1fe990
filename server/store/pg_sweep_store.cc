// PostgreSQL implementation of SweepStore: the SQLite store's tables and
// behaviour (sweep_store.cc), each write one fenced transaction of the pool.
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/store/pg_stores.h"
#include "server/store/sweep_trial_json.h"

namespace trainyard {
namespace {

using Params = std::vector<std::optional<std::string>>;
using Row = std::vector<std::optional<std::string>>;

std::string Int(int64_t v) { return std::to_string(v); }

Params SweepParams(const SweepRecord& w) {
  return {w.id,
          w.name,
          w.owner,
          std::string(JobStateName(w.state)),
          w.reason,
          w.spec_text,
          w.caller,
          Int(w.created_unix_millis),
          Int(w.ended_unix_millis)};
}

class PgSweepStore final : public SweepStore {
 public:
  explicit PgSweepStore(std::shared_ptr<pg::Pool> pool) : pool_(std::move(pool)) {}

  absl::Status Insert(const SweepRecord& w) override {
    return pool_->Write("insert sweep " + w.id, [&](pg::Connection& c) {
      return c
          .Exec(
              "INSERT INTO sweeps (id, name, owner, state, reason, spec, caller, created_ms, ended_ms) "
              "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
              SweepParams(w))
          .status();
    });
  }

  absl::Status Update(const SweepRecord& w) override {
    return pool_->Write("update sweep " + w.id, [&](pg::Connection& c) {
      auto r = c.Exec(
          "UPDATE sweeps SET name = $2, owner = $3, state = $4, reason = $5, spec = $6, caller = $7, "
          "created_ms = $8, ended_ms = $9 WHERE id = $1",
          SweepParams(w));
      if (!r.ok()) return r.status();
      if (r->affected != 1) return absl::NotFoundError(absl::StrCat("sweep ", w.id, " not found"));
      return absl::OkStatus();
    });
  }

  absl::Status SaveTrial(const std::string& sweep_id, const SweepTrialRecord& t) override {
    return pool_->Write(absl::StrCat("save trial ", t.number, " of ", sweep_id), [&](pg::Connection& c) {
      return c
          .Exec(
              "INSERT INTO sweep_trials (sweep_id, number, data) VALUES ($1, $2, $3) "
              "ON CONFLICT (sweep_id, number) DO UPDATE SET data = excluded.data",
              {sweep_id, Int(t.number), TrialJson(t)})
          .status();
    });
  }

  absl::Status AddRungResult(const std::string& sweep_id, const RungResult& r) override {
    return pool_->Write("add rung result of " + sweep_id, [&](pg::Connection& c) {
      return c
          .Exec("INSERT INTO sweep_rung_results (sweep_id, trial, step, value) VALUES ($1, $2, $3, $4)",
                {sweep_id, Int(r.trial), Int(r.step), pg::FormatDouble(r.value)})
          .status();
    });
  }

  absl::StatusOr<std::vector<SweepRecord>> List() override {
    std::vector<SweepRecord> out;
    absl::Status s = pool_->Read([&](pg::Connection& c) {
      out.clear();
      auto sweeps =
          c.Exec("SELECT id, name, owner, state, reason, spec, caller, created_ms, ended_ms FROM sweeps ORDER BY seq");
      if (!sweeps.ok()) return sweeps.status();
      std::map<std::string, size_t> index;
      for (const Row& row : sweeps->rows) {
        SweepRecord w;
        w.id = row[0].value_or("");
        w.name = row[1].value_or("");
        w.owner = row[2].value_or("");
        w.state = ParseJobState(row[3].value_or("")).value_or(JobState::kFailed);
        w.reason = row[4].value_or("");
        w.spec_text = row[5].value_or("");
        w.caller = row[6].value_or("");
        w.created_unix_millis = pg::ParseInt(row[7]);
        w.ended_unix_millis = pg::ParseInt(row[8]);
        index[w.id] = out.size();
        out.push_back(std::move(w));
      }
      auto trials = c.Exec("SELECT sweep_id, number, data FROM sweep_trials ORDER BY sweep_id, number");
      if (!trials.ok()) return trials.status();
      for (const Row& row : trials->rows) {
        auto it = index.find(row[0].value_or(""));
        if (it == index.end()) continue;  // a sweep inserted after the first read
        auto t = TrialFromJson(static_cast<int32_t>(pg::ParseInt(row[1])), row[2].value_or(""));
        if (!t.ok()) return t.status();
        out[it->second].trials.push_back(std::move(*t));
      }
      return absl::OkStatus();
    });
    if (!s.ok()) return s;
    return out;
  }

  absl::StatusOr<std::vector<RungResult>> RungResults(const std::string& sweep_id) override {
    std::vector<RungResult> out;
    absl::Status s = pool_->Read([&](pg::Connection& c) {
      auto r = c.Exec("SELECT trial, step, value FROM sweep_rung_results WHERE sweep_id = $1 ORDER BY seq", {sweep_id});
      if (!r.ok()) return r.status();
      out.clear();
      for (const Row& row : r->rows) {
        out.push_back(
            RungResult{static_cast<int32_t>(pg::ParseInt(row[0])), pg::ParseInt(row[1]), pg::ParseDouble(row[2])});
      }
      return absl::OkStatus();
    });
    if (!s.ok()) return s;
    return out;
  }

  absl::Status AddEvent(const std::string& sweep_id, const JobEvent& e) override {
    return pool_->Write("add event of " + sweep_id, [&](pg::Connection& c) {
      auto r = c.Exec("INSERT INTO sweep_events (sweep_id, unix_ms, state, reason) VALUES ($1, $2, $3, $4)",
                      {sweep_id, Int(e.unix_millis), std::string(JobStateName(e.state)), e.reason});
      if (!r.ok()) return r.status();
      // Only the newest kMaxEvents stay: a long sweep's oldest go first.
      return c
          .Exec(
              "DELETE FROM sweep_events WHERE sweep_id = $1 AND seq <= (SELECT seq FROM sweep_events "
              "WHERE sweep_id = $1 ORDER BY seq DESC LIMIT 1 OFFSET $2)",
              {sweep_id, Int(kMaxEvents)})
          .status();
    });
  }

  absl::StatusOr<std::vector<JobEvent>> Events(const std::string& sweep_id) override {
    std::vector<JobEvent> out;
    absl::Status s = pool_->Read([&](pg::Connection& c) {
      auto r = c.Exec("SELECT unix_ms, state, reason FROM sweep_events WHERE sweep_id = $1 ORDER BY seq", {sweep_id});
      if (!r.ok()) return r.status();
      out.clear();
      for (const Row& row : r->rows) {
        out.push_back(JobEvent{pg::ParseInt(row[0]), ParseJobState(row[1].value_or("")).value_or(JobState::kRunning),
                               row[2].value_or("")});
      }
      return absl::OkStatus();
    });
    if (!s.ok()) return s;
    return out;
  }

 private:
  const std::shared_ptr<pg::Pool> pool_;
};

}  // namespace

std::unique_ptr<SweepStore> NewPgSweepStore(std::shared_ptr<pg::Pool> pool) {
  return std::make_unique<PgSweepStore>(std::move(pool));
}

}  // namespace trainyard
