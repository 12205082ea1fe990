// The queue as people see it (trainctl queue, trainctl usage) and as the
// per-class metrics count it: the scheduler's order, reasons and estimates joined with the
// jobs' records. Not thread-safe: the JobManager calls these under its mutex.
#ifndef TRAINYARD_SERVER_JOBS_QUEUE_VIEW_H_
#define TRAINYARD_SERVER_JOBS_QUEUE_VIEW_H_

#include <chrono>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/policy.h"
#include "server/auth/access.h"
#include "server/jobs/job_handlers.h"
#include "server/jobs/job_table.h"
#include "server/scheduling/scheduler.h"

namespace trainyard {

// The waiting jobs in `scope`, in the order they start, at `now` (`wall`:
// the same moment on the system clock, for estimated starts): the `count`
// after the first `skip` of them, and how many there are in all.
QueuePage QueueView(const Scheduler& scheduler, JobTable& jobs, const Policy& policy, const ListScope& scope,
                    std::chrono::steady_clock::time_point now, std::chrono::system_clock::time_point wall,
                    int32_t skip = 0, int32_t count = INT32_MAX);

// What each user and group in `scope` has in use, queued and may use (its
// quotas), with `by`'s own row and the groups `by` belongs to.
std::vector<QuotaUse> UsageView(const Scheduler& scheduler, const Policy& policy, const ListScope& scope,
                                const Caller& by);

// Queued jobs and running ranks per priority class: every class of
// `policy`, and the value of a job's priority no class has any more.
std::map<std::string, std::pair<int, int>> ClassCounts(const Policy& policy, JobTable& jobs);

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_JOBS_QUEUE_VIEW_H_
