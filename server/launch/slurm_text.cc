#include "server/launch/slurm_text.h"

#include <algorithm>
#include <set>
#include <string_view>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace trainyard {

int64_t ParseSlurmDuration(const std::string& text) {
  std::string rest = text;
  int64_t days = 0;
  if (const size_t dash = rest.find('-'); dash != std::string::npos) {
    if (!absl::SimpleAtoi(rest.substr(0, dash), &days) || days < 0) return -1;
    rest = rest.substr(dash + 1);
  }
  std::vector<std::string> parts = absl::StrSplit(rest, ':');
  if (parts.empty() || parts.size() > 3) return -1;
  std::vector<int64_t> v;
  for (const std::string& p : parts) {
    int64_t x = 0;
    if (p.empty() || !std::all_of(p.begin(), p.end(), ::isdigit) || !absl::SimpleAtoi(p, &x)) return -1;
    v.push_back(x);
  }
  int64_t seconds = 0;
  if (text.find('-') != std::string::npos) {
    // days-hours[:minutes[:seconds]]
    while (v.size() < 3) v.push_back(0);
    seconds = v[0] * 3600 + v[1] * 60 + v[2];
  } else if (v.size() == 3) {
    seconds = v[0] * 3600 + v[1] * 60 + v[2];
  } else if (v.size() == 2) {
    seconds = v[0] * 60 + v[1];
  } else {
    seconds = v[0] * 60;  // minutes
  }
  return days * 86400 + seconds;
}

bool SlurmStateEnded(const std::string& state) {
  static const std::set<std::string> kEnded = {"COMPLETED", "FAILED",       "CANCELLED",     "TIMEOUT",
                                               "NODE_FAIL", "PREEMPTED",    "OUT_OF_MEMORY", "BOOT_FAIL",
                                               "DEADLINE",  "SPECIAL_EXIT", "REVOKED"};
  return kEnded.count(state) > 0;
}

std::string SlurmStateNote(const std::string& slurm_id, bool ran, bool stop_sent, const std::string& state,
                           const std::string& reason, const std::string& nodes) {
  const std::string job = "Slurm job " + slurm_id;
  const std::string why = reason.empty() || reason == "None" ? "" : " (" + reason + ")";
  if (state == "RUNNING") return ran ? "" : absl::StrCat(job, " runs", nodes.empty() ? "" : " on " + nodes);
  if (state == "PENDING") return ran ? absl::StrCat(job, " was requeued by Slurm", why) : "";
  if (state.rfind("REQUEUE", 0) == 0) return absl::StrCat(job, " was requeued by Slurm", why);
  if (stop_sent) return "";
  if (state == "CANCELLED") return absl::StrCat(job, " was cancelled outside Trainyard (scancel)", why);
  if (state == "TIMEOUT") return absl::StrCat(job, " reached its time limit (slurm.time_limit)", why);
  if (state == "PREEMPTED") return absl::StrCat(job, " was preempted by Slurm", why);
  if (state == "NODE_FAIL") return absl::StrCat(job, " lost a node (NODE_FAIL", nodes.empty() ? "" : ": " + nodes, ")");
  if (SlurmStateEnded(state) && state != "COMPLETED" && state != "FAILED") {
    return absl::StrCat(job, " ended ", state, why);
  }
  return "";
}

std::string ScontrolField(const std::string& output, const std::string& key) {
  const std::string prefix = key + "=";
  for (const auto field : absl::StrSplit(output, absl::ByAnyChar(" \n"), absl::SkipWhitespace())) {
    if (absl::StartsWith(field, prefix)) return std::string(field.substr(prefix.size()));
  }
  return "";
}

}  // namespace trainyard
