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
          {"concurrency", w.concurrency()},
          {"best_trial", w.best_trial()},
          {"created_unix_millis", w.created_unix_millis()},
          {"ended_unix_millis", w.ended_unix_millis()},
          {"trials", std::move(trials)},
          {"events", std::move(events)}};
}

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
      << "metric:       " << Shown(w.metric()) << " (" << (w.maximize() ? "maximize" : "minimize") << ")\n"
      << "trials:       " << w.trials_size()
      << (w.searcher() == "pbt" ? " (a population of " + std::to_string(w.max_trials()) + ")"
                                : " of " + (w.max_trials() > 0 ? std::to_string(w.max_trials()) : std::string("all")))
      << ", " << w.concurrency() << " at once\n";
  if (!w.owner().empty()) out << "owner:        " << Shown(w.owner()) << "\n";
  out << "created:      " << FormatTime(w.created_unix_millis()) << "\n"
      << "ended:        " << FormatTime(w.ended_unix_millis()) << "\n";
  if (w.best_trial() >= 0 && w.best_trial() < w.trials_size()) {
    const auto& b = w.trials(w.best_trial());
    out << "best:         trial " << b.number() << " (" << Shown(b.job_id()) << "), " << Shown(w.metric()) << " "
        << FormatMetric(b.best_metric()) << "\n";
  }
  out << "\n"
      << std::left << std::setw(6) << "TRIAL" << std::setw(24) << "JOB" << std::setw(11) << "STATE" << std::setw(8)
      << "STEP" << std::setw(6) << "RUNGS" << std::setw(14) << "BEST" << std::setw(10) << "RANK-S";
  // Parameter names are the submitter's text: shown escaped, as every other.
  for (const auto& p : w.parameters()) out << std::setw(std::max<size_t>(12, Shown(p).size() + 2)) << Shown(p);
  out << "REASON\n";
  for (const auto& t : w.trials()) {
    std::ostringstream rank_s;
    rank_s << std::fixed << std::setprecision(1) << t.rank_seconds();
    out << std::setw(6) << t.number() << std::setw(24) << Shown(t.job_id().empty() ? "-" : t.job_id()) << std::setw(11)
        << (t.early_stopped() ? "STOPPED" : StateName(t.state())) << std::setw(8) << t.step() << std::setw(6)
        << t.rungs_passed() << std::setw(14) << (t.has_metric() ? FormatMetric(t.best_metric()) : "-") << std::setw(10)
        << rank_s.str();
    for (int i = 0; i < w.parameters_size(); ++i) {
      out << std::setw(std::max<size_t>(12, Shown(w.parameters(i)).size() + 2))
          << (i < t.values_size() ? Shown(t.values(i)) : "");
    }
    out << Shown(t.reason()) << "\n";
  }
  out << std::right;
  if (!w.events().empty()) out << "\nevents:\n";
  for (const auto& e : w.events()) out << "  " << FormatTime(e.unix_millis()) << "  " << Shown(e.reason()) << "\n";
}

}  // namespace

int Trainctl::SweepSubmit(const std::string& file, bool watch) {
  Impl& s = *impl_;
  std::optional<std::string> text = s.ReadSpecFile(file);
  if (!text) return 2;
  v1::SubmitSweepRequest req;
  req.set_spec(*text);
  v1::SubmitSweepResponse resp;
  if (grpc::Status st = s.Call(&v1::JobService::Stub::SubmitSweep, req, &resp); !st.ok()) return s.Fail(st);
  if (!watch) {
    if (s.options.output == OutputFormat::kJson) {
      PrintSweep(resp.sweep(), s.options.output, s.out);
    } else {
      s.out << resp.sweep().id() << "\n";
    }
    return 0;
  }
  s.out << resp.sweep().id() << " submitted (" << resp.sweep().trials_size() << " trials started)\n";
  return SweepWatch(resp.sweep().id());
}

int Trainctl::SweepWatch(const std::string& id) {
  Impl& s = *impl_;
  size_t printed = 0;
  while (true) {
    v1::GetSweepRequest req;
    req.set_id(id);
    v1::GetSweepResponse resp;
    if (grpc::Status st = s.Call(&v1::JobService::Stub::GetSweep, req, &resp); !st.ok()) return s.Fail(st);
    const v1::Sweep& w = resp.sweep();
    int ended = 0;
    for (const auto& t : w.trials()) ended += t.job_id().empty() || Ended(t.state());
    if (static_cast<size_t>(ended) != printed || Ended(w.state())) {
      printed = ended;
      s.out << id << ": " << StateName(w.state()) << ", " << w.trials_size() << " trials started, " << ended
            << " ended\n";
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

int Trainctl::SweepCancel(const std::string& id, bool keep_best) {
  Impl& s = *impl_;
  v1::CancelSweepRequest req;
  req.set_id(id);
  req.set_keep_best(keep_best);
  v1::CancelSweepResponse resp;
  if (grpc::Status st = s.Call(&v1::JobService::Stub::CancelSweep, req, &resp); !st.ok()) return s.Fail(st);
  PrintSweep(resp.sweep(), s.options.output, s.out);
  return resp.sweep().state() == v1::CANCELLED ? 0 : 1;
}

}  // namespace trainyard
