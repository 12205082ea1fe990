// ProgressPattern: a script job's `script.progress`, an RE2 regular
// expression with named groups that reads progress from the lines a script
// prints (for scripts that do not call trainyard.report): `step` (required,
// an integer) becomes the step, `loss` the loss, and any other named group
// a named value (trainyard_job_value{name}). E.g. for nanoGPT's
// "iter 10: loss 3.2101, time 51.20ms":
//
//   iter (?P<step>\d+): loss (?P<loss>[-+.eE\d]+)
#ifndef TRAINYARD_COMMON_PROGRESS_PATTERN_H_
#define TRAINYARD_COMMON_PROGRESS_PATTERN_H_

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/step_metrics.h"

namespace re2 {
class RE2;
}

namespace trainyard {

class ProgressPattern {
 public:
  // Refuses, saying why, a pattern RE2 does not compile or without a
  // `step` group.
  static absl::StatusOr<ProgressPattern> Compile(const std::string& pattern);

  // The numbers a line gives (step, loss, named values; the rest of the
  // StepMetrics as initialized), or nullopt when the line does not match,
  // or its step is not an integer. Searches anywhere in the line.
  std::optional<StepMetrics> Match(std::string_view line) const;

 private:
  std::shared_ptr<const re2::RE2> re_;
  std::vector<std::pair<std::string, int>> groups_;  // name, index
};

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_PROGRESS_PATTERN_H_
