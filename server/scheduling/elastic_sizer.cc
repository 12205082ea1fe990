#include "server/scheduling/elastic_sizer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace trainyard {

int StartSize(int count, int minimum, const std::function<bool(int)>& fits) {
  for (int n = count; n >= minimum; --n) {
    if (fits(n)) return n;
  }
  return 0;
}

std::vector<ElasticResize> PlanShrinks(std::vector<ElasticJob> candidates, int need) {
  int can_free = 0;
  for (const ElasticJob& j : candidates) can_free += std::max(0, j.size_after_shrink() - j.min_size);
  if (can_free < need) return {};
  std::sort(candidates.begin(), candidates.end(), [](const ElasticJob& a, const ElasticJob& b) {
    if (a.priority != b.priority) return a.priority < b.priority;
    if (a.started != b.started) return a.started > b.started;
    return a.id < b.id;
  });
  std::vector<ElasticResize> out;
  for (const ElasticJob& j : candidates) {
    if (need <= 0) break;
    const int give = std::min(j.size_after_shrink() - j.min_size, need);
    if (give <= 0) continue;
    need -= give;
    out.push_back({j.id, j.size_after_shrink() - give});
  }
  return out;
}

std::vector<ElasticResize> PlanGrowth(std::vector<ElasticJob> jobs, int free,
                                      const std::function<int(const ElasticJob&, int)>& allowed) {
  std::sort(jobs.begin(), jobs.end(), [](const ElasticJob& a, const ElasticJob& b) {
    if (a.priority != b.priority) return a.priority > b.priority;
    if (a.started != b.started) return a.started < b.started;
    return a.id < b.id;
  });
  std::vector<ElasticResize> out;
  for (const ElasticJob& j : jobs) {
    const int more = allowed(j, std::min(j.want - j.size, free));
    if (more <= 0) continue;
    free -= more;
    out.push_back({j.id, j.size + more});
  }
  return out;
}

absl::Status CheckScale(const ElasticJob& job, int full, bool preempting, int to) {
  const std::string& id = job.id;
  if (job.min_size == 0) {
    return absl::FailedPreconditionError(absl::StrCat("job ", id, " is not elastic (elastic.min_processes)"));
  }
  if (to < job.min_size || to > full) {
    return absl::InvalidArgumentError(absl::StrCat("job ", id, " runs with between ", job.min_size,
                                                   " (elastic.min_processes) and ", full,
                                                   " (num_processes) ranks; asked for ", to));
  }
  if (preempting) return absl::FailedPreconditionError(absl::StrCat("job ", id, " is being preempted"));
  if (to > job.size && job.shrink_to >= 0) {
    return absl::FailedPreconditionError(absl::StrCat("job ", id, " is shrinking to ", job.shrink_to,
                                                      " ranks; scale it again once its ranks have left"));
  }
  return absl::OkStatus();
}

}  // namespace trainyard
