#include "server/server_metrics.h"

#include <cmath>

namespace trainyard {
namespace {

const prometheus::Histogram::BucketBoundaries& RecoveryBuckets() {
  static const prometheus::Histogram::BucketBoundaries kBuckets = {0.5, 1, 2, 3, 5, 7.5, 10, 15, 30, 60, 120, 300, 600};
  return kBuckets;
}

const prometheus::Histogram::BucketBoundaries& StepBuckets() {
  static const prometheus::Histogram::BucketBoundaries kBuckets = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                                   0.25,   0.5,   1,      2.5,   5,    10,    30,   60};
  return kBuckets;
}

}  // namespace

ServerMetrics::ServerMetrics(std::shared_ptr<prometheus::Registry> registry)
    : registry_(std::move(registry)),
      jobs_(prometheus::BuildGauge()
                .Name("trainyard_jobs")
                .Help("Jobs known to the server, by state")
                .Register(*registry_)),
      submitted_(prometheus::BuildCounter()
                     .Name("trainyard_job_submissions_total")
                     .Help("Job submissions, by outcome (accepted or rejected)")
                     .Register(*registry_)),
      step_(prometheus::BuildGauge()
                .Name("trainyard_job_step")
                .Help("Last completed training step")
                .Register(*registry_)),
      samples_per_second_(prometheus::BuildGauge()
                              .Name("trainyard_job_samples_per_second")
                              .Help("Training throughput of one rank over its last step")
                              .Register(*registry_)),
      loss_(prometheus::BuildGauge()
                .Name("trainyard_job_loss")
                .Help("Training loss at the last step")
                .Register(*registry_)),
      learning_rate_(prometheus::BuildGauge()
                         .Name("trainyard_job_learning_rate")
                         .Help("Learning rate at the last step")
                         .Register(*registry_)),
      samples_(prometheus::BuildCounter()
                   .Name("trainyard_job_samples_total")
                   .Help("Samples processed by one rank")
                   .Register(*registry_)),
      step_duration_(prometheus::BuildHistogram()
                         .Name("trainyard_job_step_duration_seconds")
                         .Help("Step time by phase: step (whole), data, compute (forward+backward with "
                               "overlapped gradient communication), optimizer")
                         .Register(*registry_)),
      comm_wire_bytes_(prometheus::BuildCounter()
                           .Name("trainyard_job_comm_wire_bytes_total")
                           .Help("Gradient payload bytes handed to collectives (after compression)")
                           .Register(*registry_)),
      comm_fp32_bytes_(prometheus::BuildCounter()
                           .Name("trainyard_job_comm_fp32_equivalent_bytes_total")
                           .Help("Bytes plain fp32 allreduce would have carried for the same gradients")
                           .Register(*registry_)),
      comm_ratio_(prometheus::BuildGauge()
                      .Name("trainyard_job_comm_compression_ratio")
                      .Help("Wire bytes / fp32-equivalent bytes of gradient communication at the last step")
                      .Register(*registry_)),
      comm_hook_seconds_(prometheus::BuildCounter()
                             .Name("trainyard_job_comm_hook_seconds_total")
                             .Help("Time spent in the DDP communication hook")
                             .Register(*registry_)),
      memory_bytes_(prometheus::BuildGauge()
                        .Name("trainyard_job_memory_bytes")
                        .Help("Bytes a rank holds, by kind: parameters, gradients, optimizer state (tensor storages)")
                        .Register(*registry_)),
      sharded_bytes_(prometheus::BuildCounter()
                         .Name("trainyard_job_fsdp_collective_bytes_total")
                         .Help("FSDP collective payload, by op: all_gather, reduce_scatter")
                         .Register(*registry_)),
      sharded_seconds_(prometheus::BuildCounter()
                           .Name("trainyard_job_fsdp_collective_seconds_total")
                           .Help("Time spent in FSDP collectives")
                           .Register(*registry_)),
      grad_norm_(prometheus::BuildGauge()
                     .Name("trainyard_job_grad_norm")
                     .Help("Global gradient norm before clipping at the last step (jobs with max_grad_norm)")
                     .Register(*registry_)),
      eval_loss_(prometheus::BuildGauge()
                     .Name("trainyard_job_eval_loss")
                     .Help("Loss on the held-out split at the last evaluation (jobs with eval_every_steps)")
                     .Register(*registry_)),
      checkpoints_(prometheus::BuildCounter()
                       .Name("trainyard_checkpoints_total")
                       .Help("Checkpoints attempted, by type (full, sharded) and result (ok, failed)")
                       .Register(*registry_)),
      checkpoint_bytes_(prometheus::BuildCounter()
                            .Name("trainyard_checkpoint_bytes_total")
                            .Help("Bytes of committed checkpoints")
                            .Register(*registry_)),
      checkpoint_duration_(prometheus::BuildHistogram()
                               .Name("trainyard_checkpoint_duration_seconds")
                               .Help("Wall time of committed checkpoints, by type")
                               .Register(*registry_)),
      last_checkpoint_step_(prometheus::BuildGauge()
                                .Name("trainyard_job_last_checkpoint_step")
                                .Help("Step of the job's last committed checkpoint")
                                .Register(*registry_)),
      last_checkpoint_time_(prometheus::BuildGauge()
                                .Name("trainyard_job_last_checkpoint_timestamp_seconds")
                                .Help("Unix time of the job's last committed checkpoint")
                                .Register(*registry_)),
      last_checkpoint_bytes_(prometheus::BuildGauge()
                                 .Name("trainyard_job_last_checkpoint_bytes")
                                 .Help("Size of the job's last committed checkpoint")
                                 .Register(*registry_)),
      last_checkpoint_seconds_(prometheus::BuildGauge()
                                   .Name("trainyard_job_last_checkpoint_duration_seconds")
                                   .Help("Wall time of the job's last committed checkpoint")
                                   .Register(*registry_)),
      last_checkpoint_blocking_(prometheus::BuildGauge()
                                    .Name("trainyard_job_last_checkpoint_blocking_seconds")
                                    .Help("Of that, the time training waited for it")
                                    .Register(*registry_)),
      last_checkpoint_host_bytes_(prometheus::BuildGauge()
                                      .Name("trainyard_job_last_checkpoint_host_bytes")
                                      .Help("Host memory rank 0's copy of the job's last asynchronous checkpoint took")
                                      .Register(*registry_)),
      restarts_(prometheus::BuildCounter()
                    .Name("trainyard_job_restarts_total")
                    .Help("Whole-group restarts of the job from its latest checkpoint after a failure or hang")
                    .Register(*registry_)),
      restarts_all_(prometheus::BuildCounter()
                        .Name("trainyard_restarts_total")
                        .Help("Whole-group restarts of all jobs since the server started")
                        .Register(*registry_)),
      goodput_(prometheus::BuildGauge()
                   .Name("trainyard_job_goodput")
                   .Help("Share of the job's wall time since it first started spent on steps that were kept")
                   .Register(*registry_)),
      recovery_seconds_(prometheus::BuildHistogram()
                            .Name("trainyard_job_recovery_seconds")
                            .Help("The job's recoveries: from a failure (or stop) detected to the first step of the "
                                  "next attempt")
                            .Register(*registry_)),
      recovery_all_(prometheus::BuildHistogram()
                        .Name("trainyard_recovery_seconds")
                        .Help("Recoveries of all jobs: from a failure (or stop) detected to the first step of the "
                              "next attempt")
                        .Register(*registry_)),
      lost_steps_(prometheus::BuildCounter()
                      .Name("trainyard_job_lost_steps_total")
                      .Help("Steps the job trained again after restarts: trained before, past the checkpoint it "
                            "resumed from")
                      .Register(*registry_)),
      lost_steps_all_(prometheus::BuildCounter()
                          .Name("trainyard_lost_steps_total")
                          .Help("Steps all jobs trained again after restarts")
                          .Register(*registry_)),
      badput_(prometheus::BuildCounter()
                  .Name("trainyard_job_badput_seconds_total")
                  .Help("Wall time the job did not spend on steps it kept, by cause: restart, lost_work, "
                        "checkpoint_blocking, startup, data_wait")
                  .Register(*registry_)),
      model_flops_per_second_(prometheus::BuildGauge()
                                  .Name("trainyard_job_model_flops_per_second")
                                  .Help("Model FLOPs per second of the rank's last step (3x its forward pass)")
                                  .Register(*registry_)),
      mfu_(prometheus::BuildGauge()
               .Name("trainyard_job_mfu")
               .Help("Model FLOPs utilization of the rank's last step: its model FLOP/s over the peak FLOP/s of "
                     "its device (--peak-flops, else the worker's table of devices)")
               .Register(*registry_)) {
  restarts_all_.Add({});
  lost_steps_all_.Add({});
  recovery_all_.Add({}, RecoveryBuckets());
  for (CheckpointType t : {CheckpointType::kFull, CheckpointType::kSharded}) {
    const char* type = CheckpointTypeName(t);
    for (const char* result : {"ok", "failed"}) checkpoints_.Add({{"type", type}, {"result", result}});
  }
  for (JobState s : kAllJobStates) jobs_.Add({{"state", std::string(JobStateName(s))}}).Set(0);
  submitted_.Add({{"outcome", "accepted"}});
  submitted_.Add({{"outcome", "rejected"}});
}

void ServerMetrics::SetJobCounts(const std::map<JobState, int>& counts) {
  for (JobState s : kAllJobStates) {
    auto it = counts.find(s);
    jobs_.Add({{"state", std::string(JobStateName(s))}}).Set(it == counts.end() ? 0 : it->second);
  }
}

void ServerMetrics::CountSubmitted() { submitted_.Add({{"outcome", "accepted"}}).Increment(); }
void ServerMetrics::CountRejected() { submitted_.Add({{"outcome", "rejected"}}).Increment(); }

ServerMetrics::RankSeries& ServerMetrics::SeriesFor(const std::string& job_id, int32_t rank) {
  auto key = std::make_pair(job_id, rank);
  auto it = series_.find(key);
  if (it != series_.end()) return it->second;
  const std::map<std::string, std::string> labels = {{"job_id", job_id}, {"rank", std::to_string(rank)}};
  auto with = [&](const char* key, const char* value) {
    auto l = labels;
    l[key] = value;
    return l;
  };
  auto phase = [&](const char* name) {
    auto l = labels;
    l["phase"] = name;
    return &step_duration_.Add(l, StepBuckets());
  };
  RankSeries s{};
  s.step = &step_.Add(labels);
  s.samples_per_second = &samples_per_second_.Add(labels);
  s.loss = &loss_.Add(labels);
  s.learning_rate = &learning_rate_.Add(labels);
  s.samples = &samples_.Add(labels);
  s.step_seconds = phase("step");
  s.data_seconds = phase("data_wait");
  s.compute_seconds = phase("compute");
  s.optimizer_seconds = phase("optimizer");
  s.param_bytes = &memory_bytes_.Add(with("kind", "parameters"));
  s.grad_bytes = &memory_bytes_.Add(with("kind", "gradients"));
  s.optimizer_bytes = &memory_bytes_.Add(with("kind", "optimizer_state"));
  return series_.emplace(key, s).first->second;
}

void ServerMetrics::SetPeakFlops(double peak) {
  std::lock_guard<std::mutex> lock(mu_);
  peak_flops_ = peak;
}

void ServerMetrics::RecordStep(const std::string& job_id, const StepMetrics& m) {
  std::lock_guard<std::mutex> lock(mu_);
  RankSeries& s = SeriesFor(job_id, m.rank);
  if (m.model_flops > 0 && m.step_seconds > 0) {
    const std::map<std::string, std::string> labels = {{"job_id", job_id}, {"rank", std::to_string(m.rank)}};
    if (s.model_flops_per_second == nullptr) s.model_flops_per_second = &model_flops_per_second_.Add(labels);
    s.model_flops_per_second->Set(m.model_flops / m.step_seconds);
    // --peak-flops wins over the worker's table of devices.
    const double peak = peak_flops_ > 0 ? peak_flops_ : m.peak_flops;
    if (peak > 0) {
      if (s.mfu == nullptr) s.mfu = &mfu_.Add(labels);
      s.mfu->Set(m.model_flops / m.step_seconds / peak);
    }
  }
  s.step->Set(static_cast<double>(m.step));
  s.samples_per_second->Set(m.samples_per_second);
  s.loss->Set(m.loss);
  s.learning_rate->Set(m.learning_rate);
  s.samples->Increment(static_cast<double>(m.samples));
  s.step_seconds->Observe(m.step_seconds);
  s.data_seconds->Observe(m.data_seconds);
  s.compute_seconds->Observe(m.compute_seconds);
  s.optimizer_seconds->Observe(m.optimizer_seconds);
  s.param_bytes->Set(static_cast<double>(m.param_bytes));
  s.grad_bytes->Set(static_cast<double>(m.grad_bytes));
  s.optimizer_bytes->Set(static_cast<double>(m.optimizer_bytes));
  if (m.device_peak_bytes > 0 && s.device_peak_bytes == nullptr) {  // a CUDA rank
    s.device_allocated_bytes =
        &memory_bytes_.Add({{"job_id", job_id}, {"rank", std::to_string(m.rank)}, {"kind", "device_allocated"}});
    s.device_peak_bytes =
        &memory_bytes_.Add({{"job_id", job_id}, {"rank", std::to_string(m.rank)}, {"kind", "device_peak"}});
  }
  if (s.device_peak_bytes != nullptr) {
    s.device_allocated_bytes->Set(static_cast<double>(m.device_allocated_bytes));
    s.device_peak_bytes->Set(static_cast<double>(m.device_peak_bytes));
  }
  const std::map<std::string, std::string> labels = {{"job_id", job_id}, {"rank", std::to_string(m.rank)}};
  auto with = [&](const char* key, const char* value) {
    auto l = labels;
    l[key] = value;
    return l;
  };
  if (m.comm_fp32_bytes > 0 && s.comm_wire_bytes == nullptr) {  // DDP gradients travelled
    s.comm_wire_bytes = &comm_wire_bytes_.Add(labels);
    s.comm_fp32_bytes = &comm_fp32_bytes_.Add(labels);
    s.comm_ratio = &comm_ratio_.Add(labels);
    s.comm_hook_seconds = &comm_hook_seconds_.Add(labels);
  }
  if (s.comm_wire_bytes != nullptr) {
    s.comm_wire_bytes->Increment(static_cast<double>(m.comm_wire_bytes));
    s.comm_fp32_bytes->Increment(static_cast<double>(m.comm_fp32_bytes));
    if (m.comm_fp32_bytes > 0) s.comm_ratio->Set(static_cast<double>(m.comm_wire_bytes) / m.comm_fp32_bytes);
    s.comm_hook_seconds->Increment(m.comm_hook_seconds);
  }
  if (m.allgather_bytes + m.reduce_scatter_bytes > 0 && s.allgather_bytes == nullptr) {  // FSDP collectives
    s.allgather_bytes = &sharded_bytes_.Add(with("op", "all_gather"));
    s.reduce_scatter_bytes = &sharded_bytes_.Add(with("op", "reduce_scatter"));
    s.sharded_comm_seconds = &sharded_seconds_.Add(labels);
  }
  if (s.allgather_bytes != nullptr) {
    s.allgather_bytes->Increment(static_cast<double>(m.allgather_bytes));
    s.reduce_scatter_bytes->Increment(static_cast<double>(m.reduce_scatter_bytes));
    s.sharded_comm_seconds->Increment(m.sharded_comm_seconds);
  }
  if (!std::isnan(m.grad_norm)) {
    if (s.grad_norm == nullptr) s.grad_norm = &grad_norm_.Add(labels);
    s.grad_norm->Set(m.grad_norm);
  }
  if (!std::isnan(m.eval_loss)) {
    if (s.eval_loss == nullptr) s.eval_loss = &eval_loss_.Add(labels);
    s.eval_loss->Set(m.eval_loss);
  }
  RestartsOf(job_id);  // at 0 from the first step, so increase() sees the first restart
  RecoveryOf(job_id);
  for (const char* cause : {"restart", "lost_work", "checkpoint_blocking", "startup", "data_wait"}) {
    BadputOf(job_id, cause);
  }
}

ServerMetrics::RecoverySeries& ServerMetrics::RecoveryOf(const std::string& job_id) {
  auto it = recovery_series_.find(job_id);
  if (it == recovery_series_.end()) {
    it = recovery_series_
             .emplace(job_id, RecoverySeries{&recovery_seconds_.Add({{"job_id", job_id}}, RecoveryBuckets()),
                                             &lost_steps_.Add({{"job_id", job_id}})})
             .first;
  }
  return it->second;
}

prometheus::Counter& ServerMetrics::BadputOf(const std::string& job_id, const std::string& cause) {
  auto key = std::make_pair(job_id, cause);
  auto it = badput_series_.find(key);
  if (it == badput_series_.end()) {
    it = badput_series_.emplace(key, &badput_.Add({{"job_id", job_id}, {"cause", cause}})).first;
  }
  return *it->second;
}

void ServerMetrics::RecordCheckpoint(const std::string& job_id, const CheckpointEvent& c) {
  static const prometheus::Histogram::BucketBoundaries kBuckets = {0.01, 0.05, 0.1, 0.25, 0.5, 1,   2.5,
                                                                   5,    10,   30,  60,   120, 300, 900};
  std::lock_guard<std::mutex> lock(mu_);
  const std::string type = CheckpointTypeName(c.type);
  checkpoints_.Add({{"type", type}, {"result", c.ok ? "ok" : "failed"}}).Increment();
  if (!c.ok) return;
  checkpoint_bytes_.Add({}).Increment(static_cast<double>(c.bytes));
  checkpoint_duration_.Add({{"type", type}}, kBuckets).Observe(c.seconds);
  auto it = checkpoint_series_.find(job_id);
  if (it == checkpoint_series_.end()) {
    const std::map<std::string, std::string> labels = {{"job_id", job_id}};
    it =
        checkpoint_series_
            .emplace(job_id,
                     CheckpointSeries{&last_checkpoint_step_.Add(labels), &last_checkpoint_time_.Add(labels),
                                      &last_checkpoint_bytes_.Add(labels), &last_checkpoint_seconds_.Add(labels),
                                      &last_checkpoint_blocking_.Add(labels), &last_checkpoint_host_bytes_.Add(labels)})
            .first;
  }
  it->second.step->Set(static_cast<double>(c.step));
  it->second.timestamp->Set(static_cast<double>(c.unix_millis) / 1000.0);
  it->second.bytes->Set(static_cast<double>(c.bytes));
  it->second.seconds->Set(c.seconds);
  it->second.blocking->Set(c.blocking_seconds);
  it->second.host_bytes->Set(static_cast<double>(c.host_bytes));
}

prometheus::Counter& ServerMetrics::RestartsOf(const std::string& job_id) {
  auto it = restart_series_.find(job_id);
  if (it == restart_series_.end()) it = restart_series_.emplace(job_id, &restarts_.Add({{"job_id", job_id}})).first;
  return *it->second;
}

void ServerMetrics::CountRestart(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  RestartsOf(job_id).Increment();
  restarts_all_.Add({}).Increment();
}

void ServerMetrics::RecordRecovery(const std::string& job_id, double seconds, int64_t lost_steps) {
  std::lock_guard<std::mutex> lock(mu_);
  RecoverySeries& r = RecoveryOf(job_id);
  r.seconds->Observe(seconds);
  r.lost_steps->Increment(static_cast<double>(lost_steps));
  recovery_all_.Add({}, RecoveryBuckets()).Observe(seconds);
  lost_steps_all_.Add({}).Increment(static_cast<double>(lost_steps));
}

void ServerMetrics::AddBadput(const std::string& job_id, const char* cause, double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  prometheus::Counter& c = BadputOf(job_id, cause);
  if (seconds > 0) c.Increment(seconds);
}

void ServerMetrics::SetGoodput(const std::string& job_id, double goodput) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = goodput_series_.find(job_id);
  if (it == goodput_series_.end()) it = goodput_series_.emplace(job_id, &goodput_.Add({{"job_id", job_id}})).first;
  it->second->Set(goodput);
}

void ServerMetrics::RemoveJob(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto r = restart_series_.find(job_id); r != restart_series_.end()) {
    restarts_.Remove(r->second);
    restart_series_.erase(r);
  }
  for (auto b = badput_series_.lower_bound({job_id, ""}); b != badput_series_.end() && b->first.first == job_id;) {
    badput_.Remove(b->second);
    b = badput_series_.erase(b);
  }
  if (auto r = recovery_series_.find(job_id); r != recovery_series_.end()) {
    recovery_seconds_.Remove(r->second.seconds);
    lost_steps_.Remove(r->second.lost_steps);
    recovery_series_.erase(r);
  }
  if (auto g = goodput_series_.find(job_id); g != goodput_series_.end()) {
    goodput_.Remove(g->second);
    goodput_series_.erase(g);
  }
  if (auto c = checkpoint_series_.find(job_id); c != checkpoint_series_.end()) {
    last_checkpoint_step_.Remove(c->second.step);
    last_checkpoint_time_.Remove(c->second.timestamp);
    last_checkpoint_bytes_.Remove(c->second.bytes);
    last_checkpoint_seconds_.Remove(c->second.seconds);
    last_checkpoint_blocking_.Remove(c->second.blocking);
    last_checkpoint_host_bytes_.Remove(c->second.host_bytes);
    checkpoint_series_.erase(c);
  }
  for (auto it = series_.begin(); it != series_.end();) {
    if (it->first.first != job_id) {
      ++it;
      continue;
    }
    RankSeries& s = it->second;
    step_.Remove(s.step);
    samples_per_second_.Remove(s.samples_per_second);
    loss_.Remove(s.loss);
    learning_rate_.Remove(s.learning_rate);
    samples_.Remove(s.samples);
    for (auto* h : {s.step_seconds, s.data_seconds, s.compute_seconds, s.optimizer_seconds}) {
      step_duration_.Remove(h);
    }
    if (s.comm_wire_bytes != nullptr) {
      comm_wire_bytes_.Remove(s.comm_wire_bytes);
      comm_fp32_bytes_.Remove(s.comm_fp32_bytes);
      comm_ratio_.Remove(s.comm_ratio);
      comm_hook_seconds_.Remove(s.comm_hook_seconds);
    }
    for (auto* g : {s.param_bytes, s.grad_bytes, s.optimizer_bytes}) memory_bytes_.Remove(g);
    if (s.model_flops_per_second != nullptr) model_flops_per_second_.Remove(s.model_flops_per_second);
    if (s.mfu != nullptr) mfu_.Remove(s.mfu);
    if (s.device_peak_bytes != nullptr) {
      memory_bytes_.Remove(s.device_allocated_bytes);
      memory_bytes_.Remove(s.device_peak_bytes);
    }
    if (s.allgather_bytes != nullptr) {
      sharded_bytes_.Remove(s.allgather_bytes);
      sharded_bytes_.Remove(s.reduce_scatter_bytes);
      sharded_seconds_.Remove(s.sharded_comm_seconds);
    }
    if (s.grad_norm != nullptr) grad_norm_.Remove(s.grad_norm);
    if (s.eval_loss != nullptr) eval_loss_.Remove(s.eval_loss);
    it = series_.erase(it);
  }
}

}  // namespace trainyard
