// ElasticSizer: the sizes of elastic jobs (Demand::min_count > 0) — how
// many ranks one starts with, which running ones shrink to make room for the
// head of the queue and by how much, and how far the ones below the size
// they want grow into what is free.
//
// Pure: functions of what they are given, beside FairShare, QuotaLedger and
// Victims. The Scheduler says who is a candidate, keeps the accounts and
// makes the decision.
#ifndef TRAINYARD_SERVER_SCHEDULING_ELASTIC_SIZER_H_
#define TRAINYARD_SERVER_SCHEDULING_ELASTIC_SIZER_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace trainyard {

// A running elastic job as the sizer sees it.
struct ElasticJob {
  std::string id;
  int64_t priority = 0;
  std::chrono::steady_clock::time_point started;
  int size = 0;        // ranks it holds now
  int min_size = 0;    // elastic.min_processes
  int want = 0;        // the size it grows back to
  int shrink_to = -1;  // a shrink in progress goes down to this (-1: none)
  int size_after_shrink() const { return shrink_to >= 0 ? shrink_to : size; }
};

// A job's new size.
struct ElasticResize {
  std::string id;
  int to = 0;
};

// The most ranks in [minimum, count] a job can start with, the largest
// first: `fits(n)` says whether n ranks fit now. 0: not even its minimum.
int StartSize(int count, int minimum, const std::function<bool(int)>& fits);

// The shrinks of `candidates` (running jobs that may give way to the head)
// that free `need` ranks: the lowest priority first, then the one that
// started last, each down to its minimum at most. Empty when shrinking all
// of them frees too little.
std::vector<ElasticResize> PlanShrinks(std::vector<ElasticJob> candidates, int need);

// Whether running job `job` (`full`: its num_processes) may be asked to run
// `to` ranks (`trainctl scale`): an error naming what stands in the way (it
// is not elastic, `to` is out of its bounds, it is being preempted, or it
// should grow while a shrink is under way).
absl::Status CheckScale(const ElasticJob& job, int full, bool preempting, int to);

// How far `jobs` (below the size they want, not shrinking) grow into `free`
// ranks: the highest priority first, then the one that started first; each
// grows by what is left of `free` and of what `allowed(job, more)` (its
// quota: the most of `more` it may take) lets it.
std::vector<ElasticResize> PlanGrowth(std::vector<ElasticJob> jobs, int free,
                                      const std::function<int(const ElasticJob&, int)>& allowed);

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_SCHEDULING_ELASTIC_SIZER_H_
