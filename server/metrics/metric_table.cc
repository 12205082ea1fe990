#include "server/metrics/metric_table.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "common/step_metrics.h"
#include "server/metrics/lock_times.h"

namespace trainyard {

const std::vector<double>& StepSecondsBuckets() {
  static const std::vector<double> kBuckets = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                               0.25,   0.5,   1,      2.5,   5,    10,    30,   60};
  return kBuckets;
}

const std::vector<double>& RecoverySecondsBuckets() {
  static const std::vector<double> kBuckets = {0.5, 1, 2, 3, 5, 7.5, 10, 15, 30, 60, 120, 300, 600};
  return kBuckets;
}

namespace {

using T = MetricType;
constexpr MetricType kNone = MetricType::kGauge;  // the step list's "not exported" (family "")
constexpr MetricType kGauge = MetricType::kGauge;
constexpr MetricType kCounter = MetricType::kCounter;
constexpr MetricType kHistogram = MetricType::kHistogram;

std::vector<MetricFamily> Build() {
  const std::vector<double> checkpoint_buckets = {0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900};
  std::vector<MetricFamily> t = {
      {"trainyard_coordinator_leader",
       T::kGauge,
       "1 when this coordinator leads (holds the lease of a shared store), 0 on standby",
       {},
       {},
       true},
      {"trainyard_coordinator_term", T::kGauge, "The leader's term as this coordinator last saw it", {}, {}, true},
      {"trainyard_jobs", T::kGauge, "Jobs known to the server, by state", {"state"}, {}},
      {"trainyard_job_submissions_total",
       T::kCounter,
       "Job submissions, by outcome (accepted or rejected)",
       {"outcome"},
       {}},
  };
  // The per-step families, in the list's order; families shared by several
  // numbers once, with the extra label of their first.
  std::map<std::string, size_t> seen;
#define TRAINYARD_STEP_FAMILY(type_, name_, init_, family_, kind_, label_, when_, help_)                              \
  if (std::string(family_) != "" && !seen.count(family_)) {                                                           \
    seen[family_] = t.size();                                                                                         \
    std::vector<std::string> labels = {"job_id", "rank"};                                                             \
    const std::string l = label_;                                                                                     \
    if (!l.empty()) labels.push_back(l.substr(0, l.find('=')));                                                       \
    t.push_back({family_, kind_, help_, labels, kind_ == kHistogram ? StepSecondsBuckets() : std::vector<double>{}}); \
  }
  TRAINYARD_STEP_NUMBERS(TRAINYARD_STEP_FAMILY)
#undef TRAINYARD_STEP_FAMILY
  (void)kNone;
  const std::vector<MetricFamily> rest = {
      {"trainyard_job_comm_compression_ratio",
       T::kGauge,
       "Wire bytes / fp32-equivalent bytes of gradient communication at the last step",
       {"job_id", "rank"},
       {}},
      {"trainyard_job_value",
       T::kGauge,
       "A named number a script job reports with its steps (trainyard.report(step, name=value)), at its last step",
       {"job_id", "rank", "name"},
       {}},
      {"trainyard_job_model_flops_per_second",
       T::kGauge,
       "Model FLOPs per second of the rank's last step (3x its forward pass)",
       {"job_id", "rank"},
       {}},
      {"trainyard_job_mfu",
       T::kGauge,
       "Model FLOPs utilization of the rank's last step: its model FLOP/s over the peak FLOP/s of its device "
       "(--peak-flops, else the worker's table of devices)",
       {"job_id", "rank"},
       {}},
      {"trainyard_checkpoints_total",
       T::kCounter,
       "Checkpoints attempted, by type (full, sharded) and result (ok, failed)",
       {"type", "result"},
       {}},
      {"trainyard_checkpoint_bytes_total", T::kCounter, "Bytes of committed checkpoints", {}, {}},
      {"trainyard_checkpoint_duration_seconds",
       T::kHistogram,
       "Wall time of committed checkpoints, by type",
       {"type"},
       checkpoint_buckets},
      {"trainyard_job_last_checkpoint_step", T::kGauge, "Step of the job's last committed checkpoint", {"job_id"}, {}},
      {"trainyard_job_last_checkpoint_timestamp_seconds",
       T::kGauge,
       "Unix time of the job's last committed checkpoint",
       {"job_id"},
       {}},
      {"trainyard_job_last_checkpoint_bytes", T::kGauge, "Size of the job's last committed checkpoint", {"job_id"}, {}},
      {"trainyard_job_last_checkpoint_duration_seconds",
       T::kGauge,
       "Wall time of the job's last committed checkpoint",
       {"job_id"},
       {}},
      {"trainyard_job_last_checkpoint_blocking_seconds",
       T::kGauge,
       "Of that, the time training waited for it",
       {"job_id"},
       {}},
      {"trainyard_job_last_checkpoint_host_bytes",
       T::kGauge,
       "Host memory rank 0's copy of the job's last asynchronous checkpoint took",
       {"job_id"},
       {}},
      {"trainyard_job_restarts_total",
       T::kCounter,
       "Whole-group restarts of the job from its latest checkpoint after a failure or hang",
       {"job_id"},
       {}},
      {"trainyard_restarts_total", T::kCounter, "Whole-group restarts of all jobs since the server started", {}, {}},
      {"trainyard_job_recovery_seconds",
       T::kHistogram,
       "The job's recoveries: from a failure (or stop) detected to the first step of the next attempt",
       {"job_id"},
       RecoverySecondsBuckets()},
      {"trainyard_recovery_seconds",
       T::kHistogram,
       "Recoveries of all jobs: from a failure (or stop) detected to the first step of the next attempt",
       {},
       RecoverySecondsBuckets()},
      {"trainyard_job_lost_steps_total",
       T::kCounter,
       "Steps the job trained again after restarts: trained before, past the checkpoint it resumed from",
       {"job_id"},
       {}},
      {"trainyard_lost_steps_total", T::kCounter, "Steps all jobs trained again after restarts", {}, {}},
      {"trainyard_job_badput_seconds_total",
       T::kCounter,
       "Wall time the job did not spend on steps it kept, by cause: restart, lost_work, checkpoint_blocking, startup, "
       "data_wait",
       {"job_id", "cause"},
       {}},
      {"trainyard_job_goodput",
       T::kGauge,
       "Share of the job's wall time since it first started spent on steps that were kept",
       {"job_id"},
       {}},
      {"trainyard_job_replicas",
       T::kGauge,
       "Replicas of a fault_tolerance.mode replica job: live (members of its membership) and healing (lost, being "
       "replaced)",
       {"job_id", "state"},
       {}},
      {"trainyard_job_heals_total",
       T::kCounter,
       "Replicas of the job replaced and healed: the replacement committed its first step",
       {"job_id"},
       {}},
      {"trainyard_job_heal_seconds",
       T::kHistogram,
       "The job's heals: from a replica's loss to its replacement's first committed step",
       {"job_id"},
       RecoverySecondsBuckets()},
      {"trainyard_job_world_size",
       T::kGauge,
       "Ranks that train together now: the members of a replica job's membership",
       {"job_id"},
       {}},
      {"trainyard_coordinator_lock_wait_seconds",
       T::kHistogram,
       "How long a request, worker message or watchdog pass waited for the coordinator's lock",
       {},
       std::vector<double>(LockTimes::kBuckets.begin(), LockTimes::kBuckets.end())},
      {"trainyard_coordinator_lock_hold_seconds",
       T::kHistogram,
       "How long one request, worker message or watchdog pass held the coordinator's lock (the others wait)",
       {},
       std::vector<double>(LockTimes::kBuckets.begin(), LockTimes::kBuckets.end())},
      {"trainyard_job_rank_info",
       T::kGauge,
       "1 for each rank of the job's current attempt, labelled with the node it runs on (as it said when it "
       "connected); jobs within --metrics-per-rank-max-ranks",
       {"job_id", "rank", "node"},
       {}},
      {"trainyard_job_reporting_ranks",
       T::kGauge,
       "Ranks of a job above --metrics-per-rank-max-ranks that reported a step (their aggregates' count)",
       {"job_id"},
       {}},
      {"trainyard_job_slowest_rank",
       T::kGauge,
       "A job above --metrics-per-rank-max-ranks: the rank with the place-th longest forward pass at its last "
       "step (place 1: the slowest)",
       {"job_id", "place"},
       {}},
      {"trainyard_job_slowest_rank_forward_seconds",
       T::kGauge,
       "A job above --metrics-per-rank-max-ranks: the forward pass of the place-th slowest rank's last step",
       {"job_id", "place"},
       {}},
      {"trainyard_job_membership_epoch",
       T::kGauge,
       "The epoch of the job's current membership (1: every launch rank; one more with every change)",
       {"job_id"},
       {}},
      {"trainyard_user_queued_jobs", T::kGauge, "Jobs of the user waiting in the queue", {"user"}, {}},
      {"trainyard_user_slots_in_use",
       T::kGauge,
       "CPU slots (ranks of CPU jobs, every launcher) the user's running jobs take",
       {"user"},
       {}},
      {"trainyard_user_gpus_in_use", T::kGauge, "GPUs (ranks of CUDA jobs) the user's running jobs take", {"user"}, {}},
      {"trainyard_user_fair_share_usage",
       T::kGauge,
       "The user's recent usage in rank-seconds, decaying with --fair-share-half-life: lower goes first among equal "
       "priorities",
       {"user"},
       {}},
      {"trainyard_user_quota",
       T::kGauge,
       "The user's quota from the policy file, by resource (slots, gpus, queued_jobs); absent: no limit",
       {"user", "resource"},
       {}},
      {"trainyard_group_queued_jobs", T::kGauge, "Jobs of the group waiting in the queue", {"group"}, {}},
      {"trainyard_group_slots_in_use", T::kGauge, "CPU slots the group's running jobs take", {"group"}, {}},
      {"trainyard_group_gpus_in_use", T::kGauge, "GPUs the group's running jobs take", {"group"}, {}},
      {"trainyard_group_quota",
       T::kGauge,
       "The group's quota from the policy file, by resource (slots, gpus, queued_jobs); absent: no limit",
       {"group", "resource"},
       {}},
      {"trainyard_class_queued_jobs", T::kGauge, "Jobs waiting in the queue, by priority class", {"class"}, {}},
      {"trainyard_class_running_ranks", T::kGauge, "Ranks of running jobs, by priority class", {"class"}, {}},
      {"trainyard_preemptions_total",
       T::kCounter,
       "Jobs of the user the scheduler preempted for jobs of higher priority (or to reclaim borrowed quota)",
       {"user"},
       {}},
      {"trainyard_permission_denied_total",
       T::kCounter,
       "Requests refused because the job was not the caller's, by caller",
       {"user"},
       {}},
  };
  t.insert(t.end(), rest.begin(), rest.end());
  return t;
}

}  // namespace

const std::vector<MetricFamily>& MetricTable() {
  static const std::vector<MetricFamily> kTable = Build();
  return kTable;
}

const MetricFamily& MetricNamed(const std::string& name) {
  for (const MetricFamily& f : MetricTable()) {
    if (f.name == name) return f;
  }
  std::fprintf(stderr, "metric_table: no family %s\n", name.c_str());
  std::abort();
}

const char* MetricTypeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter: return "counter";
    case MetricType::kGauge: return "gauge";
    case MetricType::kHistogram: return "histogram";
  }
  return "untyped";
}

}  // namespace trainyard
