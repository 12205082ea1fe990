// ServerMetrics: the Prometheus series the coordinator exports, in the
// families of server/metrics/metric_table.h (registered from that table).
//
// Per server: jobs by state, submissions, checkpoints by type and result,
// checkpoint bytes and durations, restarts, recoveries and lost steps. Per
// job and rank: the numbers of each step (common/step_metrics.h) and what
// follows from them (compression ratio, model FLOP/s, MFU). Per job: the
// last checkpoint, restarts, recoveries, badput, goodput. A job's series are
// removed when it ends (RemoveJob). Thread-safe.
//
// A job with more ranks than the per-rank limit (SetPerRankLimit) exports
// its step numbers as aggregates instead, so that /metrics stays small at
// thousands of ranks: each gauge as its minimum, median and maximum over
// the ranks' last samples (label `aggregate`), each counter summed and each
// histogram observed over every rank (no `rank` label), the k ranks with
// the longest forward pass (trainyard_job_slowest_rank*), and the number of
// ranks reporting. The gauges' aggregates are computed at each scrape.
#ifndef TRAINYARD_SERVER_METRICS_SERVER_METRICS_H_
#define TRAINYARD_SERVER_METRICS_SERVER_METRICS_H_

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/job_state.h"
#include "common/policy.h"
#include "common/step_metrics.h"
#include "server/metrics/metric_table.h"
#include "server/scheduling/scheduler.h"

namespace trainyard {

class ServerMetrics {
 public:
  explicit ServerMetrics(std::shared_ptr<prometheus::Registry> registry);
  ~ServerMetrics();
  ServerMetrics(const ServerMetrics&) = delete;
  ServerMetrics& operator=(const ServerMetrics&) = delete;
  // Peak FLOP/s of one device (one rank's share of the hardware), for
  // trainyard_job_mfu; 0: the ranks' own (reported with each step).
  void SetPeakFlops(double peak);
  // The peak FLOP/s MFU divides by for a rank's sample: --peak-flops when
  // set, else what the rank reported.
  double PeakFlopsOf(const StepMetrics& m) const;
  // Jobs of more than `max_ranks` ranks export aggregates, with the
  // `slowest` ranks named (see above).
  void SetPerRankLimit(int32_t max_ranks, int32_t slowest);
  // The job's attempt runs `ranks` ranks: per-rank series or aggregates
  // from now on (a job that crosses the limit loses the series of the
  // other kind). A job never sized has per-rank series.
  void SetJobRanks(const std::string& job_id, int32_t ranks);

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
  // fault_tolerance.mode replica: the job's replicas now (live: members of
  // membership `epoch`, also the world size; healing: being replaced).
  void SetReplicas(const std::string& job_id, int live, int healing, int64_t epoch);
  // A replacement committed its first step `seconds` after its rank was lost.
  void RecordHeal(const std::string& job_id, double seconds);
  // Where each rank of the job's current attempt runs: the series of
  // trainyard_job_rank_info (a rank that moved keeps only its new one).
  void SetRankNode(const std::string& job_id, int32_t rank, const std::string& node);
  void RemoveJob(const std::string& job_id);

  // The scheduler's numbers per user and group (users without a name are
  // left out); a user or group no longer given loses its series.
  void SetSchedulerUsage(const std::map<std::string, Scheduler::Usage>& users,
                         const std::map<std::string, Scheduler::Usage>& groups);
  // Queued jobs and running ranks per priority class.
  void SetClassCounts(const std::map<std::string, std::pair<int, int>>& queued_and_running);
  // The policy's quotas; the per-user counters of `users` start at 0 (so
  // that increase() sees their first event).
  void SetPolicy(const Policy& policy);
  void CountPreemption(const std::string& user);
  void CountDenied(const std::string& user);

  // Every series: the server's and each job's, one family per name (what
  // /metrics serves).
  std::vector<prometheus::MetricFamily> Collect() const;
  // The same for the Exposer; valid while this lives.
  std::shared_ptr<prometheus::Collectable> collectable() { return exported_; }

 private:
  using Labels = std::map<std::string, std::string>;
  // A job's series live in a registry of the job's own, with every family
  // of the table: a job's end drops it whole (prometheus-cpp removes one
  // series by a search of its whole family), and Collect merges them into
  // the server's families.
  struct JobSeries {
    std::shared_ptr<prometheus::Registry> registry;
    std::map<std::string, prometheus::Family<prometheus::Gauge>*> gauges;
    std::map<std::string, prometheus::Family<prometheus::Counter>*> counters;
    std::map<std::string, prometheus::Family<prometheus::Histogram>*> histograms;
    std::map<std::string, void*> by_key;                         // family name + labels
    std::map<int32_t, std::pair<std::string, void*>> rank_info;  // rank -> node and its series
    // Above the per-rank limit: each rank's last sample (the gauges'
    // aggregates are computed from them at a scrape), and the job's series
    // of the counters and histograms, by their place in the step list.
    bool aggregated = false;
    std::map<int32_t, StepMetrics> last;
    std::vector<void*> numbers;
  };
  JobSeries& JobOf(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One rank's series of the step numbers, by their place in the list (null
  // until made), and the series derived from them.
  struct RankSeries {
    std::vector<void*> numbers;
    prometheus::Gauge* comm_ratio = nullptr;
    prometheus::Gauge* model_flops_per_second = nullptr;
    prometheus::Gauge* mfu = nullptr;
    std::set<std::string> value_names;  // trainyard_job_value series made
  };
  static constexpr size_t kMaxValueNames = 64;

  // The job's series of `family` with `labels`, made (at 0) when missing.
  prometheus::Gauge& JobGauge(const std::string& job_id, const std::string& family, const Labels& labels)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  prometheus::Counter& JobCounter(const std::string& job_id, const std::string& family, const Labels& labels)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  prometheus::Histogram& JobHistogram(const std::string& job_id, const std::string& family, const Labels& labels)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  template <typename T>
  T& JobSeriesOf(JobSeries& js, prometheus::Family<T>& family, const std::string& name, const Labels& labels,
                 const std::function<T&()>& add) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The per-job series that exist from a job's first step (at 0, so that
  // increase() sees the first event).
  void MakeJobSeries(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job's series of `family` (of `kind`) with `labels`, made.
  void* MakeSeries(const std::string& job_id, const char* family, MetricType kind, const Labels& labels)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A step of a job above the per-rank limit.
  void RecordAggregated(const std::string& job_id, JobSeries& js, const StepMetrics& m)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The aggregated job's gauges and slowest ranks, as families to merge.
  std::vector<prometheus::MetricFamily> CollectAggregates(const std::string& job_id, const JobSeries& js) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops the job's series (to the freer) and its ranks' state.
  void DropJob(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::shared_ptr<prometheus::Registry> registry_;
  // Every family of the table, by name (set up once in the constructor).
  std::map<std::string, prometheus::Family<prometheus::Gauge>*> gauges_;
  std::map<std::string, prometheus::Family<prometheus::Counter>*> counters_;
  std::map<std::string, prometheus::Family<prometheus::Histogram>*> histograms_;

  // Sets `family`'s series to `values` (label values → value) and removes
  // the ones it had that `values` lacks.
  void SetGauges(const std::string& family, const std::map<Labels, double>& values) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  double peak_flops_ ABSL_GUARDED_BY(mu_) = 0;
  int32_t per_rank_max_ranks_ ABSL_GUARDED_BY(mu_) = 64;
  int32_t slowest_ranks_ ABSL_GUARDED_BY(mu_) = 5;
  std::map<std::string, std::map<Labels, prometheus::Gauge*>> gauge_sets_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, JobSeries> jobs_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<std::string, int32_t>, RankSeries> ranks_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<prometheus::Collectable> exported_;  // calls Collect

  // Ended jobs' registries are freed here, not under the caller's locks (a
  // 10,000-rank job's 870,000 series take about half a second).
  void FreeRetired();
  absl::Mutex retired_mu_;
  std::vector<std::shared_ptr<prometheus::Registry>> retired_ ABSL_GUARDED_BY(retired_mu_);
  bool stopping_ ABSL_GUARDED_BY(retired_mu_) = false;
  std::thread freer_;
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_METRICS_SERVER_METRICS_H_
