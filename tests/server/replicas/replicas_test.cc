// The coordinator's side of fault_tolerance.mode replica, through
// WorkerSessions and JobLifecycle with stand-in workers (their channels) and
// a launcher that records what it is asked: memberships sent, a lost rank
// replaced while the others go on, heals, evictions, the first live member
// standing for the group, mode whole_group unchanged, and mode fail_fast.
#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>

#include "absl/strings/str_join.h"
#include "tests/server/coordinator_parts.h"

namespace trainyard {
namespace {

using Ranks = std::vector<int32_t>;

constexpr const char* kReplicaSpec =
    "max_steps: 10\nnum_processes: 3\nmax_restarts: 3\ndistributed_type: DDP\n"
    "fault_tolerance: {mode: replica, min_replicas: 2}\n";

class ReplicasTest : public ::testing::Test {
 protected:
  // Rank `rank` attaches as its hello says (its store at 10.0.0.<rank>:<29500 + rank>).
  std::shared_ptr<WorkerChannel> Attach(const ActiveJob& job, int32_t rank) {
    auto w = p_.workers.Attach(job.record.id, rank, job.record.attempt, job.record.worker_token,
                               "10.0.0." + std::to_string(rank), 0, 29500 + rank);
    EXPECT_TRUE(w.ok()) << w.status();
    return w.ok() ? w->channel : nullptr;
  }
  // Every rank of the job's attempt attaches; channels by rank.
  std::map<int32_t, std::shared_ptr<WorkerChannel>> AttachAll(const ActiveJob& job) {
    std::map<int32_t, std::shared_ptr<WorkerChannel>> channels;
    for (int32_t r = 0; r < job.record.num_processes; ++r) channels[r] = Attach(job, r);
    return channels;
  }
  // The memberships waiting in `channel` (other commands are dropped).
  static std::vector<MembershipView> Memberships(WorkerChannel& channel) {
    std::vector<MembershipView> out;
    WorkerCommand cmd;
    while (channel.Pop(&cmd, std::chrono::milliseconds(0))) {
      if (cmd.kind == WorkerCommand::Kind::kMembership) out.push_back(*cmd.membership);
    }
    return out;
  }
  std::vector<std::string> Events(const std::string& id) {
    std::vector<std::string> out;
    const absl::StatusOr<std::vector<JobEvent>> events = p_.jobs.Events(id);
    EXPECT_TRUE(events.ok()) << events.status();
    for (const JobEvent& e : *events) out.push_back(e.reason);
    return out;
  }
  bool HasEvent(const std::string& id, const std::string& text) {
    for (const std::string& e : Events(id)) {
      if (e == text) return true;
    }
    ADD_FAILURE() << "no event \"" << text << "\" in:\n" << absl::StrJoin(Events(id), "\n");
    return false;
  }
  // The value of the scrape's line that starts with `series`; -1 when none.
  double Value(const std::string& series) {
    const std::string text = prometheus::TextSerializer().Serialize(p_.metrics.Collect());
    const size_t at = text.find("\n" + series + " ");
    if (at == std::string::npos) return -1;
    return std::stod(text.substr(at + series.size() + 2));
  }

  CoordinatorParts p_;
};

TEST_F(ReplicasTest, TheFirstMembershipGoesToEveryRankOnceAllHaveConnected) {
  ActiveJob& job = p_.Submit(kReplicaSpec);
  auto c0 = Attach(job, 0);
  auto c1 = Attach(job, 1);
  EXPECT_TRUE(Memberships(*c0).empty());  // rank 2 is awaited
  auto c2 = Attach(job, 2);
  EXPECT_EQ(job.record.state, JobState::kRunning);
  for (auto* c : {c0.get(), c1.get(), c2.get()}) {
    std::vector<MembershipView> got = Memberships(*c);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].epoch, 1);
    EXPECT_EQ(got[0].ranks, (Ranks{0, 1, 2}));
    EXPECT_EQ(got[0].store_addr, "10.0.0.0");
    EXPECT_EQ(got[0].store_port, 29500);
  }
  EXPECT_TRUE(HasEvent(job.record.id, "membership 1: ranks 0-2 (all 3 ranks connected)"));
  const std::string id = job.record.id;
  EXPECT_EQ(Value("trainyard_job_replicas{job_id=\"" + id + "\",state=\"live\"}"), 3);
  EXPECT_EQ(Value("trainyard_job_replicas{job_id=\"" + id + "\",state=\"healing\"}"), 0);
  EXPECT_EQ(Value("trainyard_job_world_size{job_id=\"" + id + "\"}"), 3);
  EXPECT_EQ(Value("trainyard_job_membership_epoch{job_id=\"" + id + "\"}"), 1);
  EXPECT_EQ(Value("trainyard_job_heals_total{job_id=\"" + id + "\"}"), 0);
}

TEST_F(ReplicasTest, ADeadReplicaIsReplacedWhileTheOthersTrainOnAndHeals) {
  ActiveJob& job = p_.Submit(kReplicaSpec);
  const std::string id = job.record.id;
  auto c = AttachAll(job);
  for (auto& [r, ch] : c) Memberships(*ch);

  p_.workers.Exit(RankExit::Killed(id, 1, 1, 9));
  EXPECT_EQ(job.record.state, JobState::kRunning);
  EXPECT_TRUE(p_.local.stopped().empty());  // the group is not stopped
  EXPECT_FALSE(job.attempt->failed());
  for (int32_t r : {0, 2}) {
    std::vector<MembershipView> got = Memberships(*c[r]);
    ASSERT_EQ(got.size(), 1u) << r;
    EXPECT_EQ(got[0].epoch, 2);
    EXPECT_EQ(got[0].ranks, (Ranks{0, 2}));
  }
  EXPECT_TRUE(HasEvent(id, "membership 2: ranks 0,2 (rank 1 lost: killed by signal 9 (Killed))"));
  // The replacement: the same rank, attempt and token.
  ASSERT_EQ(p_.local.relaunched().size(), 1u);
  EXPECT_EQ(p_.local.relaunched()[0].second, 1);
  EXPECT_EQ(p_.local.relaunched()[0].first.attempt, 1);
  EXPECT_EQ(p_.local.relaunched()[0].first.token, job.record.worker_token);
  EXPECT_EQ(Value("trainyard_job_replicas{job_id=\"" + id + "\",state=\"live\"}"), 2);
  EXPECT_EQ(Value("trainyard_job_replicas{job_id=\"" + id + "\",state=\"healing\"}"), 1);
  EXPECT_EQ(Value("trainyard_job_world_size{job_id=\"" + id + "\"}"), 2);

  // It connects as rank 1 and joins; its first commit heals it.
  p_.clock.Advance(std::chrono::milliseconds(1500));
  c[1] = Attach(job, 1);
  for (int32_t r : {0, 2, 1}) {
    std::vector<MembershipView> got = Memberships(*c[r]);
    ASSERT_EQ(got.size(), 1u) << r;
    EXPECT_EQ(got[0].epoch, 3);
    EXPECT_EQ(got[0].ranks, (Ranks{0, 2, 1}));
  }
  EXPECT_TRUE(HasEvent(id, "membership 3: ranks 0,2,1 (rank 1 joined: its replacement connected)"));
  p_.workers.Replica(id, 1, 1, {ReplicaReport::Kind::kCommitted, 3, 6, "", 0.3, true, 4100000});
  EXPECT_TRUE(HasEvent(id, "rank 1 healed in 1.5 s (4.1 MB from a peer)"));
  EXPECT_EQ(Value("trainyard_job_heals_total{job_id=\"" + id + "\"}"), 1);
  EXPECT_EQ(Value("trainyard_job_heal_seconds_count{job_id=\"" + id + "\"}"), 1);
  EXPECT_EQ(Value("trainyard_job_membership_epoch{job_id=\"" + id + "\"}"), 3);
  EXPECT_EQ(Value("trainyard_job_replicas{job_id=\"" + id + "\",state=\"healing\"}"), 0);

  // Every rank, the replacement included, trains to the end: the job succeeds.
  for (int32_t r = 0; r < 3; ++r) p_.workers.Result(id, 1, r, WorkerOutcome::kSucceeded, "");
  for (int32_t r = 0; r < 3; ++r) p_.workers.Exit(RankExit::Exited(id, 1, r, 0));
  EXPECT_EQ(p_.StateOf(id), JobState::kSucceeded);
  // `job` has ended (no longer active): its stored record says it was never restarted.
  auto record = p_.jobs.Record(id);
  ASSERT_TRUE(record.ok()) << record.status();
  EXPECT_EQ(record->attempt, 1);
}

TEST_F(ReplicasTest, AReplicaThatFailsByItselfIsReplaced) {
  ActiveJob& job = p_.Submit(kReplicaSpec);
  const std::string id = job.record.id;
  AttachAll(job);
  p_.workers.Result(id, 1, 2, WorkerOutcome::kFailed, "CUDA error: an illegal memory access");
  EXPECT_FALSE(job.attempt->failed());
  EXPECT_TRUE(HasEvent(id, "rank 2 failed: CUDA error: an illegal memory access"));
  p_.workers.Exit(RankExit::Exited(id, 1, 2, 1));
  EXPECT_FALSE(job.attempt->failed());
  EXPECT_TRUE(p_.local.stopped().empty());
  ASSERT_EQ(p_.local.relaunched().size(), 1u);
  EXPECT_EQ(p_.local.relaunched()[0].second, 2);
  EXPECT_TRUE(HasEvent(id, "membership 2: ranks 0,1 (rank 2 lost: exited with code 1)"));
}

TEST_F(ReplicasTest, BelowMinReplicasTheGroupRestartsAsAWhole) {
  ActiveJob& job = p_.Submit(kReplicaSpec);  // min_replicas: 2
  const std::string id = job.record.id;
  AttachAll(job);
  p_.workers.Exit(RankExit::Killed(id, 1, 2, 9));
  EXPECT_FALSE(job.attempt->failed());
  p_.workers.Exit(RankExit::Exited(id, 1, 0, 1));
  EXPECT_TRUE(job.attempt->failed());
  EXPECT_EQ(job.attempt->failure().reason,
            "rank 0 lost: exited with code 1; 1 live replica left, fewer than fault_tolerance.min_replicas (2)");
  EXPECT_EQ(p_.local.stopped(), (std::vector<std::string>{id + "#1"}));
  EXPECT_EQ(p_.local.relaunched().size(), 1u);  // rank 2's, before
  // The replacement of rank 2 and rank 1 end as the group stops: a restart
  // of the whole group, as in mode whole_group.
  p_.workers.Exit(RankExit::Killed(id, 1, 1, 2));
  p_.workers.Exit(RankExit::Killed(id, 1, 2, 2));
  EXPECT_EQ(job.record.attempt, 2);  // restarted at once
  EXPECT_EQ(job.restarts, 1);
}

TEST_F(ReplicasTest, WholeGroupModeIsUnchanged) {
  ActiveJob& job = p_.Submit(
      "max_steps: 10\nnum_processes: 3\nmax_restarts: 3\ndistributed_type: DDP\nfault_tolerance: {mode: "
      "whole_group}\n");
  const std::string id = job.record.id;
  auto c = AttachAll(job);
  EXPECT_FALSE(job.attempt->supervisor().Status().has_value());  // whole_group: no membership
  p_.workers.Exit(RankExit::Killed(id, 1, 1, 9));
  EXPECT_TRUE(job.attempt->failed());
  EXPECT_EQ(job.attempt->failure().reason, "rank 1 was killed by signal 9 (Killed)");
  EXPECT_EQ(p_.local.stopped(), (std::vector<std::string>{id + "#1"}));
  EXPECT_TRUE(p_.local.relaunched().empty());
  for (auto& [r, ch] : c) EXPECT_TRUE(Memberships(*ch).empty());
  p_.workers.Exit(RankExit::Killed(id, 1, 0, 2));
  p_.workers.Exit(RankExit::Killed(id, 1, 2, 2));
  EXPECT_EQ(job.record.attempt, 2);  // restarted at once
  EXPECT_EQ(job.restarts, 1);
  EXPECT_EQ(Value("trainyard_job_membership_epoch{job_id=\"" + id + "\"}"), -1);  // no such series
}

// fail_fast: the first lost rank stops the group, as in whole_group, and
// the job fails with its restarts unused.
TEST_F(ReplicasTest, FailFastModeFailsTheJobOnTheFirstLostRank) {
  ActiveJob& job = p_.Submit(
      "max_steps: 10\nnum_processes: 3\nmax_restarts: 3\ndistributed_type: DDP\nfault_tolerance: {mode: "
      "fail_fast}\n");
  const std::string id = job.record.id;
  auto c = AttachAll(job);
  p_.workers.Exit(RankExit::Killed(id, 1, 1, 9));
  EXPECT_TRUE(job.attempt->failed());
  EXPECT_EQ(p_.local.stopped(), (std::vector<std::string>{id + "#1"}));
  EXPECT_TRUE(p_.local.relaunched().empty());
  p_.workers.Exit(RankExit::Killed(id, 1, 0, 2));
  p_.workers.Exit(RankExit::Killed(id, 1, 2, 2));
  const absl::StatusOr<JobRecord> ended = p_.jobs.Record(id);
  ASSERT_TRUE(ended.ok()) << ended.status();
  EXPECT_EQ(ended->state, JobState::kFailed);
  EXPECT_EQ(ended->attempt, 1);  // not restarted
  EXPECT_EQ(ended->reason, "rank 1 was killed by signal 9 (Killed)");
}

TEST_F(ReplicasTest, TheFirstLiveMemberStandsForTheGroup) {
  ActiveJob& job = p_.Submit(kReplicaSpec);
  const std::string id = job.record.id;
  auto c = AttachAll(job);
  p_.workers.Exit(RankExit::Killed(id, 1, 0, 9));
  for (auto& [r, ch] : c) Memberships(*ch);
  EXPECT_EQ(job.attempt->lead_rank(), 1);
  // Its steps are the job's; rank 2's are not.
  StepMetrics m;
  m.rank = 1;
  m.step = 7;
  p_.workers.Metrics(id, 1, {m});
  m.rank = 2;
  m.step = 9;
  p_.workers.Metrics(id, 1, {m});
  EXPECT_EQ(job.record.step, 7);
  // Checkpoint requests go to it, and its reports count.
  ASSERT_TRUE(p_.stops.RequestCheckpoint(job, CheckpointType::kAuto, 5).ok());
  WorkerCommand cmd;
  ASSERT_TRUE(c[1]->Pop(&cmd, std::chrono::milliseconds(0)));
  EXPECT_EQ(cmd.kind, WorkerCommand::Kind::kCheckpoint);
  EXPECT_EQ(cmd.request_id, 5);
  CheckpointEvent saved;
  saved.ok = true;
  saved.step = 7;
  saved.index = 1;
  saved.trigger = "requested";
  p_.workers.Checkpoint(id, 1, saved, /*rank=*/2);
  EXPECT_TRUE(p_.jobs.Checkpoints(id)->empty());
  p_.workers.Checkpoint(id, 1, saved, /*rank=*/1);
  EXPECT_EQ(p_.jobs.Checkpoints(id)->size(), 1u);
}

TEST_F(ReplicasTest, AMemberWhoseStreamStaysLostIsTakenOutAndEnded) {
  ActiveJob& job = p_.Submit(kReplicaSpec);
  const std::string id = job.record.id;
  auto c = AttachAll(job);
  for (auto& [r, ch] : c) Memberships(*ch);
  p_.workers.Detach(id, 1, 2, c[2]);
  // Its process's end would come within moments if it had died.
  p_.clock.Advance(std::chrono::milliseconds(500));
  p_.watch.Supervise(&p_.requests, std::chrono::seconds(5));
  EXPECT_TRUE(p_.local.killed().empty());
  EXPECT_TRUE(Memberships(*c[0]).empty());
  p_.clock.Advance(std::chrono::milliseconds(600));
  p_.watch.Supervise(&p_.requests, std::chrono::seconds(5));
  EXPECT_EQ(p_.local.killed(), (std::vector<std::string>{id + "#1/2"}));
  EXPECT_EQ(Memberships(*c[0]).at(0).ranks, (Ranks{0, 1}));
  EXPECT_TRUE(HasEvent(id, "membership 2: ranks 0,1 (rank 2 lost: lost its stream without a result)"));
  EXPECT_TRUE(p_.local.relaunched().empty());  // not before its process ended
  p_.workers.Exit(RankExit::Killed(id, 1, 2, 9));
  ASSERT_EQ(p_.local.relaunched().size(), 1u);
  EXPECT_EQ(p_.local.relaunched()[0].second, 2);
  EXPECT_FALSE(job.attempt->failed());
  EXPECT_EQ(job.attempt->supervisor().Status().value().membership.epoch, 2);
  // A rank that ends after its result is no loss.
  p_.workers.Result(id, 1, 0, WorkerOutcome::kSucceeded, "");
  p_.workers.Detach(id, 1, 0, c[0]);
  p_.clock.Advance(std::chrono::seconds(2));
  p_.watch.Supervise(&p_.requests, std::chrono::seconds(5));
  EXPECT_EQ(p_.local.killed().size(), 1u);
}

TEST_F(ReplicasTest, AStreamLostWithItsProcessIsNamedByTheProcesssEnd) {
  ActiveJob& job = p_.Submit(kReplicaSpec);
  const std::string id = job.record.id;
  auto c = AttachAll(job);
  p_.workers.Detach(id, 1, 1, c[1]);  // the stream breaks as the process dies
  p_.workers.Exit(RankExit::Killed(id, 1, 1, 9));
  EXPECT_TRUE(HasEvent(id, "membership 2: ranks 0,2 (rank 1 lost: killed by signal 9 (Killed))"));
  p_.clock.Advance(std::chrono::seconds(2));
  p_.watch.Supervise(&p_.requests, std::chrono::seconds(5));
  EXPECT_TRUE(p_.local.killed().empty());
  EXPECT_EQ(job.attempt->supervisor().Status().value().membership.epoch, 2);
}

TEST_F(ReplicasTest, AMemberThatReconnectsInTimeStays) {
  ActiveJob& job = p_.Submit(kReplicaSpec);
  const std::string id = job.record.id;
  auto c = AttachAll(job);
  for (auto& [r, ch] : c) Memberships(*ch);
  p_.workers.Detach(id, 1, 1, c[1]);
  c[1] = Attach(job, 1);  // a blip
  std::vector<MembershipView> got = Memberships(*c[1]);
  ASSERT_EQ(got.size(), 1u);  // the current membership again
  EXPECT_EQ(got[0].epoch, 1);
  p_.clock.Advance(std::chrono::seconds(2));
  p_.watch.Supervise(&p_.requests, std::chrono::seconds(5));
  EXPECT_TRUE(p_.local.killed().empty());
  EXPECT_EQ(job.attempt->supervisor().Status().value().membership.epoch, 1);
}

TEST_F(ReplicasTest, AHungReplicaIsEvictedAndReplaced) {
  ActiveJob& job = p_.Submit(std::string(kReplicaSpec) + "step_timeout_s: 5\n");
  const std::string id = job.record.id;
  auto c = AttachAll(job);
  for (auto& [r, ch] : c) Memberships(*ch);
  p_.clock.Advance(std::chrono::seconds(6));
  p_.watch.Supervise(&p_.requests, std::chrono::milliseconds(2000));  // asks the ranks
  const int64_t request = job.attempt->watch().hang_diagnosis;
  ASSERT_NE(request, 0);
  for (int32_t r : {0, 2}) {  // rank 1 does not answer
    FlightRecord record;
    record.rank = r;
    record.phase = "backward";
    p_.requests.AddFlightRecord(id, 1, request, record);
  }
  p_.clock.Advance(std::chrono::seconds(3));
  p_.watch.Supervise(&p_.requests, std::chrono::milliseconds(2000));
  EXPECT_FALSE(job.attempt->failed());
  EXPECT_EQ(p_.local.killed(), (std::vector<std::string>{id + "#1/1"}));
  EXPECT_TRUE(p_.local.stopped().empty());
  std::vector<MembershipView> got = Memberships(*c[0]);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].ranks, (Ranks{0, 2}));
  bool named = false;
  for (const std::string& e : Events(id)) named |= e.rfind("rank 1 evicted as hung: no step progress", 0) == 0;
  EXPECT_TRUE(named) << absl::StrJoin(Events(id), "\n");
  p_.workers.Exit(RankExit::Killed(id, 1, 1, 9));
  ASSERT_EQ(p_.local.relaunched().size(), 1u);
  EXPECT_EQ(p_.local.relaunched()[0].second, 1);
}

}  // namespace
}  // namespace trainyard
