#include "server/jobs/queue_view.h"

#include <algorithm>

namespace trainyard {

QueuePage QueueView(const Scheduler& scheduler, JobTable& jobs, const Policy& policy, const ListScope& scope,
                    std::chrono::steady_clock::time_point now, std::chrono::system_clock::time_point wall, int32_t skip,
                    int32_t count) {
  QueuePage page;
  // In scope: counted; on the page: shown (only those cost an entry).
  auto shown = [&](const std::string& id) {
    const ActiveJob* job = jobs.Find(id);
    if (job == nullptr || !InScope(scope, job->record)) return false;
    const int64_t index = page.total++;
    return index >= skip && index - skip < count;
  };
  std::vector<QueuedJob>& out = page.jobs;
  for (Scheduler::QueueEntry& e : scheduler.Queue(now, shown)) {
    const ActiveJob* job = jobs.Find(e.id);
    QueuedJob q;
    q.job = job->record;
    q.position = e.position;
    q.priority_class = ClassName(policy, q.job.priority);
    q.local = e.demand.local;
    q.kind = e.demand.kind;
    q.reason = e.reason.empty() ? q.job.reason : e.reason;  // backing off: the job's own reason
    if (e.estimated_start) {
      q.estimated_start_unix_millis =
          std::chrono::duration_cast<std::chrono::milliseconds>((wall + (*e.estimated_start - now)).time_since_epoch())
              .count();
    }
    q.owner_usage = e.owner_usage;
    q.preemptible = job->spec.preemptible;
    out.push_back(std::move(q));
  }
  return page;
}

std::map<std::string, std::pair<int, int>> ClassCounts(const Policy& policy, JobTable& jobs) {
  std::map<std::string, std::pair<int, int>> classes;
  std::map<int64_t, std::string> names;
  for (const auto& [name, value] : policy.priority_classes) {
    classes[name];
    names.emplace(value, name);
  }
  auto class_of = [&](int64_t priority) -> std::pair<int, int>& {
    auto name = names.find(priority);
    return classes[name == names.end() ? std::to_string(priority) : name->second];
  };
  // Counted as they change, and the jobs out of the queue: not a walk of
  // every job held (the watchdog asks twice a second).
  for (const auto& [priority, queued] : jobs.queued_by_priority()) class_of(priority).first += queued;
  for (const std::string& id : jobs.started_ids()) {
    const ActiveJob* job = jobs.Find(id);
    if (job != nullptr && job->record.state != JobState::kQueued && job->attempt) {
      class_of(job->record.priority).second += job->record.num_processes;
    }
  }
  return classes;
}

std::vector<QuotaUse> UsageView(const Scheduler& scheduler, const Policy& policy, const ListScope& scope,
                                const Caller& by) {
  const QuotaLedger& ledger = scheduler.quotas();
  auto shown = [&](const std::string& name, bool group) {
    if (name.empty()) return false;
    if (scope.owners.empty() && scope.groups.empty()) return true;
    const auto& names = group ? scope.groups : scope.owners;
    return std::find(names.begin(), names.end(), name) != names.end() ||
           (group && std::find(by.groups.begin(), by.groups.end(), name) != by.groups.end());
  };
  std::map<std::pair<bool, std::string>, QuotaUse> rows;
  auto row = [&](const std::string& name, bool group) -> QuotaUse& {
    QuotaUse& u = rows[{group, name}];
    u.name = name;
    u.group = group;
    return u;
  };
  for (const auto& [name, in_use] : ledger.users()) {
    if (!shown(name, false)) continue;
    row(name, false).slots = in_use.slots;
    row(name, false).gpus = in_use.gpus;
  }
  for (const auto& [name, in_use] : ledger.groups()) {
    if (!shown(name, true)) continue;
    row(name, true).slots = in_use.slots;
    row(name, true).gpus = in_use.gpus;
  }
  auto quotas = [&](const std::map<std::string, Quota>& of, bool group) {
    for (const auto& [name, q] : of) {
      if (!shown(name, group)) continue;
      QuotaUse& u = row(name, group);
      u.slots_quota = q.slots.value_or(-1);
      u.gpus_quota = q.gpus.value_or(-1);
      u.queued_jobs_quota = q.queued_jobs.value_or(-1);
    }
  };
  quotas(policy.user_quotas, false);
  quotas(policy.group_quotas, true);
  if (!by.user.empty()) row(by.user, false);
  for (auto& [key, u] : rows) {
    if (!u.group) u.queued_jobs = scheduler.queued_of(u.name);
  }
  std::vector<QuotaUse> out;
  for (auto& [key, u] : rows) out.push_back(std::move(u));
  return out;
}

}  // namespace trainyard
