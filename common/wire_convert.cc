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
  out->set_rank(m.rank);
  out->set_step(m.step);
  out->set_loss(m.loss);
  out->set_samples_per_second(m.samples_per_second);
  out->set_step_seconds(m.step_seconds);
  out->set_data_seconds(m.data_seconds);
  out->set_compute_seconds(m.compute_seconds);
  out->set_optimizer_seconds(m.optimizer_seconds);
  out->set_learning_rate(m.learning_rate);
  out->set_samples(m.samples);
  out->set_eval_loss(m.eval_loss);
  out->set_unix_millis(m.unix_millis);
  out->set_comm_wire_bytes(m.comm_wire_bytes);
  out->set_comm_fp32_bytes(m.comm_fp32_bytes);
  out->set_comm_hook_seconds(m.comm_hook_seconds);
  out->set_param_bytes(m.param_bytes);
  out->set_grad_bytes(m.grad_bytes);
  out->set_optimizer_bytes(m.optimizer_bytes);
  out->set_device_allocated_bytes(m.device_allocated_bytes);
  out->set_device_peak_bytes(m.device_peak_bytes);
  out->set_allgather_bytes(m.allgather_bytes);
  out->set_reduce_scatter_bytes(m.reduce_scatter_bytes);
  out->set_sharded_comm_seconds(m.sharded_comm_seconds);
  out->set_grad_norm(m.grad_norm);
}

StepMetrics FromProto(const v1::MetricsSample& m) {
  StepMetrics s;
  s.rank = m.rank();
  s.step = m.step();
  s.loss = m.loss();
  s.samples_per_second = m.samples_per_second();
  s.step_seconds = m.step_seconds();
  s.data_seconds = m.data_seconds();
  s.compute_seconds = m.compute_seconds();
  s.optimizer_seconds = m.optimizer_seconds();
  s.learning_rate = m.learning_rate();
  s.samples = m.samples();
  s.eval_loss = m.eval_loss();
  s.unix_millis = m.unix_millis();
  s.comm_wire_bytes = m.comm_wire_bytes();
  s.comm_fp32_bytes = m.comm_fp32_bytes();
  s.comm_hook_seconds = m.comm_hook_seconds();
  s.param_bytes = m.param_bytes();
  s.grad_bytes = m.grad_bytes();
  s.optimizer_bytes = m.optimizer_bytes();
  s.device_allocated_bytes = m.device_allocated_bytes();
  s.device_peak_bytes = m.device_peak_bytes();
  s.allgather_bytes = m.allgather_bytes();
  s.reduce_scatter_bytes = m.reduce_scatter_bytes();
  s.sharded_comm_seconds = m.sharded_comm_seconds();
  s.grad_norm = m.grad_norm();
  return s;
}

void ToProto(const CheckpointEvent& c, v1::Checkpoint* out) {
  out->set_index(c.index);
  out->set_step(c.step);
  out->set_type(c.type == "sharded" ? v1::SHARDED : c.type == "full" ? v1::FULL : v1::CHECKPOINT_TYPE_UNSPECIFIED);
  out->set_trigger(c.trigger);
  out->set_path(c.path);
  out->set_bytes(c.bytes);
  out->set_seconds(c.seconds);
  out->set_unix_millis(c.unix_millis);
  out->set_request_id(c.request_id);
  out->set_ok(c.ok);
  out->set_error(c.error);
}

CheckpointEvent FromProto(const v1::Checkpoint& c) {
  CheckpointEvent e;
  e.index = c.index();
  e.step = c.step();
  e.type = c.type() == v1::SHARDED ? "sharded" : c.type() == v1::FULL ? "full" : "";
  e.trigger = c.trigger();
  e.path = c.path();
  e.bytes = c.bytes();
  e.seconds = c.seconds();
  e.unix_millis = c.unix_millis();
  e.request_id = c.request_id();
  e.ok = c.ok();
  e.error = c.error();
  return e;
}

std::shared_ptr<grpc::ChannelCredentials> ClientCredentials(const std::string& ca_pem, const std::string& cert_pem,
                                                            const std::string& key_pem) {
  if (ca_pem.empty()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = ca_pem;
  ssl.pem_cert_chain = cert_pem;
  ssl.pem_private_key = key_pem;
  return grpc::SslCredentials(ssl);
}

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(static_cast<int>(status.code())),
                      std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(static_cast<int>(status.error_code())),
                      status.error_message());
}

}  // namespace trainyard
