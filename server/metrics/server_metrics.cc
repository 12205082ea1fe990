#include "server/metrics/server_metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "server/metrics/lock_times.h"
#include "server/metrics/metric_table.h"
#include "server/metrics/step_series.h"

namespace trainyard {
namespace {

using step_series::Derived;
using step_series::DerivedOf;
using step_series::ForEachNumber;
using step_series::kStepNumbers;
using step_series::WithLabel;

constexpr const char* kBadputCauses[] = {"restart", "lost_work", "checkpoint_blocking", "startup", "data_wait"};

std::string Key(const std::string& family, const std::map<std::string, std::string>& labels) {
  std::string key = family;
  for (const auto& [k, v] : labels) key += "\x1f" + k + "=" + v;
  return key;
}

void Update(void* series, MetricType kind, double value) {
  switch (kind) {
    case MetricType::kGauge: static_cast<prometheus::Gauge*>(series)->Set(value); break;
    case MetricType::kCounter: static_cast<prometheus::Counter*>(series)->Increment(value); break;
    case MetricType::kHistogram: static_cast<prometheus::Histogram*>(series)->Observe(value); break;
  }
}

// What the Exposer scrapes: the ServerMetrics' Collect.
class Exported final : public prometheus::Collectable {
 public:
  explicit Exported(const ServerMetrics* metrics) : metrics_(metrics) {}
  std::vector<prometheus::MetricFamily> Collect() const override { return metrics_->Collect(); }

 private:
  const ServerMetrics* const metrics_;
};

// Registers every family of the table in `registry`, into the three maps.
template <typename G, typename C, typename H>
void RegisterTable(prometheus::Registry& registry, G* gauges, C* counters, H* histograms) {
  for (const MetricFamily& f : MetricTable()) {
    if (f.coordinator) continue;
    switch (f.type) {
      case MetricType::kGauge:
        (*gauges)[f.name] = &prometheus::BuildGauge().Name(f.name).Help(f.help).Register(registry);
        break;
      case MetricType::kCounter:
        (*counters)[f.name] = &prometheus::BuildCounter().Name(f.name).Help(f.help).Register(registry);
        break;
      case MetricType::kHistogram:
        (*histograms)[f.name] = &prometheus::BuildHistogram().Name(f.name).Help(f.help).Register(registry);
        break;
    }
  }
}

}  // namespace

ServerMetrics::ServerMetrics(std::shared_ptr<prometheus::Registry> registry)
    : registry_(std::move(registry)), exported_(std::make_shared<Exported>(this)) {
  RegisterTable(*registry_, &gauges_, &counters_, &histograms_);
  freer_ = std::thread([this] { FreeRetired(); });
  // Server-wide series, at 0 from the start.
  counters_.at("trainyard_restarts_total")->Add({});
  counters_.at("trainyard_lost_steps_total")->Add({});
  histograms_.at("trainyard_recovery_seconds")->Add({}, RecoverySecondsBuckets());
  for (CheckpointType t : {CheckpointType::kFull, CheckpointType::kSharded}) {
    for (const char* result : {"ok", "failed"}) {
      counters_.at("trainyard_checkpoints_total")->Add({{"type", CheckpointTypeName(t)}, {"result", result}});
    }
  }
  for (JobState s : kAllJobStates) gauges_.at("trainyard_jobs")->Add({{"state", std::string(JobStateName(s))}});
  for (const char* outcome : {"accepted", "rejected"}) {
    counters_.at("trainyard_job_submissions_total")->Add({{"outcome", outcome}});
  }
}

ServerMetrics::~ServerMetrics() {
  {
    absl::MutexLock lock(&retired_mu_);
    stopping_ = true;
  }
  freer_.join();
}

void ServerMetrics::FreeRetired() {
  absl::MutexLock lock(&retired_mu_);
  for (;;) {
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(retired_mu_) { return stopping_ || !retired_.empty(); };
    retired_mu_.Await(absl::Condition(&ready));
    std::vector<std::shared_ptr<prometheus::Registry>> batch;
    batch.swap(retired_);
    retired_mu_.Unlock();
    batch.clear();  // the series go, outside every lock
    retired_mu_.Lock();
    if (stopping_ && retired_.empty()) return;
  }
}

double ServerMetrics::PeakFlopsOf(const StepMetrics& m) const {
  absl::MutexLock lock(&mu_);
  return peak_flops_ > 0 ? peak_flops_ : m.peak_flops;
}

void ServerMetrics::SetPeakFlops(double peak) {
  absl::MutexLock lock(&mu_);
  peak_flops_ = peak;
}

void ServerMetrics::SetJobCounts(const std::map<JobState, int>& counts) {
  for (JobState s : kAllJobStates) {
    auto it = counts.find(s);
    gauges_.at("trainyard_jobs")
        ->Add({{"state", std::string(JobStateName(s))}})
        .Set(it == counts.end() ? 0 : it->second);
  }
}

void ServerMetrics::CountSubmitted() {
  counters_.at("trainyard_job_submissions_total")->Add({{"outcome", "accepted"}}).Increment();
}
void ServerMetrics::CountRejected() {
  counters_.at("trainyard_job_submissions_total")->Add({{"outcome", "rejected"}}).Increment();
}

ServerMetrics::JobSeries& ServerMetrics::JobOf(const std::string& job_id) {
  JobSeries& js = jobs_[job_id];
  if (js.registry == nullptr) {
    js.registry = std::make_shared<prometheus::Registry>();
    RegisterTable(*js.registry, &js.gauges, &js.counters, &js.histograms);
  }
  return js;
}

template <typename T>
T& ServerMetrics::JobSeriesOf(JobSeries& js, prometheus::Family<T>& family, const std::string& name,
                              const Labels& labels, const std::function<T&()>& add) {
  void*& slot = js.by_key[Key(name, labels)];
  if (slot == nullptr) slot = &add();
  return *static_cast<T*>(slot);
}

prometheus::Gauge& ServerMetrics::JobGauge(const std::string& job_id, const std::string& family, const Labels& labels) {
  JobSeries& js = JobOf(job_id);
  auto& f = *js.gauges.at(family);
  return JobSeriesOf<prometheus::Gauge>(js, f, family, labels, [&]() -> prometheus::Gauge& { return f.Add(labels); });
}

prometheus::Counter& ServerMetrics::JobCounter(const std::string& job_id, const std::string& family,
                                               const Labels& labels) {
  JobSeries& js = JobOf(job_id);
  auto& f = *js.counters.at(family);
  return JobSeriesOf<prometheus::Counter>(js, f, family, labels,
                                          [&]() -> prometheus::Counter& { return f.Add(labels); });
}

prometheus::Histogram& ServerMetrics::JobHistogram(const std::string& job_id, const std::string& family,
                                                   const Labels& labels) {
  JobSeries& js = JobOf(job_id);
  auto& f = *js.histograms.at(family);
  const std::vector<double>& buckets = MetricNamed(family).buckets;
  return JobSeriesOf<prometheus::Histogram>(js, f, family, labels,
                                            [&]() -> prometheus::Histogram& { return f.Add(labels, buckets); });
}

void ServerMetrics::MakeJobSeries(const std::string& job_id) {
  const Labels job = {{"job_id", job_id}};
  JobCounter(job_id, "trainyard_job_restarts_total", job);
  JobHistogram(job_id, "trainyard_job_recovery_seconds", job);
  JobCounter(job_id, "trainyard_job_lost_steps_total", job);
  for (const char* cause : kBadputCauses)
    JobCounter(job_id, "trainyard_job_badput_seconds_total", {{"job_id", job_id}, {"cause", cause}});
}

void ServerMetrics::RecordStep(const std::string& job_id, const StepMetrics& m) {
  absl::MutexLock lock(&mu_);
  if (auto it = jobs_.find(job_id); it != jobs_.end() && it->second.aggregated) {
    RecordAggregated(job_id, it->second, m);
    return;
  }
  RankSeries& r = ranks_[{job_id, m.rank}];
  if (r.numbers.empty()) {
    MakeJobSeries(job_id);
    r.numbers.assign(kStepNumbers, nullptr);
  }
  const Labels labels = {{"job_id", job_id}, {"rank", std::to_string(m.rank)}};
  // Each number of the list: made with its first sample where `when` holds,
  // then set, increased or observed at each such sample.
  ForEachNumber(m, [&](size_t index, const char* family, MetricType kind, const char* label, bool when, double value)
                       ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
                         void*& slot = r.numbers[index];
                         if (*family == '\0' || !when) return;
                         if (slot == nullptr) slot = MakeSeries(job_id, family, kind, WithLabel(labels, label));
                         Update(slot, kind, value);
                       });
  // A script's named numbers, at most kMaxValueNames per rank.
  for (const auto& [name, value] : m.values) {
    if (r.value_names.size() >= kMaxValueNames && !r.value_names.count(name)) continue;
    r.value_names.insert(name);
    JobGauge(job_id, "trainyard_job_value", {{"job_id", job_id}, {"rank", labels.at("rank")}, {"name", name}})
        .Set(value);
  }
  // Derived from the numbers.
  const Derived d = DerivedOf(m, peak_flops_);
  if (d.comm_ratio) {
    if (r.comm_ratio == nullptr) r.comm_ratio = &JobGauge(job_id, "trainyard_job_comm_compression_ratio", labels);
    r.comm_ratio->Set(*d.comm_ratio);
  }
  if (d.model_flops_per_second) {
    if (r.model_flops_per_second == nullptr) {
      r.model_flops_per_second = &JobGauge(job_id, "trainyard_job_model_flops_per_second", labels);
    }
    r.model_flops_per_second->Set(*d.model_flops_per_second);
  }
  if (d.mfu) {
    if (r.mfu == nullptr) r.mfu = &JobGauge(job_id, "trainyard_job_mfu", labels);
    r.mfu->Set(*d.mfu);
  }
}

void* ServerMetrics::MakeSeries(const std::string& job_id, const char* family, MetricType kind, const Labels& labels) {
  switch (kind) {
    case MetricType::kGauge: return &JobGauge(job_id, family, labels);
    case MetricType::kCounter: return &JobCounter(job_id, family, labels);
    case MetricType::kHistogram: return &JobHistogram(job_id, family, labels);
  }
  return nullptr;
}

void ServerMetrics::RecordAggregated(const std::string& job_id, JobSeries& js, const StepMetrics& m) {
  if (js.numbers.empty()) {
    MakeJobSeries(job_id);
    js.numbers.assign(kStepNumbers, nullptr);
  }
  // Counters and histograms: one series for the job, fed by every rank.
  const Labels labels = {{"job_id", job_id}};
  ForEachNumber(m, [&](size_t index, const char* family, MetricType kind, const char* label, bool when, double value)
                       ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
                         if (*family == '\0' || !when || kind == MetricType::kGauge) return;
                         void*& slot = js.numbers[index];
                         if (slot == nullptr) slot = MakeSeries(job_id, family, kind, WithLabel(labels, label));
                         Update(slot, kind, value);
                       });
  // Gauges: the last sample, aggregated at a scrape. A script's named
  // numbers are capped as a rank's series are.
  StepMetrics& last = js.last[m.rank];
  std::map<std::string, double> values = std::move(last.values);
  last = m;
  for (const auto& [name, value] : m.values) {
    if (values.size() >= kMaxValueNames && !values.count(name)) continue;
    values[name] = value;
  }
  last.values = std::move(values);
}

std::vector<prometheus::MetricFamily> ServerMetrics::CollectAggregates(const std::string& job_id,
                                                                       const JobSeries& js) const {
  // Each exported gauge's values over the ranks, by (family, extra label).
  std::map<std::pair<std::string, std::string>, std::vector<double>> columns;
  std::vector<std::pair<double, int32_t>> forward;  // (seconds, rank)
  for (const auto& [rank, m] : js.last) {
    ForEachNumber(m, [&](size_t, const char* family, MetricType kind, const char* label, bool when, double value) {
      if (*family == '\0' || !when || kind != MetricType::kGauge) return;
      columns[{family, label}].push_back(value);
    });
    const Derived d = DerivedOf(m, peak_flops_);
    if (d.comm_ratio) columns[{"trainyard_job_comm_compression_ratio", ""}].push_back(*d.comm_ratio);
    if (d.model_flops_per_second) {
      columns[{"trainyard_job_model_flops_per_second", ""}].push_back(*d.model_flops_per_second);
    }
    if (d.mfu) columns[{"trainyard_job_mfu", ""}].push_back(*d.mfu);
    for (const auto& [name, value] : m.values) columns[{"trainyard_job_value", "name=" + name}].push_back(value);
    forward.emplace_back(m.forward_seconds, rank);
  }
  std::map<std::string, prometheus::MetricFamily> families;
  auto family_of = [&](const std::string& name) -> prometheus::MetricFamily& {
    prometheus::MetricFamily& f = families[name];
    if (f.name.empty()) {
      f.name = name;
      f.help = MetricNamed(name).help;
      f.type = prometheus::MetricType::Gauge;
    }
    return f;
  };
  auto add = [&](const std::string& name, Labels labels, double value) {
    prometheus::ClientMetric c;
    labels["job_id"] = job_id;
    for (const auto& [k, v] : labels) c.label.push_back({k, v});
    c.gauge.value = value;
    family_of(name).metric.push_back(std::move(c));
  };
  for (auto& [key, values] : columns) {
    const Labels extra = WithLabel({}, key.second.c_str());
    std::sort(values.begin(), values.end());
    const size_t n = values.size();
    const double median = n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
    for (auto [aggregate, value] : {std::pair{"min", values.front()}, {"median", median}, {"max", values.back()}}) {
      Labels l = extra;
      l["aggregate"] = aggregate;
      add(key.first, l, value);
    }
  }
  add("trainyard_job_reporting_ranks", {}, static_cast<double>(js.last.size()));
  // The slowest first; among equals the lowest rank.
  const size_t k = std::min(forward.size(), static_cast<size_t>(std::max(0, slowest_ranks_)));
  std::partial_sort(
      forward.begin(), forward.begin() + static_cast<std::ptrdiff_t>(k), forward.end(),
      [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; });
  for (size_t i = 0; i < k; ++i) {
    const std::string place = std::to_string(i + 1);
    add("trainyard_job_slowest_rank", {{"place", place}}, forward[i].second);
    add("trainyard_job_slowest_rank_forward_seconds", {{"place", place}}, forward[i].first);
  }
  std::vector<prometheus::MetricFamily> out;
  for (auto& [name, f] : families) out.push_back(std::move(f));
  return out;
}

void ServerMetrics::RecordCheckpoint(const std::string& job_id, const CheckpointEvent& c) {
  absl::MutexLock lock(&mu_);
  const std::string type = CheckpointTypeName(c.type);
  counters_.at("trainyard_checkpoints_total")->Add({{"type", type}, {"result", c.ok ? "ok" : "failed"}}).Increment();
  if (!c.ok) return;
  counters_.at("trainyard_checkpoint_bytes_total")->Add({}).Increment(static_cast<double>(c.bytes));
  histograms_.at("trainyard_checkpoint_duration_seconds")
      ->Add({{"type", type}}, MetricNamed("trainyard_checkpoint_duration_seconds").buckets)
      .Observe(c.seconds);
  const Labels job = {{"job_id", job_id}};
  JobGauge(job_id, "trainyard_job_last_checkpoint_step", job).Set(static_cast<double>(c.step));
  JobGauge(job_id, "trainyard_job_last_checkpoint_timestamp_seconds", job)
      .Set(static_cast<double>(c.unix_millis) / 1000.0);
  JobGauge(job_id, "trainyard_job_last_checkpoint_bytes", job).Set(static_cast<double>(c.bytes));
  JobGauge(job_id, "trainyard_job_last_checkpoint_duration_seconds", job).Set(c.seconds);
  JobGauge(job_id, "trainyard_job_last_checkpoint_blocking_seconds", job).Set(c.blocking_seconds);
  JobGauge(job_id, "trainyard_job_last_checkpoint_host_bytes", job).Set(static_cast<double>(c.host_bytes));
}

void ServerMetrics::CountRestart(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  JobCounter(job_id, "trainyard_job_restarts_total", {{"job_id", job_id}}).Increment();
  counters_.at("trainyard_restarts_total")->Add({}).Increment();
}

void ServerMetrics::RecordRecovery(const std::string& job_id, double seconds, int64_t lost_steps) {
  absl::MutexLock lock(&mu_);
  JobHistogram(job_id, "trainyard_job_recovery_seconds", {{"job_id", job_id}}).Observe(seconds);
  JobCounter(job_id, "trainyard_job_lost_steps_total", {{"job_id", job_id}}).Increment(static_cast<double>(lost_steps));
  histograms_.at("trainyard_recovery_seconds")->Add({}, RecoverySecondsBuckets()).Observe(seconds);
  counters_.at("trainyard_lost_steps_total")->Add({}).Increment(static_cast<double>(lost_steps));
}

void ServerMetrics::AddBadput(const std::string& job_id, const char* cause, double seconds) {
  absl::MutexLock lock(&mu_);
  prometheus::Counter& c =
      JobCounter(job_id, "trainyard_job_badput_seconds_total", {{"job_id", job_id}, {"cause", cause}});
  if (seconds > 0) c.Increment(seconds);
}

void ServerMetrics::SetGoodput(const std::string& job_id, double goodput) {
  absl::MutexLock lock(&mu_);
  JobGauge(job_id, "trainyard_job_goodput", {{"job_id", job_id}}).Set(goodput);
}

void ServerMetrics::SetReplicas(const std::string& job_id, int live, int healing, int64_t epoch) {
  absl::MutexLock lock(&mu_);
  const Labels job = {{"job_id", job_id}};
  JobGauge(job_id, "trainyard_job_replicas", {{"job_id", job_id}, {"state", "live"}}).Set(live);
  JobGauge(job_id, "trainyard_job_replicas", {{"job_id", job_id}, {"state", "healing"}}).Set(healing);
  JobGauge(job_id, "trainyard_job_world_size", job).Set(live);
  JobGauge(job_id, "trainyard_job_membership_epoch", job).Set(static_cast<double>(epoch));
  // From the first membership on, so that increase() sees the first heal.
  JobCounter(job_id, "trainyard_job_heals_total", job);
  JobHistogram(job_id, "trainyard_job_heal_seconds", job);
}

void ServerMetrics::RecordHeal(const std::string& job_id, double seconds) {
  absl::MutexLock lock(&mu_);
  const Labels job = {{"job_id", job_id}};
  JobCounter(job_id, "trainyard_job_heals_total", job).Increment();
  JobHistogram(job_id, "trainyard_job_heal_seconds", job).Observe(seconds);
}

void ServerMetrics::SetRankNode(const std::string& job_id, int32_t rank, const std::string& node) {
  absl::MutexLock lock(&mu_);
  JobSeries& js = JobOf(job_id);
  if (js.aggregated) return;  // where each of thousands of ranks runs: GetJob's places
  auto& family = *js.gauges.at("trainyard_job_rank_info");
  auto& [had_node, series] = js.rank_info[rank];
  if (series != nullptr && had_node == node) return;
  if (series != nullptr) family.Remove(static_cast<prometheus::Gauge*>(series));  // the rank moved
  prometheus::Gauge& g = family.Add({{"job_id", job_id}, {"rank", std::to_string(rank)}, {"node", node}});
  g.Set(1);
  had_node = node;
  series = &g;
}

void ServerMetrics::SetPerRankLimit(int32_t max_ranks, int32_t slowest) {
  absl::MutexLock lock(&mu_);
  per_rank_max_ranks_ = max_ranks;
  slowest_ranks_ = slowest;
}

void ServerMetrics::SetJobRanks(const std::string& job_id, int32_t ranks) {
  absl::MutexLock lock(&mu_);
  const bool aggregated = ranks > per_rank_max_ranks_;
  if (auto it = jobs_.find(job_id); it != jobs_.end() && it->second.aggregated != aggregated) {
    // Across the limit: the series of the other kind go (counters start
    // again at 0, which Prometheus reads as a reset).
    DropJob(job_id);
  }
  JobSeries& js = JobOf(job_id);
  js.aggregated = aggregated;
  // Ranks beyond a smaller attempt's size no longer count.
  js.last.erase(js.last.lower_bound(ranks), js.last.end());
}

void ServerMetrics::DropJob(const std::string& job_id) {
  auto it = jobs_.find(job_id);
  if (it != jobs_.end()) {
    {
      absl::MutexLock retired(&retired_mu_);
      retired_.push_back(std::move(it->second.registry));  // out of /metrics now; freed by freer_
    }
    jobs_.erase(it);
  }
  for (auto r = ranks_.lower_bound({job_id, INT32_MIN}); r != ranks_.end() && r->first.first == job_id;) {
    r = ranks_.erase(r);
  }
}

void ServerMetrics::RemoveJob(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  DropJob(job_id);
}

std::vector<prometheus::MetricFamily> ServerMetrics::Collect() const {
  std::vector<std::shared_ptr<prometheus::Registry>> job_registries;
  std::vector<prometheus::MetricFamily> aggregates;
  {
    absl::MutexLock lock(&mu_);
    job_registries.reserve(jobs_.size());
    for (const auto& [id, js] : jobs_) {
      job_registries.push_back(js.registry);
      if (!js.aggregated || js.last.empty()) continue;  // from the first step on
      for (prometheus::MetricFamily& f : CollectAggregates(id, js)) aggregates.push_back(std::move(f));
    }
  }
  // The server's families in the table's order, each job's series appended
  // to its family: one family per name, as the text format needs.
  std::vector<prometheus::MetricFamily> out = registry_->Collect();
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < out.size(); ++i) index.emplace(out[i].name, i);
  auto merge = [&](prometheus::MetricFamily& f) {
    if (f.metric.empty()) return;
    auto it = index.find(f.name);
    if (it == index.end()) {
      index.emplace(f.name, out.size());
      out.push_back(std::move(f));
      return;
    }
    auto& into = out[it->second].metric;
    into.insert(into.end(), std::make_move_iterator(f.metric.begin()), std::make_move_iterator(f.metric.end()));
  };
  for (const auto& r : job_registries) {
    for (prometheus::MetricFamily& f : r->Collect()) merge(f);
  }
  for (prometheus::MetricFamily& f : aggregates) merge(f);
  // The coordinator's lock.
  for (auto [name, h] : {std::pair{"trainyard_coordinator_lock_wait_seconds", CoordinatorLockTimes().waited()},
                         std::pair{"trainyard_coordinator_lock_hold_seconds", CoordinatorLockTimes().held()}}) {
    prometheus::MetricFamily f{name, MetricNamed(name).help, prometheus::MetricType::Histogram, {}};
    prometheus::ClientMetric c;
    c.histogram.sample_count = h.cumulative.back();
    c.histogram.sample_sum = h.sum;
    for (size_t i = 0; i < LockTimes::kBuckets.size(); ++i) {
      c.histogram.bucket.push_back({h.cumulative[i], LockTimes::kBuckets[i]});
    }
    c.histogram.bucket.push_back({h.cumulative.back(), std::numeric_limits<double>::infinity()});
    f.metric.push_back(std::move(c));
    merge(f);
  }
  return out;
}

void ServerMetrics::SetGauges(const std::string& family, const std::map<Labels, double>& values) {
  prometheus::Family<prometheus::Gauge>* f = gauges_.at(family);
  auto& had = gauge_sets_[family];
  for (auto it = had.begin(); it != had.end();) {
    if (values.count(it->first)) {
      ++it;
      continue;
    }
    f->Remove(it->second);
    it = had.erase(it);
  }
  for (const auto& [labels, value] : values) {
    prometheus::Gauge*& g = had[labels];
    if (g == nullptr) g = &f->Add(labels);
    g->Set(value);
  }
}

void ServerMetrics::SetSchedulerUsage(const std::map<std::string, Scheduler::Usage>& users,
                                      const std::map<std::string, Scheduler::Usage>& groups) {
  absl::MutexLock lock(&mu_);
  // The same numbers per user and per group (users also have fair share).
  for (auto [label, by_name] : {std::pair{"user", &users}, std::pair{"group", &groups}}) {
    const std::string prefix = absl::StrCat("trainyard_", label, "_");
    std::map<Labels, double> queued, slots, gpus, usage;
    for (const auto& [name, u] : *by_name) {
      if (name.empty()) continue;  // jobs of nobody (a server without users)
      const Labels l = {{label, name}};
      queued[l] = u.queued;
      slots[l] = u.slots;
      gpus[l] = u.gpus;
      usage[l] = u.rank_seconds;
    }
    SetGauges(prefix + "queued_jobs", queued);
    SetGauges(prefix + "slots_in_use", slots);
    SetGauges(prefix + "gpus_in_use", gpus);
    if (by_name == &users) SetGauges(prefix + "fair_share_usage", usage);
  }
}

void ServerMetrics::SetClassCounts(const std::map<std::string, std::pair<int, int>>& queued_and_running) {
  absl::MutexLock lock(&mu_);
  std::map<Labels, double> queued, running;
  for (const auto& [name, counts] : queued_and_running) {
    queued[{{"class", name}}] = counts.first;
    running[{{"class", name}}] = counts.second;
  }
  SetGauges("trainyard_class_queued_jobs", queued);
  SetGauges("trainyard_class_running_ranks", running);
}

void ServerMetrics::SetPolicy(const Policy& policy) {
  for (const PolicyUser& u : policy.users) {
    counters_.at("trainyard_preemptions_total")->Add({{"user", u.name}});
    counters_.at("trainyard_permission_denied_total")->Add({{"user", u.name}});
  }
  const auto& users = policy.user_quotas;
  const auto& groups = policy.group_quotas;
  absl::MutexLock lock(&mu_);
  for (auto [family, label, quotas] :
       {std::tuple{"trainyard_user_quota", "user", &users}, std::tuple{"trainyard_group_quota", "group", &groups}}) {
    std::map<Labels, double> values;
    for (const auto& [name, q] : *quotas) {
      for (auto [resource, limit] : {std::pair{"slots", q.slots}, {"gpus", q.gpus}, {"queued_jobs", q.queued_jobs}}) {
        if (limit) values[{{label, name}, {"resource", resource}}] = static_cast<double>(*limit);
      }
    }
    SetGauges(family, values);
  }
}

void ServerMetrics::CountPreemption(const std::string& user) {
  counters_.at("trainyard_preemptions_total")->Add({{"user", user}}).Increment();
}

void ServerMetrics::CountDenied(const std::string& user) {
  counters_.at("trainyard_permission_denied_total")->Add({{"user", user}}).Increment();
}

}  // namespace trainyard
