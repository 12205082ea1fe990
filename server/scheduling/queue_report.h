// QueueReport: what the Scheduler's queue looks like to the people waiting
// in it — why a job waits, the queue in order with estimated starts, and
// what each user and group uses. A read-only view of one Scheduler at one
// moment; the Scheduler keeps the order and the decisions.
//
// Not thread-safe, like the Scheduler it reads.
#ifndef TRAINYARD_SERVER_SCHEDULING_QUEUE_REPORT_H_
#define TRAINYARD_SERVER_SCHEDULING_QUEUE_REPORT_H_

#include <map>
#include <string>
#include <vector>

#include "server/scheduling/scheduler.h"

namespace trainyard {

class QueueReport {
 public:
  using Time = Scheduler::Time;

  // `scheduler` must outlive the report.
  explicit QueueReport(const Scheduler& scheduler) : s_(scheduler) {}

  // Why a waiting job waits, as of the last Schedule; "" when it is not
  // queued, was not looked at yet, or backs off (its own reason says).
  std::string WhyWaiting(const std::string& id) const;
  // The queue in order, with reasons and estimated starts: the entries of
  // the jobs `shown` accepts (asked in queue order; all when null). Every
  // job counts in the positions and estimates, shown or not.
  std::vector<Scheduler::QueueEntry> Queue(Time now,
                                           const std::function<bool(const std::string& id)>& shown = nullptr) const;
  // Every user and group with jobs running or waiting, or usage left.
  std::map<std::string, Scheduler::Usage> UserUsage(Time now) const;
  std::map<std::string, Scheduler::Usage> GroupUsage() const;

 private:
  const Scheduler& s_;
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_SCHEDULING_QUEUE_REPORT_H_
