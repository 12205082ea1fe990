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
    return p_.Submit(spec, Ownership{owner, "", priority, ""});
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
  std::vector<QueuedJob> q = QueueView(p_.scheduler, p_.jobs, policy_, ListScope{}, p_.clock.SteadyNow(), wall).jobs;
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
  q = QueueView(p_.scheduler, p_.jobs, policy_, ListScope{{"bob"}, {}}, p_.clock.SteadyNow(), wall).jobs;
  ASSERT_EQ(q.size(), 1u);
  EXPECT_EQ(q[0].job.id, b.record.id);
}

// A page: the jobs after the first `skip` in scope, with their places and
// estimates in the whole queue, and how many are in scope.
TEST_F(QueueViewTest, APageOfTheQueueKeepsPositionsAndCountsTheScope) {
  Submit("max_steps: 10\nnum_processes: 4\n", 0, "alice");  // runs
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) {
    ids.push_back(Submit("max_steps: 10\nnum_processes: 1\n", 0, i % 2 == 0 ? "bob" : "alice").record.id);
  }
  p_.lifecycle.TrySchedule();
  const auto wall = std::chrono::system_clock::now();
  const QueuePage all = QueueView(p_.scheduler, p_.jobs, policy_, ListScope{}, p_.clock.SteadyNow(), wall);
  ASSERT_EQ(all.jobs.size(), 5u);
  EXPECT_EQ(all.total, 5);
  const QueuePage page = QueueView(p_.scheduler, p_.jobs, policy_, ListScope{}, p_.clock.SteadyNow(), wall, 2, 2);
  EXPECT_EQ(page.total, 5);
  ASSERT_EQ(page.jobs.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(page.jobs[i].job.id, all.jobs[2 + i].job.id);
    EXPECT_EQ(page.jobs[i].position, all.jobs[2 + i].position);
    EXPECT_EQ(page.jobs[i].reason, all.jobs[2 + i].reason);
    EXPECT_EQ(page.jobs[i].estimated_start_unix_millis, all.jobs[2 + i].estimated_start_unix_millis);
  }
  // Bob's second page of one: his third job, at its place in everyone's queue.
  const QueuePage bobs =
      QueueView(p_.scheduler, p_.jobs, policy_, ListScope{{"bob"}, {}}, p_.clock.SteadyNow(), wall, 2, 1);
  EXPECT_EQ(bobs.total, 3);
  ASSERT_EQ(bobs.jobs.size(), 1u);
  EXPECT_EQ(bobs.jobs[0].job.owner, "bob");
  int bob_seen = 0;
  for (const QueuedJob& q : all.jobs) {
    if (q.job.owner == "bob" && ++bob_seen == 3) EXPECT_EQ(bobs.jobs[0].position, q.position);
  }
  EXPECT_TRUE(QueueView(p_.scheduler, p_.jobs, policy_, ListScope{}, p_.clock.SteadyNow(), wall, 5, 10).jobs.empty());
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
