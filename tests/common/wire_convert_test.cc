// wire_convert: every domain <-> proto conversion round-trips, and values a
// peer did not set (or a newer peer's unknown enum values) read as
// documented.
#include "common/wire_convert.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <tuple>

namespace trainyard {
namespace {

TEST(WireConvert, JobStatesRoundTripAndUnknownIsNullopt) {
  for (JobState s : kAllJobStates) EXPECT_EQ(FromProto(ToProto(s)), s) << JobStateName(s);
  EXPECT_EQ(FromProto(static_cast<v1::JobState>(999)), std::nullopt);
}

TEST(WireConvert, WorkerOutcomesRoundTripAndMatchExitCodes) {
  for (WorkerOutcome o : {WorkerOutcome::kSucceeded, WorkerOutcome::kFailed, WorkerOutcome::kUsage,
                          WorkerOutcome::kStopped, WorkerOutcome::kPreempted}) {
    EXPECT_EQ(FromProto(ToProto(o)), o);
    EXPECT_EQ(OutcomeOfExitCode(ExitCodeOf(o)), o);
  }
  // A peer that said nothing, or something newer, failed.
  EXPECT_EQ(FromProto(v1::WORKER_OUTCOME_UNSPECIFIED), WorkerOutcome::kFailed);
  EXPECT_EQ(FromProto(static_cast<v1::WorkerOutcome>(77)), WorkerOutcome::kFailed);
  // A crash (SIGKILL through a shell: 137) is a failure.
  EXPECT_EQ(OutcomeOfExitCode(137), WorkerOutcome::kFailed);
}

TEST(WireConvert, CheckpointTypes) {
  EXPECT_EQ(ToProto(CheckpointType::kAuto), v1::CHECKPOINT_TYPE_UNSPECIFIED);
  for (CheckpointType t : {CheckpointType::kAuto, CheckpointType::kFull, CheckpointType::kSharded}) {
    EXPECT_EQ(FromProto(ToProto(t)), t) << CheckpointTypeName(t);
  }
  EXPECT_EQ(FromProto(static_cast<v1::CheckpointType>(9)), std::nullopt);
}

// Every number of the step list travels: each gets a value of its own, and
// the proto has exactly the list's fields, by name.
TEST(WireConvert, EveryStepNumberRoundTrips) {
  StepMetrics m;
  double v = 1;
#define TRAINYARD_TEST_SET(type, name, ...) m.name = static_cast<type>(v++ * 1.5);
  TRAINYARD_STEP_NUMBERS(TRAINYARD_TEST_SET)
#undef TRAINYARD_TEST_SET
  m.values = {{"accuracy", 0.75}, {"tokens", 4096}};
  v1::MetricsSample p;
  ToProto(m, &p);
  const StepMetrics back = FromProto(p);
  std::set<std::string> listed;
#define TRAINYARD_TEST_CHECK(type, name, ...) \
  EXPECT_EQ(back.name, m.name) << #name;      \
  listed.insert(#name);
  TRAINYARD_STEP_NUMBERS(TRAINYARD_TEST_CHECK)
#undef TRAINYARD_TEST_CHECK
  EXPECT_EQ(back.values, m.values);
  listed.insert("values");  // the one field beyond the list
  std::set<std::string> in_proto;
  const auto* d = v1::MetricsSample::descriptor();
  for (int f = 0; f < d->field_count(); ++f) in_proto.insert(d->field(f)->name());
  EXPECT_EQ(in_proto, listed);
}

TEST(WireConvert, CheckpointEventAndRecord) {
  CheckpointEvent e;
  e.index = 4;
  e.step = 200;
  e.type = CheckpointType::kSharded;
  e.trigger = "periodic";
  e.request_id = 9;
  e.path = "/p/checkpoints/checkpoint_4";
  e.bytes = 12345;
  e.seconds = 1.5;
  e.unix_millis = 1700000000000;
  e.ok = true;
  v1::Checkpoint p;
  ToProto(CheckpointRecord{3, e}, &p);
  EXPECT_EQ(p.attempt(), 3);
  EXPECT_EQ(p.type(), v1::SHARDED);
  const CheckpointEvent back = FromProto(p);
  EXPECT_EQ(back.index, e.index);
  EXPECT_EQ(back.step, e.step);
  EXPECT_EQ(back.type, e.type);
  EXPECT_EQ(back.trigger, e.trigger);
  EXPECT_EQ(back.request_id, e.request_id);
  EXPECT_EQ(back.path, e.path);
  EXPECT_EQ(back.bytes, e.bytes);
  EXPECT_EQ(back.seconds, e.seconds);
  EXPECT_EQ(back.unix_millis, e.unix_millis);
  EXPECT_TRUE(back.ok);
}

TEST(WireConvert, JobViewsWithAndWithoutTheSpec) {
  JobRecord r;
  r.id = "job-1";
  r.name = "n";
  r.state = JobState::kFailed;
  r.reason = "rank 1: boom";
  r.spec_json = R"({"name":"n"})";
  r.num_processes = 4;
  r.max_steps = 10;
  r.step = 5;
  r.attempt = 2;
  r.failed_rank = 1;
  r.worker_token = "secret";
  v1::Job full, basic;
  ToProto(r, {JobEvent{1, JobState::kQueued, "submitted"}}, &full);
  ToProto(r, {}, &basic, /*with_spec=*/false);
  EXPECT_EQ(full.spec_json(), r.spec_json);
  EXPECT_TRUE(basic.spec_json().empty());
  for (const v1::Job* j : {&full, &basic}) {
    EXPECT_EQ(j->id(), "job-1");
    EXPECT_EQ(j->state(), v1::FAILED);
    EXPECT_EQ(j->reason(), r.reason);
    EXPECT_EQ(j->num_processes(), 4);
    EXPECT_EQ(j->attempt(), 2);
    EXPECT_EQ(j->failed_rank(), 1);
    // The worker token never leaves the server through a job.
    EXPECT_EQ(j->DebugString().find("secret"), std::string::npos);
  }
  ASSERT_EQ(full.events_size(), 1);
  EXPECT_EQ(full.events(0).reason(), "submitted");
}

TEST(WireConvert, ReplicaMessagesRoundTrip) {
  const MembershipView m{7, {0, 2, 3}, "10.0.0.5", 41234, "rank 1 lost"};
  v1::Membership wire;
  ToProto(m, &wire);
  EXPECT_EQ(FromProto(wire), m);
  EXPECT_EQ(m.IndexOf(3), 2);
  EXPECT_EQ(m.IndexOf(1), -1);
  EXPECT_EQ(m.StorePrefix(), "m7/");
  EXPECT_EQ(m.Describe(), "epoch 7: ranks [0,2,3] (rank 1 lost)");
  EXPECT_EQ(RankRanges({0, 1, 2, 3, 7, 9, 10}), "0-3,7,9,10");
  EXPECT_EQ(RankRanges({5, 6, 7, 0, 1, 2}), "5-7,0-2");
  EXPECT_EQ(RankRanges({}), "");
  EXPECT_EQ(RankRanges({4}), "4");

  // A delta: on the wire without the ranks, and applied to its base only.
  const MembershipView next{8, {0, 3, 5, 6}, "10.0.0.5", 41234, "rank 2 lost; ranks 5,6 joined"};
  const std::optional<MembershipDelta> delta = MembershipDelta::Between(m, next);
  ASSERT_TRUE(delta);
  EXPECT_EQ(delta->base_epoch, 7);
  EXPECT_EQ(delta->removed, std::vector<int32_t>{2});
  EXPECT_EQ(delta->added, (std::vector<int32_t>{5, 6}));
  v1::Membership dw;
  ToProto(next, *delta, &dw);
  EXPECT_EQ(dw.ranks_size(), 0);
  EXPECT_EQ(DeltaFromProto(dw), delta);
  EXPECT_EQ(DeltaFromProto(wire), std::nullopt) << "a whole membership";
  EXPECT_EQ(delta->ApplyTo(m), next.ranks);
  MembershipView other = m;
  other.epoch = 6;
  EXPECT_EQ(delta->ApplyTo(other), std::nullopt) << "not its base";
  other = m;
  other.ranks = {3, 0, 2};
  EXPECT_EQ(delta->ApplyTo(other), std::nullopt) << "the digest tells the order apart";
  // A reordered group is sent whole.
  EXPECT_EQ(MembershipDelta::Between(m, MembershipView{8, {3, 0}}), std::nullopt);
  EXPECT_NE(MembershipDigest({0, 2}), MembershipDigest({2, 0}));

  for (auto kind : {ReplicaReport::Kind::kGroupBroken, ReplicaReport::Kind::kCommitted, ReplicaReport::Kind::kLeft}) {
    const ReplicaReport r{kind, 7, 120, std::string(3000, 'x'), 1.5, true, 4096};
    v1::ReplicaReport w;
    ToProto(r, &w);
    const std::optional<ReplicaReport> back = FromProto(w);
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(back->kind, kind);
    EXPECT_EQ((std::tuple(back->epoch, back->step, back->seconds, back->healed, back->heal_bytes)),
              (std::tuple(int64_t{7}, int64_t{120}, 1.5, true, int64_t{4096})));
    EXPECT_EQ(back->detail.size(), 2000u);  // bounded on reading
  }
  v1::ReplicaReport unknown;
  unknown.set_kind(static_cast<v1::ReplicaReport::Kind>(99));
  EXPECT_FALSE(FromProto(unknown).has_value());

  ReplicaStatus st;
  st.membership = m;
  st.healing = {1};
  st.min_replicas = 2;
  st.size = 4;
  st.leaving = {3};
  v1::Replicas rw;
  ToProto(st, &rw);
  EXPECT_EQ(rw.epoch(), 7);
  EXPECT_EQ(std::vector<int32_t>(rw.live().begin(), rw.live().end()), m.ranks);
  EXPECT_EQ((std::tuple(rw.healing(0), rw.min_replicas(), rw.size(), rw.leaving(0))), std::tuple(1, 2, 4, 3));
}

TEST(WireConvert, StatusCodesMapByName) {
  const absl::Status s = absl::FailedPreconditionError("nope");
  const grpc::Status g = ToGrpcStatus(s);
  EXPECT_EQ(g.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(g.error_message(), "nope");
  EXPECT_EQ(FromGrpcStatus(g), s);
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
}

}  // namespace
}  // namespace trainyard
