#include "common/progress_pattern.h"

#include <re2/re2.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace trainyard {

absl::StatusOr<ProgressPattern> ProgressPattern::Compile(const std::string& pattern) {
  RE2::Options options;
  options.set_log_errors(false);
  auto re = std::make_shared<const RE2>(pattern, options);
  if (!re->ok()) return absl::InvalidArgumentError(absl::StrCat("not a regular expression (RE2): ", re->error()));
  ProgressPattern p;
  for (const auto& [name, index] : re->NamedCapturingGroups()) p.groups_.emplace_back(name, index);
  bool has_step = false;
  for (const auto& g : p.groups_) has_step |= g.first == "step";
  if (!has_step) {
    return absl::InvalidArgumentError(
        "needs a group named step, e.g. 'iter (?P<step>\\d+): loss (?P<loss>[-+.eE\\d]+)'");
  }
  if (p.groups_.size() > 16) return absl::InvalidArgumentError("at most 16 named groups");
  p.re_ = std::move(re);
  return p;
}

std::optional<StepMetrics> ProgressPattern::Match(std::string_view line) const {
  const int n = re_->NumberOfCapturingGroups() + 1;
  std::vector<re2::StringPiece> found(static_cast<size_t>(n));
  if (!re_->Match(re2::StringPiece(line.data(), line.size()), 0, line.size(), RE2::UNANCHORED, found.data(), n)) {
    return std::nullopt;
  }
  StepMetrics m;
  bool has_step = false;
  for (const auto& [name, index] : groups_) {
    const std::string text(found[static_cast<size_t>(index)].data(), found[static_cast<size_t>(index)].size());
    if (text.empty()) continue;
    char* end = nullptr;
    if (name == "step") {
      const long long step = std::strtoll(text.c_str(), &end, 10);
      if (*end != '\0' || step < 0) return std::nullopt;
      m.step = step;
      has_step = true;
      continue;
    }
    const double v = std::strtod(text.c_str(), &end);
    if (*end != '\0') continue;  // not a number: left out
    if (name == "loss") {
      m.loss = v;
    } else {
      m.values[name] = v;
    }
  }
  if (!has_step) return std::nullopt;
  return m;
}

}  // namespace trainyard
