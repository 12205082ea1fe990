#include "server/metrics/step_series.h"

#include <cmath>

namespace trainyard {
namespace step_series {

std::map<std::string, std::string> WithLabel(std::map<std::string, std::string> labels, const char* label) {
  if (const std::string kv = label; !kv.empty()) labels[kv.substr(0, kv.find('='))] = kv.substr(kv.find('=') + 1);
  return labels;
}

Derived DerivedOf(const StepMetrics& m, double peak_flops) {
  Derived d;
  if (m.comm_fp32_bytes > 0) {
    d.comm_ratio = static_cast<double>(m.comm_wire_bytes) / static_cast<double>(m.comm_fp32_bytes);
  }
  if (m.model_flops > 0 && m.step_seconds > 0) {
    d.model_flops_per_second = m.model_flops / m.step_seconds;
    if (const double mfu = ModelFlopsUtilization(m, peak_flops); std::isfinite(mfu)) d.mfu = mfu;
  }
  return d;
}

}  // namespace step_series
}  // namespace trainyard
