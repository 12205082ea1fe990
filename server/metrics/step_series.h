// StepSeries: the step list (common/step_metrics.h) as the coordinator
// exports it: each number with its family, kind and extra label, and the
// numbers that follow from a sample (compression ratio, model FLOP/s, MFU).
// Shared by a rank's series and a large job's aggregates (ServerMetrics).
#ifndef TRAINYARD_SERVER_METRICS_STEP_SERIES_H_
#define TRAINYARD_SERVER_METRICS_STEP_SERIES_H_

#include <cstddef>
#include <map>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "common/step_metrics.h"
#include "server/metrics/metric_table.h"

namespace trainyard {
namespace step_series {

// The kinds the step list names.
constexpr MetricType kGauge = MetricType::kGauge;
constexpr MetricType kCounter = MetricType::kCounter;
constexpr MetricType kHistogram = MetricType::kHistogram;
constexpr MetricType kNone = MetricType::kGauge;  // with family "": not exported

// How many numbers the step list has.
#define TRAINYARD_STEP_COUNT(...) +1
constexpr size_t kStepNumbers = 0 TRAINYARD_STEP_NUMBERS(TRAINYARD_STEP_COUNT);
#undef TRAINYARD_STEP_COUNT

// Calls f(index, family, kind, label, when, value) for each number of the
// step list, in its order. (`f` may need a lock its caller holds: the
// analysis sees it at the caller.)
template <typename F>
void ForEachNumber(const StepMetrics& m, F&& f) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  size_t index = 0;
#define TRAINYARD_STEP_EACH(type_, name_, init_, family_, kind_, label_, when_, help_) \
  f(index++, family_, kind_, label_, (when_), static_cast<double>(m.name_));
  TRAINYARD_STEP_NUMBERS(TRAINYARD_STEP_EACH)
#undef TRAINYARD_STEP_EACH
  (void)kNone;
}

// `labels` with the list's extra label ("phase=step"; "" for none).
std::map<std::string, std::string> WithLabel(std::map<std::string, std::string> labels, const char* label);

// What follows from a rank's sample, where it applies (`peak_flops`: the
// server's --peak-flops, which wins over the worker's table of devices).
struct Derived {
  std::optional<double> comm_ratio, model_flops_per_second, mfu;
};
Derived DerivedOf(const StepMetrics& m, double peak_flops);

}  // namespace step_series
}  // namespace trainyard

#endif  // TRAINYARD_SERVER_METRICS_STEP_SERIES_H_
