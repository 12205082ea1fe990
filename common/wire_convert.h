// Conversions between trainyard.v1 wire messages and domain structs — the
// only place that knows both. Also maps absl::Status to grpc::Status.
#ifndef TRAINYARD_COMMON_WIRE_CONVERT_H_
#define TRAINYARD_COMMON_WIRE_CONVERT_H_

#include <grpcpp/support/status.h>

#include <memory>
#include <optional>
#include <string>

#include <vector>

#include "absl/status/status.h"
#include "common/flight_record.h"
#include "common/job_record.h"
#include "common/job_state.h"
#include "common/replica_protocol.h"
#include "common/step_metrics.h"
#include "common/worker_outcome.h"
#include "trainyard/v1/trainyard.pb.h"

namespace trainyard {

v1::JobState ToProto(JobState state);
std::optional<JobState> FromProto(v1::JobState state);

void ToProto(const StepMetrics& m, v1::MetricsSample* out);
StepMetrics FromProto(const v1::MetricsSample& m);

// kAuto travels as CHECKPOINT_TYPE_UNSPECIFIED; a value this build does
// not know reads as nullopt.
v1::CheckpointType ToProto(CheckpointType type);
std::optional<CheckpointType> FromProto(v1::CheckpointType type);

void ToProto(const CheckpointEvent& c, v1::Checkpoint* out);
CheckpointEvent FromProto(const v1::Checkpoint& c);
void ToProto(const CheckpointRecord& c, v1::Checkpoint* out);

// A job with its events (none: the field stays empty). `with_spec`: the
// spec_json too (the FULL view; ListJobs' BASIC view leaves it out).
void ToProto(const JobRecord& job, const std::vector<JobEvent>& events, v1::Job* out, bool with_spec = true);

// UNSPECIFIED (a peer that did not say) reads as kFailed.
void ToProto(const FlightRecord& r, v1::FlightRecord* out);
FlightRecord FromProto(const v1::FlightRecord& r);

v1::WorkerOutcome ToProto(WorkerOutcome outcome);
WorkerOutcome FromProto(v1::WorkerOutcome outcome);

void ToProto(const MembershipView& m, v1::Membership* out);
// `m` as a delta from the membership a rank holds (no ranks: base_epoch,
// removed, added, digest).
void ToProto(const MembershipView& m, const MembershipDelta& delta, v1::Membership* out);
// The delta a membership carries (base_epoch > 0), or nullopt: it is whole.
std::optional<MembershipDelta> DeltaFromProto(const v1::Membership& m);
void ToProto(const ReplicaStatus& r, v1::Replicas* out);
MembershipView FromProto(const v1::Membership& m);
// A report's detail is cut to 2,000 bytes on reading; a kind this build does
// not know reads as nullopt (the report is dropped).
void ToProto(const ReplicaReport& r, v1::ReplicaReport* out);
std::optional<ReplicaReport> FromProto(const v1::ReplicaReport& r);

// Each absl code maps to the gRPC code of the same name.
grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_WIRE_CONVERT_H_
