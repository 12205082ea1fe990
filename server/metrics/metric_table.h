// The Prometheus families the coordinator exports, declared once: name,
// type, help, labels and histogram buckets. ServerMetrics registers every
// family from this table, and docs/reference/metrics.md is checked against it
// (tests/server/metrics/metric_table_test.cc). The per-step families come from the
// list of step numbers (common/step_metrics.h): a number declared there with
// a family is in this table without another line.
#ifndef TRAINYARD_SERVER_METRICS_METRIC_TABLE_H_
#define TRAINYARD_SERVER_METRICS_METRIC_TABLE_H_

#include <string>
#include <vector>

namespace trainyard {

enum class MetricType { kCounter, kGauge, kHistogram };

struct MetricFamily {
  std::string name;
  MetricType type;
  std::string help;
  std::vector<std::string> labels;  // label names
  std::vector<double> buckets;      // histograms: upper bounds
  // The coordinator process's own (server/api/coordinator.h: leader or
  // standby), exported on a standby too: not ServerMetrics'.
  bool coordinator = false;
};

// Every family, each once, in the order the docs list them.
const std::vector<MetricFamily>& MetricTable();
// The family named `name`; aborts on a name the table lacks (a programming
// error, caught by any test that records the family).
const MetricFamily& MetricNamed(const std::string& name);
const char* MetricTypeName(MetricType type);

// Buckets shared by several families.
const std::vector<double>& StepSecondsBuckets();
const std::vector<double>& RecoverySecondsBuckets();

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_METRICS_METRIC_TABLE_H_
