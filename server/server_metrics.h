// ServerMetrics: the Prometheus series the coordinator exports.
//
// Per server: trainyard_jobs{state}, submissions, checkpoints by type and
// result, checkpoint bytes and durations, restarts, recoveries and lost
// steps. Per job and rank: step, samples/s,
// loss, samples total and step-duration histograms split by phase, gradient
// communication, memory, FSDP collectives. Per job: the last checkpoint's
// step, time, bytes and duration. A job's series are removed when it ends
// (RemoveJob). Thread-safe.
#ifndef TRAINYARD_SERVER_SERVER_METRICS_H_
#define TRAINYARD_SERVER_SERVER_METRICS_H_

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/job_state.h"
#include "common/step_metrics.h"

namespace trainyard {

class ServerMetrics {
 public:
  explicit ServerMetrics(std::shared_ptr<prometheus::Registry> registry);
  // Peak FLOP/s of one device (one rank's share of the hardware), for
  // trainyard_job_mfu; 0: MFU is not exported.
  void SetPeakFlops(double peak);

  void SetJobCounts(const std::map<JobState, int>& counts);
  void RecordStep(const std::string& job_id, const StepMetrics& m);
  void CountSubmitted();
  void CountRejected();
  void RecordCheckpoint(const std::string& job_id, const CheckpointEvent& c);
  void CountRestart(const std::string& job_id);
  // Share of the job's wall time (since it first started) spent on steps
  // that were kept (not lost to a failure after the last checkpoint).
  void SetGoodput(const std::string& job_id, double goodput);
  // A requeued job's new attempt made its first step: `seconds` from the
  // failure (or stop) being detected, and the steps it trains again
  // (trained before, past the checkpoint it resumed from).
  void RecordRecovery(const std::string& job_id, double seconds, int64_t lost_steps);
  // Wall time the job did not spend on steps it kept, by cause: `restart`
  // (from a failure or stop to the next attempt's first step), `lost_work`
  // (steps trained after the last checkpoint of an attempt that ended),
  // `checkpoint_blocking` (saves, which block training), `startup` (launch
  // to the first step), `data_wait` (rank 0 waiting for batches).
  void AddBadput(const std::string& job_id, const char* cause, double seconds);
  void RemoveJob(const std::string& job_id);

  prometheus::Registry& registry() { return *registry_; }

 private:
  // Series that apply to every job are made with the rank's first sample;
  // the others (null until then) when the job first reports them: DDP
  // communication, FSDP collectives, gradient norm, held-out loss.
  struct RankSeries {
    prometheus::Gauge* step;
    prometheus::Gauge* samples_per_second;
    prometheus::Gauge* loss;
    prometheus::Gauge* learning_rate;
    prometheus::Counter* samples;
    prometheus::Histogram* step_seconds;
    prometheus::Histogram* data_seconds;
    prometheus::Histogram* compute_seconds;
    prometheus::Histogram* optimizer_seconds;
    prometheus::Counter* comm_wire_bytes;
    prometheus::Counter* comm_fp32_bytes;
    prometheus::Gauge* comm_ratio;
    prometheus::Counter* comm_hook_seconds;
    prometheus::Gauge* param_bytes;
    prometheus::Gauge* grad_bytes;
    prometheus::Gauge* optimizer_bytes;
    prometheus::Gauge* device_allocated_bytes;  // null until a CUDA rank reports
    prometheus::Gauge* device_peak_bytes;
    prometheus::Counter* allgather_bytes;
    prometheus::Counter* reduce_scatter_bytes;
    prometheus::Counter* sharded_comm_seconds;
    prometheus::Gauge* grad_norm;
    prometheus::Gauge* eval_loss;
    prometheus::Gauge* model_flops_per_second;  // null until a rank reports model FLOPs
    prometheus::Gauge* mfu;                     // null without a peak
  };
  RankSeries& SeriesFor(const std::string& job_id, int32_t rank);  // REQUIRES: mu_ held
  struct CheckpointSeries {
    prometheus::Gauge* step;
    prometheus::Gauge* timestamp;
    prometheus::Gauge* bytes;
    prometheus::Gauge* seconds;
    prometheus::Gauge* blocking;
    prometheus::Gauge* host_bytes;
  };

  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Gauge>& jobs_;
  prometheus::Family<prometheus::Counter>& submitted_;
  prometheus::Family<prometheus::Gauge>& step_;
  prometheus::Family<prometheus::Gauge>& samples_per_second_;
  prometheus::Family<prometheus::Gauge>& loss_;
  prometheus::Family<prometheus::Gauge>& learning_rate_;
  prometheus::Family<prometheus::Counter>& samples_;
  prometheus::Family<prometheus::Histogram>& step_duration_;
  prometheus::Family<prometheus::Counter>& comm_wire_bytes_;
  prometheus::Family<prometheus::Counter>& comm_fp32_bytes_;
  prometheus::Family<prometheus::Gauge>& comm_ratio_;
  prometheus::Family<prometheus::Counter>& comm_hook_seconds_;
  prometheus::Family<prometheus::Gauge>& memory_bytes_;
  prometheus::Family<prometheus::Counter>& sharded_bytes_;
  prometheus::Family<prometheus::Counter>& sharded_seconds_;
  prometheus::Family<prometheus::Gauge>& grad_norm_;
  prometheus::Family<prometheus::Gauge>& eval_loss_;
  prometheus::Family<prometheus::Counter>& checkpoints_;
  prometheus::Family<prometheus::Counter>& checkpoint_bytes_;
  prometheus::Family<prometheus::Histogram>& checkpoint_duration_;
  prometheus::Family<prometheus::Gauge>& last_checkpoint_step_;
  prometheus::Family<prometheus::Gauge>& last_checkpoint_time_;
  prometheus::Family<prometheus::Gauge>& last_checkpoint_bytes_;
  prometheus::Family<prometheus::Gauge>& last_checkpoint_seconds_;
  prometheus::Family<prometheus::Gauge>& last_checkpoint_blocking_;
  prometheus::Family<prometheus::Gauge>& last_checkpoint_host_bytes_;
  prometheus::Family<prometheus::Counter>& restarts_;      // per job
  prometheus::Family<prometheus::Counter>& restarts_all_;  // server-wide
  prometheus::Family<prometheus::Gauge>& goodput_;
  std::map<std::string, prometheus::Gauge*> goodput_series_;     // guarded by mu_
  std::map<std::string, prometheus::Counter*> restart_series_;   // guarded by mu_
  prometheus::Family<prometheus::Histogram>& recovery_seconds_;  // per job
  prometheus::Family<prometheus::Histogram>& recovery_all_;      // server-wide
  prometheus::Family<prometheus::Counter>& lost_steps_;          // per job
  prometheus::Family<prometheus::Counter>& lost_steps_all_;      // server-wide
  struct RecoverySeries {
    prometheus::Histogram* seconds;
    prometheus::Counter* lost_steps;
  };
  // A job's recovery and badput series, made at 0 with its first step (so
  // that increase() sees the first one). REQUIRE mu_ held.
  RecoverySeries& RecoveryOf(const std::string& job_id);
  prometheus::Counter& BadputOf(const std::string& job_id, const std::string& cause);
  std::map<std::string, RecoverySeries> recovery_series_;  // guarded by mu_
  prometheus::Family<prometheus::Counter>& badput_;
  std::map<std::pair<std::string, std::string>, prometheus::Counter*> badput_series_;  // guarded by mu_
  prometheus::Family<prometheus::Gauge>& model_flops_per_second_;
  prometheus::Family<prometheus::Gauge>& mfu_;
  double peak_flops_ = 0;                                      // guarded by mu_
  prometheus::Counter& RestartsOf(const std::string& job_id);  // REQUIRES: mu_ held

  std::mutex mu_;
  std::map<std::pair<std::string, int32_t>, RankSeries> series_;  // guarded by mu_
  std::map<std::string, CheckpointSeries> checkpoint_series_;     // guarded by mu_
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_SERVER_METRICS_H_
