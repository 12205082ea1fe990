#include "server/jobs/queue_view.h"

namespace trainyard {

std::vector<QueuedJob> QueueView(const Scheduler& scheduler, JobTable& jobs, const Policy& policy,
                                 const ListScope& scope, std::chrono::steady_clock::time_point now,
                                 std::chrono::system_clock::time_point wall) {
  std::vector<QueuedJob> out;
  for (Scheduler::QueueEntry& e : scheduler.Queue(now)) {
    const ActiveJob* job = jobs.Find(e.id);
    if (job == nullptr || !InScope(scope, job->record)) continue;
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
  return out;
}

std::map<std::string, std::pair<int, int>> ClassCounts(const Policy& policy, JobTable& jobs) {
  std::map<std::string, std::pair<int, int>> classes;
  std::map<int64_t, std::string> names;
  for (const auto& [name, value] : policy.priority_classes) {
    classes[name];
    names.emplace(value, name);
  }
  jobs.ForEach([&](ActiveJob& job) {
    auto name = names.find(job.record.priority);
    auto& [queued, running] = classes[name == names.end() ? std::to_string(job.record.priority) : name->second];
    if (job.record.state == JobState::kQueued) {
      ++queued;
    } else if (job.attempt) {
      running += job.record.num_processes;
    }
  });
  return classes;
}

}  // namespace trainyard
