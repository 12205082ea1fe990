// QueueView and ClassCounts: the queue as `trainctl queue` and the
// per-class metrics see it.
#include "server/jobs/queue_view.h"

#include <gtest/gtest.h>

#include "tests/server/coordinator_parts.h"

namespace trainyard {
namespace {

class QueueViewTest : public ::testing::Test {
 protected:
  QueueViewTest() {
    policy_.priority_classes = {{"low", 0}, {"high", 1000}};
    policy_.default_priority_class = "low";
  }
  ActiveJob& Submit(const std::string& spec, int64_t priority, const std::string& owner) {
    ActiveJob& job = p_.Submit(spec);
    job.record.priority = priority;
    job.record.owner = owner;
    return job;
  }
  CoordinatorParts p_;
  Policy policy_;
};

TEST_F(QueueViewTest, TheWaitingJobsInOrderWithReasonsAndClasses) {
  ActiveJob& running = Submit("max_steps: 10\nnum_processes: 4\n", 0, "alice");
  ActiveJob& a = Submit("max_steps: 10\nnum_processes: 2\n", 0, "alice");
  ActiveJob& b = Submit("max_steps: 10\nnum_processes: 1\n", 0, "bob");
  p_.lifecycle.TrySchedule();  // the reasons of the last decision
  const auto wall = std::chrono::system_clock::now();
  // The running job ends in 60 s: a (first in order) can start then.
  p_.scheduler.SetExpectedEnd(running.record.id, p_.clock.SteadyNow() + std::chrono::seconds(60));
  std::vector<QueuedJob> q = QueueView(p_.scheduler, p_.jobs, policy_, ListScope{}, p_.clock.SteadyNow(), wall);
  ASSERT_EQ(q.size(), 2u);
  EXPECT_EQ(q[0].job.id, a.record.id);
  EXPECT_EQ(q[0].position, 1);
  EXPECT_EQ(q[0].priority_class, "low");
  EXPECT_TRUE(q[0].local);
  EXPECT_EQ(q[0].reason, "waiting: 0 of this host's slots free; this job needs 2");
  EXPECT_EQ(q[0].estimated_start_unix_millis,
            std::chrono::duration_cast<std::chrono::milliseconds>((wall + std::chrono::seconds(60)).time_since_epoch())
                .count());
  EXPECT_EQ(q[1].job.id, b.record.id);
  // A scope shows only the jobs it covers.
  q = QueueView(p_.scheduler, p_.jobs, policy_, ListScope{{"bob"}, {}}, p_.clock.SteadyNow(), wall);
  ASSERT_EQ(q.size(), 1u);
  EXPECT_EQ(q[0].job.id, b.record.id);
}

TEST_F(QueueViewTest, ClassCountsCountQueuedJobsAndRunningRanks) {
  Submit("max_steps: 10\nnum_processes: 3\n", 1000, "alice");
  Submit("max_steps: 10\nnum_processes: 2\n", 0, "bob");
  Submit("max_steps: 10\nnum_processes: 2\n", 7, "carol");  // a class since removed
  auto counts = ClassCounts(policy_, p_.jobs);
  EXPECT_EQ(counts["high"], std::make_pair(0, 3));
  EXPECT_EQ(counts["low"], std::make_pair(1, 0));
  EXPECT_EQ(counts["7"], std::make_pair(1, 0));
}

}  // namespace
}  // namespace trainyard
