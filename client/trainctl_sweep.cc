// `trainctl sweep submit|get|list|cancel`: hyperparameter sweeps.
#include <fstream>
#include <iomanip>
#include <sstream>
#include <thread>

#include "client/trainctl_impl.h"

namespace trainyard {
namespace {

using nlohmann::ordered_json;

bool Ended(v1::JobState s) { return s == v1::SUCCEEDED || s == v1::FAILED || s == v1::CANCELLED; }

// Trials still queued or running.
int LiveTrials(const v1::Sweep& w) {
  int live = 0;
  for (const auto& t : w.trials()) live += !t.job_id().empty() && !Ended(t.state());
  return live;
}

ordered_json SweepJson(const v1::Sweep& w) {
  ordered_json trials = ordered_json::array();
  for (const auto& t : w.trials()) {
    ordered_json values = ordered_json::object();
    for (int i = 0; i < t.values_size() && i < w.parameters_size(); ++i) values[w.parameters(i)] = t.values(i);
    trials.push_back({{"number", t.number()},
                      {"job_id", t.job_id()},
                      {"values", std::move(values)},
                      {"state", StateName(t.state())},
                      {"early_stopped", t.early_stopped()},
                      {"rungs_passed", t.rungs_passed()},
                      {"best_metric", t.has_metric() ? ordered_json(t.best_metric()) : ordered_json()},
                      {"step", t.step()},
                      {"rank_seconds", t.rank_seconds()},
                      {"reason", t.reason()},
                      {"parent", t.parent()},
                      {"resumed_from_step", t.resumed_from_step()}});
  }
  ordered_json events = ordered_json::array();
  for (const auto& e : w.events()) {
    events.push_back({{"unix_millis", e.unix_millis()}, {"state", StateName(e.state())}, {"reason", e.reason()}});
  }
  return {{"id", w.id()},
          {"name", w.name()},
          {"owner", w.owner()},
          {"state", StateName(w.state())},
          {"reason", w.reason()},
          {"searcher", w.searcher()},
          {"metric", w.metric()},
          {"goal", w.maximize() ? "maximize" : "minimize"},
          {"parameters", std::vector<std::string>(w.parameters().begin(), w.parameters().end())},
          {"rungs", std::vector<int64_t>(w.rungs().begin(), w.rungs().end())},
          {"max_trials", w.max_trials()},
          {"total_trials", w.total_trials()},
          {"metric_scope", w.metric_scope()},
          {"concurrency", w.concurrency()},
          {"best_trial", w.best_trial()},
          {"created_unix_millis", w.created_unix_millis()},
          {"ended_unix_millis", w.ended_unix_millis()},
          {"trials", std::move(trials)},
          {"events", std::move(events)}};
}

}  // namespace

std::string SweepTrialsLine(const v1::Sweep& w) {
  const std::string started = std::to_string(w.trials_size());
  const std::string at_once = ", " + std::to_string(w.concurrency()) + " at once";
  if (w.searcher() == "pbt") {
    return started + " started (a population of " + std::to_string(w.total_trials()) + " and their replacements)" +
           at_once;
  }
  if (w.total_trials() <= 0) return started + " started" + at_once;  // a server before total_trials
  return started + " of " + std::to_string(w.total_trials()) + (w.searcher() == "grid" ? " (grid)" : "") + at_once;
}

std::string SweepProgressLine(const v1::Sweep& w) {
  int ended = 0;
  for (const auto& t : w.trials()) ended += t.job_id().empty() || Ended(t.state());
  std::string line = Shown(w.id()) + ": " + StateName(w.state()) + ", " + SweepTrialsLine(w) + ", " +
                     std::to_string(LiveTrials(w)) + " live, " + std::to_string(ended) + " ended; best: ";
  if (w.best_trial() >= 0 && w.best_trial() < w.trials_size()) {
    const auto& b = w.trials(w.best_trial());
    line += "trial " + std::to_string(b.number()) + " (" + Shown(b.job_id()) + "), " + Shown(w.metric()) + " " +
            FormatMetric(b.best_metric());
  } else {
    line += "none yet";
  }
  return line;
}

void PrintTrialTable(const v1::Sweep& w, std::ostream& out) {
  // Each column as wide as its widest cell and two spaces more, so that no
  // cell runs into the next.
  const std::vector<std::string> fixed = {"TRIAL", "JOB", "STATE", "STEP", "RUNGS", "VALUE", "RANK-S"};
  std::vector<std::vector<std::string>> rows;
  for (const auto& t : w.trials()) {
    char rank_s[32];
    std::snprintf(rank_s, sizeof rank_s, "%.1f", t.rank_seconds());
    std::vector<std::string> row = {std::to_string(t.number()),
                                    Shown(t.job_id().empty() ? "-" : t.job_id()),
                                    t.early_stopped() ? "STOPPED" : StateName(t.state()),
                                    std::to_string(t.step()),
                                    std::to_string(t.rungs_passed()),
                                    t.has_metric() ? FormatMetric(t.best_metric()) : "-",
                                    rank_s};
    // Parameter names and values are the submitter's text: shown escaped.
    for (int i = 0; i < w.parameters_size(); ++i) row.push_back(i < t.values_size() ? Shown(t.values(i)) : "");
    rows.push_back(std::move(row));
  }
  std::vector<std::string> header = fixed;
  for (const auto& p : w.parameters()) header.push_back(Shown(p));
  std::vector<size_t> width(header.size());
  for (size_t c = 0; c < header.size(); ++c) {
    width[c] = header[c].size();
    for (const auto& row : rows) width[c] = std::max(width[c], row[c].size());
    width[c] += 2;
  }
  out << std::left;
  for (size_t c = 0; c < header.size(); ++c) out << std::setw(static_cast<int>(width[c])) << header[c];
  out << "REASON\n";
  for (int i = 0; i < w.trials_size(); ++i) {
    for (size_t c = 0; c < header.size(); ++c) out << std::setw(static_cast<int>(width[c])) << rows[i][c];
    out << Shown(w.trials(i).reason()) << "\n";
  }
  out << std::right;
}

namespace {

void PrintSweep(const v1::Sweep& w, OutputFormat format, std::ostream& out) {
  if (format == OutputFormat::kJson) {
    out << SweepJson(w).dump(2) << "\n";
    return;
  }
  std::string rungs;
  for (int64_t r : w.rungs()) rungs += (rungs.empty() ? "" : ",") + std::to_string(r);
  out << "id:           " << Shown(w.id()) << "\n"
      << "name:         " << Shown(w.name()) << "\n"
      << "state:        " << StateName(w.state()) << "\n"
      << "reason:       " << Shown(w.reason()) << "\n"
      << "searcher:     " << Shown(w.searcher()) << (rungs.empty() ? "" : " (rungs at steps " + rungs + ")") << "\n"
      << "metric:       " << Shown(w.metric()) << " (" << (w.maximize() ? "maximize" : "minimize") << ", "
      << Shown(w.metric_scope().empty() ? "last" : w.metric_scope()) << " value of each trial)\n"
      << "trials:       " << SweepTrialsLine(w) << "\n";
  if (!w.owner().empty()) out << "owner:        " << Shown(w.owner()) << "\n";
  out << "created:      " << FormatTime(w.created_unix_millis()) << "\n"
      << "ended:        " << FormatTime(w.ended_unix_millis()) << "\n";
  if (w.best_trial() >= 0 && w.best_trial() < w.trials_size()) {
    const auto& b = w.trials(w.best_trial());
    out << "best:         trial " << b.number() << " (" << Shown(b.job_id()) << "), " << Shown(w.metric()) << " "
        << FormatMetric(b.best_metric()) << "\n";
  }
  out << "\n";
  PrintTrialTable(w, out);
  if (!w.events().empty()) out << "\nevents:\n";
  for (const auto& e : w.events()) out << "  " << FormatTime(e.unix_millis()) << "  " << Shown(e.reason()) << "\n";
}

}  // namespace

int Trainctl::SweepSubmit(const std::string& file, bool watch, bool quiet) {
  Impl& s = *impl_;
  std::optional<std::string> text = s.ReadSpecFile(file);
  if (!text) return 2;
  v1::SubmitSweepRequest req;
  req.set_spec(*text);
  v1::SubmitSweepResponse resp;
  if (grpc::Status st = s.Call(&v1::JobService::Stub::SubmitSweep, req, &resp); !st.ok()) return s.Fail(st);
  const v1::Sweep& w = resp.sweep();
  if (quiet) {
    s.out << w.id() << "\n";
  } else if (s.options.output == OutputFormat::kJson && !watch) {
    PrintSweep(w, s.options.output, s.out);
  } else {
    s.out << "submitted " << Shown(w.id()) << " (" << Shown(w.name()) << "): searcher " << Shown(w.searcher())
          << ", metric " << Shown(w.metric()) << " (" << (w.maximize() ? "maximize" : "minimize") << "), trials "
          << SweepTrialsLine(w) << "\n";
    if (!watch) s.out << "follow it: trainctl sweep watch " << Shown(w.id()) << "\n";
  }
  return watch ? SweepWatch(w.id()) : 0;
}

int Trainctl::SweepWatch(const std::string& id) {
  Impl& s = *impl_;
  std::string printed;
  while (true) {
    v1::GetSweepRequest req;
    req.set_id(id);
    v1::GetSweepResponse resp;
    if (grpc::Status st = s.Call(&v1::JobService::Stub::GetSweep, req, &resp); !st.ok()) return s.Fail(st);
    const v1::Sweep& w = resp.sweep();
    // A line each time a trial starts or ends or another trial is the best
    // (not at each new value of the best: under scope last, every step).
    int ended = 0;
    for (const auto& t : w.trials()) ended += t.job_id().empty() || Ended(t.state());
    const std::string key = StateName(w.state()) + " " + std::to_string(w.trials_size()) + " " + std::to_string(ended) +
                            " " + std::to_string(w.best_trial());
    if (key != printed) {
      printed = key;
      s.out << SweepProgressLine(w) << "\n";
    }
    if (Ended(w.state())) {
      bool live = false;
      for (const auto& t : w.trials()) live |= !t.job_id().empty() && !Ended(t.state());
      if (!live || w.state() == v1::CANCELLED) {
        PrintSweep(w, s.options.output, s.out);
        return w.state() == v1::SUCCEEDED ? 0 : 1;
      }
    }
    std::this_thread::sleep_for(std::chrono::seconds(1));  // a poll interval, as `kubectl get -w` without a stream
  }
}

int Trainctl::SweepGet(const std::string& id) {
  Impl& s = *impl_;
  v1::GetSweepRequest req;
  req.set_id(id);
  v1::GetSweepResponse resp;
  if (grpc::Status st = s.Call(&v1::JobService::Stub::GetSweep, req, &resp); !st.ok()) return s.Fail(st);
  PrintSweep(resp.sweep(), s.options.output, s.out);
  return 0;
}

int Trainctl::SweepList(bool all_users) {
  Impl& s = *impl_;
  v1::ListSweepsRequest req;
  req.set_all_users(all_users);
  req.set_page_size(1000);
  v1::ListSweepsResponse resp;
  for (;;) {  // every page
    v1::ListSweepsResponse page;
    if (grpc::Status st = s.Call(&v1::JobService::Stub::ListSweeps, req, &page); !st.ok()) return s.Fail(st);
    for (auto& w : *page.mutable_sweeps()) *resp.add_sweeps() = std::move(w);
    if (page.next_page_token().empty()) break;
    req.set_page_token(page.next_page_token());
  }
  if (s.options.output == OutputFormat::kJson) {
    ordered_json all = ordered_json::array();
    for (const auto& w : resp.sweeps()) all.push_back(SweepJson(w));
    s.out << all.dump(2) << "\n";
    return 0;
  }
  s.out << std::left << std::setw(16) << "ID" << std::setw(20) << "NAME" << std::setw(11) << "STATE" << std::setw(8)
        << "SEARCH" << std::setw(8) << "TRIALS" << std::setw(8) << "LIVE" << std::setw(10) << "OWNER"
        << "BEST\n";
  for (const auto& w : resp.sweeps()) {
    int live = 0;
    for (const auto& t : w.trials()) live += !t.job_id().empty() && !Ended(t.state());
    std::string best = "-";
    if (w.best_trial() >= 0 && w.best_trial() < w.trials_size()) {
      best = "trial " + std::to_string(w.best_trial()) + ": " + FormatMetric(w.trials(w.best_trial()).best_metric());
    }
    s.out << std::setw(16) << Shown(w.id()) << std::setw(20) << Shown(w.name()) << std::setw(11) << StateName(w.state())
          << std::setw(8) << Shown(w.searcher()) << std::setw(8) << w.trials_size() << std::setw(8) << live
          << std::setw(10) << Shown(w.owner().empty() ? "-" : w.owner()) << best << "\n";
  }
  s.out << std::right;
  return 0;
}

int Trainctl::SweepCancel(const std::string& id, bool keep_best, bool wait) {
  Impl& s = *impl_;
  auto ended_before = [&](const v1::Sweep& w) {
    s.err << "trainctl: sweep " << Shown(id) << " had already ended " << StateName(w.state()) << " ("
          << Shown(w.reason()) << "): nothing to cancel\n";
    return 1;
  };
  {
    v1::GetSweepRequest get;
    get.set_id(id);
    v1::GetSweepResponse before;
    if (grpc::Status st = s.Call(&v1::JobService::Stub::GetSweep, get, &before); !st.ok()) return s.Fail(st);
    if (Ended(before.sweep().state())) return ended_before(before.sweep());
  }
  v1::CancelSweepRequest req;
  req.set_id(id);
  req.set_keep_best(keep_best);
  v1::CancelSweepResponse resp;
  if (grpc::Status st = s.Call(&v1::JobService::Stub::CancelSweep, req, &resp); !st.ok()) return s.Fail(st);
  v1::Sweep w = resp.sweep();
  if (w.state() != v1::CANCELLED) return ended_before(w);  // it ended in between
  // The trials that may go on: the best one with --keep-best.
  auto stopping = [&](const v1::Sweep& sweep) {
    int n = 0;
    for (const auto& t : sweep.trials()) {
      n += !t.job_id().empty() && !Ended(t.state()) && !(keep_best && t.number() == sweep.best_trial());
    }
    return n;
  };
  if (wait && stopping(w) > 0) {
    s.out << Shown(id) << ": cancelling, waiting for " << stopping(w) << " trials' workers to stop\n";
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(10);
    while (stopping(w) > 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      v1::GetSweepRequest get;
      get.set_id(id);
      v1::GetSweepResponse now;
      if (grpc::Status st = s.Call(&v1::JobService::Stub::GetSweep, get, &now); !st.ok()) return s.Fail(st);
      w = now.sweep();
    }
    if (stopping(w) > 0) {
      s.err << "trainctl: sweep " << Shown(id) << " is CANCELLED but " << stopping(w)
            << " of its trials had not stopped after 10 minutes (trainctl sweep get " << Shown(id) << ")\n";
      PrintSweep(w, s.options.output, s.out);
      return 1;
    }
  }
  PrintSweep(w, s.options.output, s.out);
  return 0;
}

}  // namespace trainyard
