// `trainctl history`: one job's series, or several side by side.
#include <iomanip>

#include "client/trainctl_impl.h"

namespace trainyard {

using nlohmann::ordered_json;

namespace {

ordered_json HistoryJson(const std::string& id, const v1::GetJobHistoryResponse& resp) {
  ordered_json all;
  all["id"] = id;
  all["series"] = ordered_json::object();
  for (const auto& h : resp.series()) {
    ordered_json points = ordered_json::array();
    for (const auto& p : h.points()) {
      points.push_back({{"step", p.step()}, {"unix_millis", p.unix_millis()}, {"value", p.value()}});
    }
    all["series"][h.name()] = {{"samples", h.samples()}, {"points", std::move(points)}};
  }
  all["events"] = ordered_json::array();
  for (const auto& e : resp.events()) {
    all["events"].push_back(
        {{"unix_millis", e.unix_millis()}, {"state", StateName(e.state())}, {"reason", e.reason()}});
  }
  all["checkpoints"] = ordered_json::array();
  for (const auto& c : resp.checkpoints()) all["checkpoints"].push_back(CheckpointJson(c));
  return all;
}

void PrintHistory(const std::string& id, const v1::GetJobHistoryResponse& resp, std::ostream& out) {
  if (resp.series().empty())
    out << id << ": no step reported yet\n";
  else {
    out << std::left << std::setw(20) << "SERIES" << std::setw(9) << "SAMPLES" << std::setw(8) << "POINTS"
        << std::setw(10) << "STEPS" << std::setw(14) << "FIRST" << std::setw(14) << "MIN" << std::setw(14) << "MAX"
        << "LAST\n";
    for (const auto& h : resp.series()) {
      if (h.points().empty()) continue;
      double lo = h.points(0).value(), hi = lo;
      for (const auto& p : h.points()) lo = std::min(lo, p.value()), hi = std::max(hi, p.value());
      const auto& first = h.points(0);
      const auto& last = h.points(h.points_size() - 1);
      out << std::left << std::setw(20) << h.name() << std::setw(9) << h.samples() << std::setw(8) << h.points_size()
          << std::setw(10) << (std::to_string(first.step()) + "-" + std::to_string(last.step())) << std::setw(14)
          << FormatNumber(first.value()) << std::setw(14) << FormatNumber(lo) << std::setw(14) << FormatNumber(hi)
          << FormatNumber(last.value()) << "\n";
    }
  }
  if (!resp.events().empty()) out << "events:\n";
  for (const auto& e : resp.events()) out << "  " << FormatTime(e.unix_millis()) << "  " << Shown(e.reason()) << "\n";
}

}  // namespace

int Trainctl::History(const std::vector<std::string>& ids, const std::vector<std::string>& series) {
  Impl& s = *impl_;
  std::vector<v1::GetJobHistoryResponse> all(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    v1::GetJobHistoryRequest req;
    req.set_id(ids[i]);
    for (const std::string& name : series) req.add_series(name);
    grpc::Status st = s.Call(&v1::JobService::Stub::GetJobHistory, req, &all[i]);
    if (!st.ok()) return s.Fail(st);
  }
  const bool several = ids.size() > 1;
  if (s.options.output == OutputFormat::kCsv) {
    // Several jobs: one table with a job column, for a notebook's
    // pandas.read_csv(...).pivot(...).
    s.out << (several ? "job," : "") << "series,step,unix_millis,value\n";
    for (size_t i = 0; i < ids.size(); ++i) {
      for (const auto& h : all[i].series()) {
        for (const auto& p : h.points()) {
          s.out << (several ? ids[i] + "," : "") << h.name() << "," << p.step() << "," << p.unix_millis() << ","
                << FormatNumber(p.value()) << "\n";
        }
      }
    }
    return 0;
  }
  if (s.options.output == OutputFormat::kJson) {
    ordered_json list = ordered_json::array();
    for (size_t i = 0; i < ids.size(); ++i) list.push_back(HistoryJson(ids[i], all[i]));
    s.out << (several ? list : list[0]).dump(2) << "\n";
    return 0;
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    if (several) s.out << (i > 0 ? "\n" : "") << "==> " << ids[i] << " <==\n";
    PrintHistory(ids[i], all[i], s.out);
  }
  return 0;
}

}  // namespace trainyard
