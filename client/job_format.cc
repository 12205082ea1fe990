#include "client/job_format.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <iomanip>
#include <map>
#include <ostream>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/job_state.h"
#include "common/wire_convert.h"

namespace trainyard {

using nlohmann::ordered_json;

std::string StateName(v1::JobState s) {
  auto st = FromProto(s);
  return st ? std::string(JobStateName(*st)) : "UNKNOWN";
}

bool IsTerminalProto(v1::JobState s) {
  auto st = FromProto(s);
  return st && IsTerminal(*st);
}

std::string FormatNumber(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

std::string FormatMetric(double v, bool known) {
  if (!known) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

std::string FormatRate(double v) {
  if (!(v > 0)) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

std::string FormatTime(int64_t unix_millis) {
  if (unix_millis == 0) return "-";
  std::time_t t = unix_millis / 1000;
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

std::string FormatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--:--";
  int64_t s = static_cast<int64_t>(seconds + 0.5);
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof(buf), "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                  static_cast<long long>((s / 60) % 60), static_cast<long long>(s % 60));
  } else {
    std::snprintf(buf, sizeof(buf), "%02lld:%02lld", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  }
  return buf;
}

ordered_json JobJson(const v1::Job& j) {
  ordered_json o;
  o["id"] = j.id();
  o["name"] = j.name();
  o["state"] = StateName(j.state());
  o["reason"] = j.reason();
  o["num_processes"] = j.num_processes();
  o["step"] = j.step();
  o["max_steps"] = j.max_steps();
  o["loss"] = j.loss();
  o["first_loss"] = j.first_loss();
  o["samples_per_second"] = j.samples_per_second();
  o["attempt"] = j.attempt();
  o["failed_rank"] = j.failed_rank();
  o["owner"] = j.owner();
  o["group"] = j.group();
  o["priority"] = j.priority();
  o["created"] = FormatTime(j.created_unix_millis());
  o["started"] = FormatTime(j.started_unix_millis());
  o["ended"] = FormatTime(j.ended_unix_millis());
  if (!j.spec_json().empty()) {
    o["spec"] = ordered_json::parse(j.spec_json(), nullptr, /*allow_exceptions=*/false);
  }
  if (j.ranks_size() > 0) {
    ordered_json ranks = ordered_json::array();
    for (const v1::MetricsSample& r : j.ranks()) {
      ordered_json o = {{"rank", r.rank()},
                        {"step", r.step()},
                        {"loss", r.loss()},
                        {"step_seconds", r.step_seconds()},
                        {"forward_seconds", r.forward_seconds()}};
      if (r.gpu_memory_total_bytes() > 0) {
        o["gpu"] = {{"utilization", r.gpu_utilization()},
                    {"memory_used_bytes", r.gpu_memory_used_bytes()},
                    {"memory_total_bytes", r.gpu_memory_total_bytes()},
                    {"power_watts", r.gpu_power_watts()},
                    {"temperature_celsius", r.gpu_temperature_celsius()},
                    {"ecc_corrected", r.gpu_ecc_corrected()},
                    {"ecc_uncorrected", r.gpu_ecc_uncorrected()},
                    {"xid_errors", r.gpu_xid_errors()},
                    {"last_xid", r.gpu_last_xid()}};
      }
      ranks.push_back(std::move(o));
    }
    o["ranks"] = ranks;
  }
  if (j.places_size() > 0) {
    ordered_json places = ordered_json::array();
    for (const v1::RankPlace& p : j.places()) places.push_back({{"rank", p.rank()}, {"node", p.node()}});
    o["places"] = places;
  }
  if (!j.slurm_job_id().empty()) o["slurm_job_id"] = j.slurm_job_id();
  if (!j.sweep_id().empty()) o["sweep"] = {{"id", j.sweep_id()}, {"trial", j.sweep_trial()}};
  if (j.has_replicas()) {
    const v1::Replicas& r = j.replicas();
    o["replicas"] = {{"epoch", r.epoch()},
                     {"live", std::vector<int32_t>(r.live().begin(), r.live().end())},
                     {"healing", std::vector<int32_t>(r.healing().begin(), r.healing().end())},
                     {"min_replicas", r.min_replicas()},
                     {"size", r.size()},
                     {"leaving", std::vector<int32_t>(r.leaving().begin(), r.leaving().end())}};
  }
  if (j.events_size() > 0) {
    ordered_json events = ordered_json::array();
    for (const auto& e : j.events()) {
      events.push_back(
          {{"time", FormatTime(e.unix_millis())}, {"state", StateName(e.state())}, {"reason", e.reason()}});
    }
    o["events"] = events;
  }
  return o;
}

void PrintRanks(const v1::Job& j, std::ostream& out) {
  if (j.ranks_size() == 0 && j.places_size() == 0) return;
  std::map<int32_t, std::string> nodes;
  size_t width = 4;
  for (const v1::RankPlace& p : j.places()) {
    nodes[p.rank()] = p.node();
    width = std::max(width, p.node().size());
  }
  const int node_width = static_cast<int>(width) + 2;
  // Ranks that connected but reported no step yet have a place alone.
  std::map<int32_t, const v1::MetricsSample*> samples;
  for (const v1::MetricsSample& r : j.ranks()) samples[r.rank()] = &r;
  std::set<int32_t> ranks;
  for (const auto& [rank, node] : nodes) ranks.insert(rank);
  for (const auto& [rank, sample] : samples) ranks.insert(rank);
  out << "ranks:\n  " << std::left << std::setw(6) << "RANK" << std::setw(node_width) << "NODE" << std::setw(10)
      << "STEP" << std::setw(7) << "GPU" << std::setw(22) << "GPU MEMORY" << std::setw(9) << "POWER" << std::setw(7)
      << "TEMP" << std::setw(12) << "ECC C/U"
      << "XID\n";
  auto known = [](double v, const char* fmt) {
    if (v < 0) return std::string("-");
    char buf[32];
    std::snprintf(buf, sizeof(buf), fmt, v);
    return std::string(buf);
  };
  for (int32_t rank : ranks) {
    auto node = nodes.find(rank);
    out << "  " << std::left << std::setw(6) << rank << std::setw(node_width)
        << (node == nodes.end() ? std::string("-") : node->second);
    auto found = samples.find(rank);
    if (found == samples.end()) {
      out << "(no step yet)\n";
      continue;
    }
    const v1::MetricsSample& r = *found->second;
    out << std::setw(10) << r.step();
    if (r.gpu_memory_total_bytes() <= 0) {
      out << "(no GPU readings)\n";
      continue;
    }
    char memory[48];
    std::snprintf(memory, sizeof(memory), "%.1f / %.1f GiB", r.gpu_memory_used_bytes() / 1073741824.0,
                  r.gpu_memory_total_bytes() / 1073741824.0);
    const std::string ecc = (r.gpu_ecc_corrected() < 0 ? std::string("-") : std::to_string(r.gpu_ecc_corrected())) +
                            "/" +
                            (r.gpu_ecc_uncorrected() < 0 ? std::string("-") : std::to_string(r.gpu_ecc_uncorrected()));
    out << std::setw(7) << known(r.gpu_utilization() * 100, "%.0f%%") << std::setw(22) << memory << std::setw(9)
        << known(r.gpu_power_watts(), "%.0f W") << std::setw(7) << known(r.gpu_temperature_celsius(), "%.0f C")
        << std::setw(12) << ecc << r.gpu_xid_errors()
        << (r.gpu_last_xid() > 0 ? " (last Xid " + std::to_string(r.gpu_last_xid()) + ")" : std::string()) << "\n";
  }
  out << std::right;
}

void PrintReplicas(const v1::Job& j, std::ostream& out) {
  if (!j.has_replicas()) return;
  const v1::Replicas& r = j.replicas();
  auto list = [](const auto& ranks) {
    std::string s;
    for (int32_t rank : ranks) s += (s.empty() ? "" : ",") + std::to_string(rank);
    return s.empty() ? std::string("none") : s;
  };
  out << "replicas:     ";
  if (r.epoch() == 0) {
    out << "waiting for every rank to connect (min " << r.min_replicas() << ")\n";
    return;
  }
  out << r.live_size() << " live (ranks " << list(r.live()) << "), " << r.healing_size() << " healing"
      << (r.healing_size() > 0 ? " (ranks " + list(r.healing()) + ")" : std::string())
      << (r.leaving_size() > 0 ? ", " + std::to_string(r.leaving_size()) + " leaving (ranks " + list(r.leaving()) + ")"
                               : std::string())
      << "; size " << r.size() << ", membership " << r.epoch() << ", min " << r.min_replicas() << "\n";
}

ordered_json CheckpointJson(const v1::Checkpoint& c) {
  return {{"index", c.index()},     {"step", c.step()},       {"type", CheckpointTypeName(FromProto(c).type)},
          {"trigger", c.trigger()}, {"ok", c.ok()},           {"path", c.path()},
          {"bytes", c.bytes()},     {"seconds", c.seconds()}, {"time", FormatTime(c.unix_millis())},
          {"attempt", c.attempt()}, {"error", c.error()}};
}

ordered_json QueueJson(const v1::GetQueueResponse& queue) {
  ordered_json arr = ordered_json::array();
  for (const auto& e : queue.entries()) {
    arr.push_back({{"position", e.position()},
                   {"id", e.id()},
                   {"name", e.name()},
                   {"owner", e.owner()},
                   {"priority_class", e.priority_class()},
                   {"priority", e.priority()},
                   {"num_processes", e.num_processes()},
                   {"resource", e.resource()},
                   {"preemptible", e.preemptible()},
                   {"fair_share_usage", e.fair_share_usage()},
                   {"estimated_start",
                    e.estimated_start_unix_millis() > 0 ? FormatTime(e.estimated_start_unix_millis()) : std::string()},
                   {"reason", e.reason()}});
  }
  return arr;
}

void PrintQueueTable(const v1::GetQueueResponse& queue, std::ostream& out) {
  out << std::left << std::setw(5) << "POS" << std::setw(14) << "ID" << std::setw(12) << "OWNER" << std::setw(10)
      << "PRIORITY" << std::right << std::setw(6) << "PROCS"
      << "  " << std::left << std::setw(6) << "KIND" << std::setw(21) << "ESTIMATED START"
      << "REASON\n";
  for (const auto& e : queue.entries()) {
    out << std::left << std::setw(5) << e.position() << std::setw(14) << e.id() << std::setw(12)
        << (e.owner().empty() ? "-" : e.owner().substr(0, 11)) << std::setw(10)
        << (e.priority_class().empty() ? std::to_string(e.priority()) : e.priority_class()) << std::right
        << std::setw(6) << e.num_processes() << "  " << std::left << std::setw(6) << e.resource() << std::setw(21)
        << (e.estimated_start_unix_millis() > 0 ? FormatTime(e.estimated_start_unix_millis()) : "unknown") << e.reason()
        << "\n";
  }
  // What users and groups use against their quotas ("-": no limit).
  auto of = [](int64_t used, int64_t quota) {
    return std::to_string(used) + "/" + (quota < 0 ? std::string("-") : std::to_string(quota));
  };
  bool header = false;
  for (const auto& u : queue.usage()) {
    if (!header) {
      out << "\n"
          << std::left << std::setw(22) << "IN USE (USED/QUOTA)" << std::setw(12) << "SLOTS" << std::setw(12) << "GPUS"
          << "QUEUED JOBS\n";
      header = true;
    }
    out << std::left << std::setw(22) << ((u.group() ? "group " : "") + u.name()).substr(0, 21) << std::setw(12)
        << of(u.slots(), u.slots_quota()) << std::setw(12) << of(u.gpus(), u.gpus_quota())
        << (u.group() ? "-" : of(u.queued_jobs(), u.queued_jobs_quota())) << "\n";
  }
  // What the server's own hosts have free now (its --slots and --gpus).
  out << "\nFREE: " << queue.free_slots() << " slots, " << queue.free_gpus() << " GPUs\n";
}

std::string Shown(std::string_view text, bool carriage_returns) {
  std::string out;
  out.reserve(text.size());
  auto hex = [&](unsigned char c) { absl::StrAppend(&out, "\\x", absl::Hex(c, absl::kZeroPad2)); };
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if ((c < 0x20 && c != '\n' && c != '\t' && !(c == '\r' && carriage_returns)) || c == 0x7f) {
      hex(c);
    } else if (c == 0xc2 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
               static_cast<unsigned char>(text[i + 1]) <= 0x9f) {
      hex(static_cast<unsigned char>(text[++i]));  // a C1 control, U+0080..U+009F
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  return out;
}

}  // namespace trainyard
