#include "server/store/migrate_store.h"

#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/store/pg_connection.h"
#include "server/store/stores.h"

namespace trainyard {
namespace {

std::string Count(int64_t n, const char* one, const char* many) { return absl::StrCat(n, " ", n == 1 ? one : many); }

absl::Status Context(const absl::Status& s, const std::string& what) {
  return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
}

}  // namespace

std::string Describe(const MigrateReport& r) {
  return absl::StrCat("copied ", Count(r.jobs, "job", "jobs"), " (", Count(r.events, "event", "events"), ", ",
                      Count(r.checkpoints, "checkpoint", "checkpoints"), ", ",
                      Count(r.histories, "history", "histories"), ") and ", Count(r.sweeps, "sweep", "sweeps"), " (",
                      Count(r.trials, "trial", "trials"), ", ", Count(r.rung_results, "rung result", "rung results"),
                      ", ", Count(r.sweep_events, "event", "events"), ") from ", r.from, " to ", r.to);
}

absl::StatusOr<MigrateReport> MigrateStore(const std::string& from_url, const std::string& to_url) {
  if (from_url.empty() || to_url.empty()) {
    return absl::InvalidArgumentError("migrate-store needs both --from and --to (sqlite:PATH or postgresql://...)");
  }
  if (absl::StartsWith(from_url, "sqlite:") && !std::filesystem::exists(from_url.substr(7))) {
    return absl::NotFoundError(absl::StrCat("--from ", from_url, ": no such file"));
  }
  auto from = OpenStores(from_url, "");
  if (!from.ok()) return Context(from.status(), "--from " + pg::Redacted(from_url));
  auto to = OpenStores(to_url, "");
  if (!to.ok()) return Context(to.status(), "--to " + pg::Redacted(to_url));
  MigrateReport report;
  report.from = from->description;
  report.to = to->description;
  if (report.from == report.to) return absl::InvalidArgumentError("--from and --to are the same store");

  // The target must be empty: a copy into a store in use would mix two services' jobs.
  auto their_jobs = to->jobs->ListPage({}, 0, 1);
  if (!their_jobs.ok()) return Context(their_jobs.status(), "reading " + report.to);
  auto their_sweeps = to->sweeps->List();
  if (!their_sweeps.ok()) return Context(their_sweeps.status(), "reading " + report.to);
  if (!their_jobs->jobs.empty() || !their_sweeps->empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(report.to, " is not empty: it holds ",
                     their_jobs->jobs.empty() ? "no job" : absl::StrCat("jobs (", their_jobs->jobs[0].id, ", ...)"),
                     " and ", Count(static_cast<int64_t>(their_sweeps->size()), "sweep", "sweeps"),
                     "; migrate-store copies into an empty store only"));
  }

  JobStore& src = *from->jobs;
  JobStore& dst = *to->jobs;
  for (int64_t after = 0;;) {
    auto page = src.ListPage({}, after, 500);
    if (!page.ok()) return Context(page.status(), "listing the jobs of " + report.from);
    for (size_t i = 0; i < page->jobs.size(); ++i) {
      const JobRecord& job = page->jobs[i];
      const std::string what = absl::StrCat("copying job ", job.id);
      auto events = src.Events(job.id);
      if (!events.ok()) return Context(events.status(), what);
      if (absl::Status s = dst.InsertCopy(page->numbers.at(i), job, *events); !s.ok()) return Context(s, what);
      auto checkpoints = src.Checkpoints(job.id);
      if (!checkpoints.ok()) return Context(checkpoints.status(), what);
      for (const CheckpointRecord& c : *checkpoints) {
        if (absl::Status s = dst.AddCheckpoint(job.id, c); !s.ok()) return Context(s, what);
      }
      auto history = src.History(job.id);
      if (!history.ok()) return Context(history.status(), what);
      auto tails = src.HistoryTails(job.id);
      if (!tails.ok()) return Context(tails.status(), what);
      if (!history->empty()) {
        if (absl::Status s = dst.SaveHistory(job.id, *history); !s.ok()) return Context(s, what);
      }
      for (const std::string& tail : *tails) {
        if (absl::Status s = dst.AppendHistory(job.id, tail); !s.ok()) return Context(s, what);
      }
      ++report.jobs;
      report.events += static_cast<int64_t>(events->size());
      report.checkpoints += static_cast<int64_t>(checkpoints->size());
      report.histories += !history->empty() || !tails->empty() ? 1 : 0;
    }
    if (!page->more) break;
    after = page->last;
  }

  auto sweeps = from->sweeps->List();
  if (!sweeps.ok()) return Context(sweeps.status(), "listing the sweeps of " + report.from);
  for (const SweepRecord& w : *sweeps) {
    const std::string what = absl::StrCat("copying sweep ", w.id);
    if (absl::Status s = to->sweeps->Insert(w); !s.ok()) return Context(s, what);
    for (const SweepTrialRecord& t : w.trials) {
      if (absl::Status s = to->sweeps->SaveTrial(w.id, t); !s.ok()) return Context(s, what);
    }
    auto results = from->sweeps->RungResults(w.id);
    if (!results.ok()) return Context(results.status(), what);
    for (const RungResult& r : *results) {
      if (absl::Status s = to->sweeps->AddRungResult(w.id, r); !s.ok()) return Context(s, what);
    }
    auto events = from->sweeps->Events(w.id);
    if (!events.ok()) return Context(events.status(), what);
    for (const JobEvent& e : *events) {
      if (absl::Status s = to->sweeps->AddEvent(w.id, e); !s.ok()) return Context(s, what);
    }
    ++report.sweeps;
    report.trials += static_cast<int64_t>(w.trials.size());
    report.rung_results += static_cast<int64_t>(results->size());
    report.sweep_events += static_cast<int64_t>(events->size());
  }
  return report;
}

}  // namespace trainyard
