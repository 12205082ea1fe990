#include "common/wire_convert.h"

namespace trainyard {

v1::JobState ToProto(JobState state) {
  switch (state) {
    case JobState::kQueued: return v1::QUEUED;
    case JobState::kStarting: return v1::STARTING;
    case JobState::kRunning: return v1::RUNNING;
    case JobState::kSucceeded: return v1::SUCCEEDED;
    case JobState::kFailed: return v1::FAILED;
    case JobState::kCancelled: return v1::CANCELLED;
    case JobState::kRecovering: return v1::RECOVERING;
  }
  return v1::JOB_STATE_UNSPECIFIED;
}

std::optional<JobState> FromProto(v1::JobState state) {
  switch (state) {
    case v1::QUEUED: return JobState::kQueued;
    case v1::STARTING: return JobState::kStarting;
    case v1::RUNNING: return JobState::kRunning;
    case v1::SUCCEEDED: return JobState::kSucceeded;
    case v1::FAILED: return JobState::kFailed;
    case v1::CANCELLED: return JobState::kCancelled;
    case v1::RECOVERING: return JobState::kRecovering;
    default: return std::nullopt;
  }
}

void ToProto(const StepMetrics& m, v1::MetricsSample* out) {
#define TRAINYARD_STEP_TO_PROTO(type, name, ...) out->set_##name(m.name);
  TRAINYARD_STEP_NUMBERS(TRAINYARD_STEP_TO_PROTO)
#undef TRAINYARD_STEP_TO_PROTO
  for (const auto& [name, value] : m.values) (*out->mutable_values())[name] = value;
}

StepMetrics FromProto(const v1::MetricsSample& m) {
  StepMetrics s;
#define TRAINYARD_STEP_FROM_PROTO(type, name, ...) s.name = m.name();
  TRAINYARD_STEP_NUMBERS(TRAINYARD_STEP_FROM_PROTO)
#undef TRAINYARD_STEP_FROM_PROTO
  for (const auto& [name, value] : m.values()) s.values[name] = value;
  return s;
}

v1::CheckpointType ToProto(CheckpointType type) {
  switch (type) {
    case CheckpointType::kFull: return v1::FULL;
    case CheckpointType::kSharded: return v1::SHARDED;
    case CheckpointType::kAuto: break;
  }
  return v1::CHECKPOINT_TYPE_UNSPECIFIED;
}

std::optional<CheckpointType> FromProto(v1::CheckpointType type) {
  switch (type) {
    case v1::CHECKPOINT_TYPE_UNSPECIFIED: return CheckpointType::kAuto;
    case v1::FULL: return CheckpointType::kFull;
    case v1::SHARDED: return CheckpointType::kSharded;
    default: return std::nullopt;
  }
}

void ToProto(const CheckpointEvent& c, v1::Checkpoint* out) {
  out->set_index(c.index);
  out->set_step(c.step);
  out->set_type(ToProto(c.type));
  out->set_trigger(c.trigger);
  out->set_path(c.path);
  out->set_bytes(c.bytes);
  out->set_seconds(c.seconds);
  out->set_blocking_seconds(c.blocking_seconds);
  out->set_host_bytes(c.host_bytes);
  out->set_refused(c.refused);
  out->set_unix_millis(c.unix_millis);
  out->set_request_id(c.request_id);
  out->set_ok(c.ok);
  out->set_error(c.error);
}

void ToProto(const FlightRecord& r, v1::FlightRecord* out) {
  out->set_rank(r.rank);
  out->set_step(r.step);
  out->set_phase(r.phase);
  out->set_phase_since_unix_micros(r.phase_since_unix_micros);
  out->set_captured_unix_micros(r.captured_unix_micros);
  out->set_python_stack(r.python_stack);
  for (const CollectiveRecord& c : r.collectives) {
    v1::CollectiveRecord* o = out->add_collectives();
    o->set_seq(c.seq);
    o->set_group(c.group);
    o->set_op(c.op);
    o->set_bytes(c.bytes);
    o->set_start_unix_micros(c.start_unix_micros);
    o->set_end_unix_micros(c.end_unix_micros);
  }
}

FlightRecord FromProto(const v1::FlightRecord& r) {
  FlightRecord out;
  out.rank = r.rank();
  out.step = r.step();
  out.phase = r.phase();
  out.phase_since_unix_micros = r.phase_since_unix_micros();
  out.captured_unix_micros = r.captured_unix_micros();
  out.python_stack = r.python_stack();
  for (const v1::CollectiveRecord& c : r.collectives()) {
    out.collectives.push_back({c.seq(), c.group(), c.op(), c.bytes(), c.start_unix_micros(), c.end_unix_micros()});
  }
  return out;
}

CheckpointEvent FromProto(const v1::Checkpoint& c) {
  CheckpointEvent e;
  e.index = c.index();
  e.step = c.step();
  e.type = c.type() == v1::SHARDED ? CheckpointType::kSharded : CheckpointType::kFull;
  e.trigger = c.trigger();
  e.path = c.path();
  e.bytes = c.bytes();
  e.seconds = c.seconds();
  e.blocking_seconds = c.blocking_seconds();
  e.host_bytes = c.host_bytes();
  e.refused = c.refused();
  e.unix_millis = c.unix_millis();
  e.request_id = c.request_id();
  e.ok = c.ok();
  e.error = c.error();
  return e;
}

void ToProto(const CheckpointRecord& c, v1::Checkpoint* out) {
  ToProto(c.checkpoint, out);
  out->set_attempt(c.attempt);
}

void ToProto(const JobRecord& j, const std::vector<JobEvent>& events, v1::Job* out, bool with_spec) {
  out->set_id(j.id);
  out->set_name(j.name);
  out->set_state(ToProto(j.state));
  out->set_reason(j.reason);
  if (with_spec) out->set_spec_json(j.spec_json);
  out->set_num_processes(j.num_processes);
  out->set_max_steps(j.max_steps);
  out->set_step(j.step);
  out->set_loss(j.loss);
  out->set_first_loss(j.first_loss);
  out->set_samples_per_second(j.samples_per_second);
  out->set_created_unix_millis(j.created_unix_millis);
  out->set_started_unix_millis(j.started_unix_millis);
  out->set_ended_unix_millis(j.ended_unix_millis);
  out->set_attempt(j.attempt);
  out->set_failed_rank(j.failed_rank);
  out->set_owner(j.owner);
  out->set_group(j.group);
  out->set_priority(j.priority);
  if (!j.sweep_id.empty()) {
    out->set_sweep_id(j.sweep_id);
    out->set_sweep_trial(j.sweep_trial);
  }
  for (const JobEvent& e : events) {
    v1::JobEvent* pe = out->add_events();
    pe->set_unix_millis(e.unix_millis);
    pe->set_state(ToProto(e.state));
    pe->set_reason(e.reason);
  }
}

v1::WorkerOutcome ToProto(WorkerOutcome outcome) {
  switch (outcome) {
    case WorkerOutcome::kSucceeded: return v1::WORKER_OUTCOME_SUCCEEDED;
    case WorkerOutcome::kFailed: return v1::WORKER_OUTCOME_FAILED;
    case WorkerOutcome::kUsage: return v1::WORKER_OUTCOME_USAGE;
    case WorkerOutcome::kStopped: return v1::WORKER_OUTCOME_STOPPED;
    case WorkerOutcome::kPreempted: return v1::WORKER_OUTCOME_PREEMPTED;
  }
  return v1::WORKER_OUTCOME_FAILED;
}

WorkerOutcome FromProto(v1::WorkerOutcome outcome) {
  switch (outcome) {
    case v1::WORKER_OUTCOME_SUCCEEDED: return WorkerOutcome::kSucceeded;
    case v1::WORKER_OUTCOME_USAGE: return WorkerOutcome::kUsage;
    case v1::WORKER_OUTCOME_STOPPED: return WorkerOutcome::kStopped;
    case v1::WORKER_OUTCOME_PREEMPTED: return WorkerOutcome::kPreempted;
    default: return WorkerOutcome::kFailed;
  }
}

void ToProto(const MembershipView& m, v1::Membership* out) {
  out->set_epoch(m.epoch);
  for (int32_t r : m.ranks) out->add_ranks(r);
  out->set_store_addr(m.store_addr);
  out->set_store_port(m.store_port);
  out->set_reason(m.reason);
}

void ToProto(const MembershipView& m, const MembershipDelta& delta, v1::Membership* out) {
  out->set_epoch(m.epoch);
  out->set_store_addr(m.store_addr);
  out->set_store_port(m.store_port);
  out->set_reason(m.reason);
  out->set_base_epoch(delta.base_epoch);
  for (int32_t r : delta.removed) out->add_removed(r);
  for (int32_t r : delta.added) out->add_added(r);
  out->set_digest(delta.digest);
}

std::optional<MembershipDelta> DeltaFromProto(const v1::Membership& m) {
  if (m.base_epoch() <= 0) return std::nullopt;
  MembershipDelta d;
  d.base_epoch = m.base_epoch();
  d.removed.assign(m.removed().begin(), m.removed().end());
  d.added.assign(m.added().begin(), m.added().end());
  d.digest = m.digest();
  return d;
}

void ToProto(const ReplicaStatus& r, v1::Replicas* out) {
  out->set_epoch(r.membership.epoch);
  for (int32_t rank : r.membership.ranks) out->add_live(rank);
  for (int32_t rank : r.healing) out->add_healing(rank);
  out->set_min_replicas(r.min_replicas);
  out->set_size(r.size);
  for (int32_t rank : r.leaving) out->add_leaving(rank);
}

MembershipView FromProto(const v1::Membership& m) {
  MembershipView out;
  out.epoch = m.epoch();
  out.ranks.assign(m.ranks().begin(), m.ranks().end());
  out.store_addr = m.store_addr();
  out.store_port = m.store_port();
  out.reason = m.reason();
  return out;
}

void ToProto(const ReplicaReport& r, v1::ReplicaReport* out) {
  switch (r.kind) {
    case ReplicaReport::Kind::kGroupBroken: out->set_kind(v1::ReplicaReport::GROUP_BROKEN); break;
    case ReplicaReport::Kind::kCommitted: out->set_kind(v1::ReplicaReport::COMMITTED); break;
    case ReplicaReport::Kind::kLeft: out->set_kind(v1::ReplicaReport::LEFT); break;
  }
  out->set_epoch(r.epoch);
  out->set_step(r.step);
  out->set_detail(r.detail);
  out->set_seconds(r.seconds);
  out->set_healed(r.healed);
  out->set_heal_bytes(r.heal_bytes);
}

std::optional<ReplicaReport> FromProto(const v1::ReplicaReport& r) {
  ReplicaReport out;
  switch (r.kind()) {
    case v1::ReplicaReport::GROUP_BROKEN: out.kind = ReplicaReport::Kind::kGroupBroken; break;
    case v1::ReplicaReport::COMMITTED: out.kind = ReplicaReport::Kind::kCommitted; break;
    case v1::ReplicaReport::LEFT: out.kind = ReplicaReport::Kind::kLeft; break;
    default: return std::nullopt;
  }
  out.epoch = r.epoch();
  out.step = r.step();
  out.detail = r.detail().substr(0, 2000);
  out.seconds = r.seconds();
  out.healed = r.healed();
  out.heal_bytes = r.heal_bytes();
  return out;
}

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(static_cast<int>(status.code())), std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(static_cast<int>(status.error_code())), status.error_message());
}

}  // namespace trainyard
