// The RankSupervisor contract, run over every fault-tolerance mode the
// coordinator knows (MakeRankSupervisor): whatever a mode decides, it names
// only the attempt's ranks, never launches a rank of an attempt that is
// stopping, keeps its lead among the ranks, uses no more restarts than the
// spec allows, and resizes only when it says it is elastic. Each mode's own
// rules are tested beside it (replicas_test, membership_test).
#include "server/health/rank_supervisor.h"

#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include <algorithm>
#include <memory>
#include <string>

#include "common/clock.h"
#include "server/jobs/active_job.h"
#include "server/jobs/fault_tolerance_modes.h"
#include "server/metrics/server_metrics.h"

namespace trainyard {
namespace {

constexpr int32_t kWorld = 4;

struct Mode {
  std::string name;
  std::string fault_tolerance;  // the spec's fault_tolerance section
};

class RankSupervisorContract : public ::testing::TestWithParam<Mode> {
 protected:
  void SetUp() override {
    auto spec = ParseJobSpec(absl_spec());
    ASSERT_TRUE(spec.ok()) << spec.status();
    JobRecord r;
    r.id = "job-1";
    r.num_processes = kWorld;
    r.attempt = 1;
    job_ = std::make_unique<ActiveJob>(r, *spec, &metrics_, &clock_);
    Launcher::Traits traits;
    traits.on_this_host = true;
    traits.replaces_ranks = true;
    sup_ = MakeRankSupervisor(*job_, traits, clock_, kWorld, /*adopting=*/false);
    ASSERT_NE(sup_, nullptr);
  }
  std::string absl_spec() const {
    return "max_steps: 10\nnum_processes: 4\nmax_restarts: 3\ndistributed_type: DDP\nfault_tolerance: " +
           GetParam().fault_tolerance + "\n";
  }
  // Every rank an action names is one of the attempt's.
  static void ExpectInRange(const RankActions& a, const std::string& when) {
    auto in = [](int32_t r) { return r >= 0 && r < kWorld; };
    for (int32_t r : a.launch) EXPECT_TRUE(in(r)) << when << ": launches rank " << r;
    for (int32_t r : a.kill) EXPECT_TRUE(in(r)) << when << ": kills rank " << r;
    for (int32_t r : a.to) EXPECT_TRUE(in(r)) << when << ": tells rank " << r;
    if (a.parked >= 0) EXPECT_TRUE(in(a.parked)) << when;
    if (a.command) EXPECT_FALSE(a.to.empty()) << when << ": a command for nobody";
  }
  void HelloAll() {
    for (int32_t r = 0; r < kWorld; ++r) {
      ExpectInRange(sup_->OnHello(r, "10.0.0." + std::to_string(r), 29500 + r, {}), "hello");
    }
  }

  FakeClock clock_;
  ServerMetrics metrics_{std::make_shared<prometheus::Registry>()};
  std::unique_ptr<ActiveJob> job_;
  std::unique_ptr<RankSupervisor> sup_;
};

TEST_P(RankSupervisorContract, ItsRanksAreTheAttemptsAndItsLeadOneOfThem) {
  const int32_t running = sup_->running(kWorld);
  EXPECT_GE(running, 1);
  EXPECT_LE(running, kWorld);
  EXPECT_LE(sup_->size(kWorld), kWorld);
  HelloAll();
  const std::vector<int32_t> training = sup_->TrainingRanks(kWorld);
  EXPECT_FALSE(training.empty()) << "every rank said hello, yet nobody trains";
  EXPECT_TRUE(std::is_sorted(training.begin(), training.end()));
  for (int32_t r : training) EXPECT_TRUE(r >= 0 && r < kWorld) << r;
  EXPECT_EQ(sup_->training_size(kWorld), static_cast<int32_t>(training.size()));
  EXPECT_TRUE(std::find(training.begin(), training.end(), sup_->lead()) != training.end())
      << "lead " << sup_->lead() << " does not train";
  if (std::optional<ReplicaStatus> s = sup_->Status()) {
    EXPECT_EQ(s->membership.ranks, training);
  }
}

TEST_P(RankSupervisorContract, NothingOutsideTheAttemptCanBeEvicted) {
  HelloAll();
  EXPECT_FALSE(sup_->Evictable(-1));
  EXPECT_FALSE(sup_->Evictable(kWorld));
  for (int32_t r = 0; r < kWorld; ++r) {
    if (sup_->Evictable(r)) ExpectInRange(sup_->Evict(r, "evicted as a test"), "evict");
  }
}

TEST_P(RankSupervisorContract, AStoppingAttemptLaunchesNoReplacement) {
  HelloAll();
  const AttemptCondition stopping{/*live=*/false, /*stopping=*/true, /*stop_requested=*/true};
  for (int32_t r = 0; r < kWorld; ++r) {
    if (std::optional<ExitDecision> d = sup_->OnExit(r, /*finished=*/false, "killed by signal 9", stopping)) {
      EXPECT_TRUE(d->actions.launch.empty()) << "rank " << r << " replaced while the attempt stops";
      ExpectInRange(d->actions, "exit");
    }
  }
}

TEST_P(RankSupervisorContract, ALiveAttemptsLostRankIsTheModesOrTheAttempts) {
  HelloAll();
  const AttemptCondition live{/*live=*/true, /*stopping=*/false, /*stop_requested=*/false};
  if (std::optional<ExitDecision> d = sup_->OnExit(1, /*finished=*/false, "killed by signal 9", live)) {
    ExpectInRange(d->actions, "exit");
    EXPECT_TRUE(d->actions.fail || !d->actions.launch.empty() || d->actions.parked >= 0)
        << "the mode took the end and did nothing";
  }
}

TEST_P(RankSupervisorContract, RestartsAreNeverMoreThanTheSpecAllows) {
  for (int n : {0, 1, 3}) {
    EXPECT_GE(sup_->max_restarts(n), 0);
    EXPECT_LE(sup_->max_restarts(n), n);
  }
}

TEST_P(RankSupervisorContract, OnlyAnElasticGroupResizes) {
  HelloAll();
  const std::optional<RankActions> a = sup_->Resize(kWorld / 2, "shrunk as a test");
  EXPECT_EQ(a.has_value(), sup_->elastic());
  if (a) ExpectInRange(*a, "resize");
}

INSTANTIATE_TEST_SUITE_P(Modes, RankSupervisorContract,
                         ::testing::Values(Mode{"whole_group", "{mode: whole_group}"},
                                           Mode{"fail_fast", "{mode: fail_fast}"},
                                           Mode{"replica", "{mode: replica, min_replicas: 1}"}),
                         [](const ::testing::TestParamInfo<Mode>& i) { return i.param.name; });

}  // namespace
}  // namespace trainyard
