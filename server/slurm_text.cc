#include "server/slurm_text.h"

#include <algorithm>
#include <string_view>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
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

std::string ScontrolField(const std::string& output, const std::string& key) {
  const std::string prefix = key + "=";
  for (const auto field : absl::StrSplit(output, absl::ByAnyChar(" \n"), absl::SkipWhitespace())) {
    if (absl::StartsWith(field, prefix)) return std::string(field.substr(prefix.size()));
  }
  return "";
}

}  // namespace trainyard
