#include "server/jobs/job_manager.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "server/auth/access.h"
#include "server/jobs/hang_watchdog.h"
#include "server/jobs/manager_lock.h"
#include "server/jobs/queue_view.h"
#include "spdlog/spdlog.h"

namespace trainyard {

JobManager::JobManager(JobStore* store, Launcher* launcher, ServerMetrics* metrics, JobManagerOptions options,
                       const TimeSource* clock)
    : metrics_(metrics),
      clock_(clock),
      options_(std::move(options)),
      admission_([&] {
        AdmissionOptions o = AdmissionOptionsOf(options_);
        o.owner_of = [store](const std::string& id) {
          auto job = store->Get(id);
          return job.ok() ? job->owner : std::string();
        };
        return o;
      }()),
      jobs_(store, metrics, clock),
      scheduler_(options_.slots, options_.gpus,
                 SchedulingOf(Policy{}, options_.fair_share_half_life, options_.preemption_min_run_time),
                 options_.ranks_per_gpu),
      launchers_(options_.default_launcher),
      external_([this](const std::string& id, int32_t attempt, const WorkerCommand& command) {
        mu_.AssertHeld();  // Launchers::Stop runs under the mutex
        jobs_.Broadcast(id, attempt, command);
      }),
      lifecycle_(
          &jobs_, &scheduler_, &launchers_, metrics, clock,
          {options_.master_addr, admission_.options().state_dir, options_.restart_backoff, options_.coordinator_addr,
           options_.remote_coordinator_addr.empty() ? options_.coordinator_addr : options_.remote_coordinator_addr,
           options_.node_loss_grace}),
      workers_(&jobs_, &lifecycle_, &launchers_, &requests_, clock),
      watch_(&jobs_, &lifecycle_, &launchers_, &workers_, clock),
      stops_(&jobs_, &lifecycle_),
      routes_(&mu_, &workers_, &requests_) {
  ManagerLock lock(&mu_);
  launchers_.Register(LauncherKind::kLocal, launcher);
  launchers_.Register(LauncherKind::kExternal, &external_);
  policy_ = std::make_shared<const Policy>();
}

JobManager::~JobManager() = default;

void JobManager::SetPolicy(std::shared_ptr<const Policy> policy) {
  ManagerLock lock(&mu_);
  policy_ = std::move(policy);
  scheduler_.SetPolicy(SchedulingOf(*policy_, options_.fair_share_half_life, options_.preemption_min_run_time));
  metrics_->SetPolicy(*policy_);
  lifecycle_.TrySchedule();  // a larger quota may let jobs start
}

void JobManager::set_coordinator_addr(const std::string& addr, const std::string& remote_addr) {
  ManagerLock lock(&mu_);
  lifecycle_.set_coordinator_addr(addr, remote_addr);
}

void JobManager::RegisterLauncher(LauncherKind kind, Launcher* launcher) {
  ManagerLock lock(&mu_);
  launchers_.Register(kind, launcher);
}

int JobManager::free_slots() {
  ManagerLock lock(&mu_);
  return scheduler_.free_slots();
}

int JobManager::free_gpus() {
  ManagerLock lock(&mu_);
  return scheduler_.free_gpus();
}

absl::Status JobManager::Recover() {
  ManagerLock lock(&mu_);
  return lifecycle_.Recover(admission_.limits());
}

absl::Status JobManager::Authorize(const Caller& by, const std::string& id, const std::string& action, bool read_only) {
  ManagerLock lock(&mu_);
  absl::StatusOr<JobRecord> r = jobs_.Record(id);
  if (!r.ok()) return r.status();
  if (MayAccess(*policy_, by, *r, read_only)) return absl::OkStatus();
  const std::string refusal = absl::StrCat(by.Describe(), " may not ", action, " job ", id, ": it is not theirs");
  spdlog::warn("{}", refusal);
  metrics_->CountDenied(by.user);
  if (auto event = refused_.Refused(id, by.user, by.Describe(), refusal, clock_->UnixMillis())) {
    jobs_.AddEvent(id, *event);
  }
  if (!MayAccess(*policy_, by, *r, /*read_only=*/true)) {
    return absl::NotFoundError(absl::StrCat("job ", id, " not found"));  // as for a job that does not exist
  }
  return absl::PermissionDeniedError(refusal);
}

absl::StatusOr<QueuePage> JobManager::Queue(const Caller& by, bool all_users, int32_t skip, int32_t count) {
  ManagerLock lock(&mu_);
  absl::StatusOr<ListScope> scope = ListScopeFor(*policy_, by, all_users);
  if (!scope.ok()) return scope.status();
  const int64_t wall_ms = clock_->UnixMillis();
  return QueueView(scheduler_, jobs_, *policy_, *scope, clock_->SteadyNow(),
                   std::chrono::system_clock::time_point(std::chrono::milliseconds(wall_ms)), skip, count);
}

absl::StatusOr<std::vector<QuotaUse>> JobManager::Usage(const Caller& by, bool all_users) {
  ManagerLock lock(&mu_);
  absl::StatusOr<ListScope> scope = ListScopeFor(*policy_, by, all_users);
  if (!scope.ok()) return scope.status();
  return UsageView(scheduler_, *policy_, *scope, by);
}

absl::StatusOr<JobRecord> JobManager::Submit(const std::string& spec_text, const std::string& accelerate_config,
                                             const Caller& by, const TrialOf& trial_of) {
  // The id first (reserved: a submission in between does not draw it too),
  // then the files and paths without the lock: a slow or hostile file or
  // directory stalls this request alone.
  std::string id;
  std::optional<Launchers> launchers;  // a copy: the launchers themselves are thread-safe
  {
    ManagerLock lock(&mu_);
    do {
      id = jobs_.NewId();
    } while (!reserved_ids_.insert(id).second);
    launchers.emplace(launchers_);
  }
  const AdmissionFiles files = admission_.ReadFiles(spec_text, accelerate_config, by, id, &*launchers);
  ManagerLock lock(&mu_);
  reserved_ids_.erase(id);
  const AdmissionState now{*policy_, launchers_, static_cast<int>(scheduler_.size()), scheduler_.queued_of(by.user),
                           lifecycle_.shut_down()};
  absl::StatusOr<Admitted> admitted = admission_.Admit(spec_text, accelerate_config, by, id, now, &files);
  if (!admitted.ok()) {
    if (!absl::IsUnavailable(admitted.status())) metrics_->CountRejected();  // a stopping server refuses nobody
    return admitted.status();
  }
  // (A preemptible job may borrow past its quota: it may start.)
  const Demand demand = lifecycle_.DemandOf(admitted->spec);
  if (auto s = admitted->spec.preemptible
                   ? absl::OkStatus()
                   : CheckQuotaCanFit(*policy_, by, demand.kind == ResourcePool::Kind::kGpus, demand.minimum());
      !s.ok()) {
    metrics_->CountRejected();
    return s;
  }
  absl::StatusOr<ActiveJob*> job =
      jobs_.Submit(id, admitted->spec, admitted->notes,
                   {by.user, by.group(), admitted->priority, by.unix_user, trial_of.sweep_id, trial_of.trial});
  if (!job.ok()) return job.status();
  metrics_->CountSubmitted();
  lifecycle_.Enqueue(**job);
  return jobs_.Record(id);
}

absl::StatusOr<JobRecord> JobManager::Get(const std::string& id) {
  ManagerLock lock(&mu_);
  absl::StatusOr<JobRecord> r = jobs_.Record(id);
  // A queued job says why it waits, as of the scheduler's last decision.
  if (r.ok() && r->state == JobState::kQueued) {
    if (std::string why = scheduler_.WhyWaiting(id); !why.empty()) r->reason = std::move(why);
  }
  return r;
}

absl::StatusOr<std::vector<JobEvent>> JobManager::Events(const std::string& id) {
  ManagerLock lock(&mu_);
  absl::StatusOr<std::vector<JobEvent>> events = jobs_.Events(id);
  if (!events.ok()) return events;
  refused_.Annotate(id, &*events);  // a user's refusals are one line
  return events;
}

std::vector<StepMetrics> JobManager::RankSamples(const std::string& id, int32_t first, int32_t count) {
  ManagerLock lock(&mu_);
  const ActiveJob* job = jobs_.Find(id);
  return job == nullptr ? std::vector<StepMetrics>{} : job->progress.RankSamples(first, count);
}

std::optional<JobRequestHandler::Placement> JobManager::PlacementOf(const std::string& id, int32_t first,
                                                                    int32_t count) {
  ManagerLock lock(&mu_);
  const ActiveJob* job = jobs_.Find(id);
  if (job == nullptr || !job->attempt) return std::nullopt;
  const std::map<int32_t, std::string>& nodes = job->attempt->place().nodes;
  const int64_t end = static_cast<int64_t>(first) + count;
  Placement p{{}, job->attempt->place().external_id};
  for (auto it = nodes.lower_bound(first); it != nodes.end() && it->first < end; ++it) p.nodes.insert(*it);
  return p;
}

std::optional<JobRequestHandler::ReplicaStatus> JobManager::Replicas(const std::string& id) {
  ManagerLock lock(&mu_);
  const ActiveJob* job = jobs_.Find(id);
  if (job == nullptr || !job->attempt) return std::nullopt;
  return job->attempt->supervisor().Status();
}

absl::StatusOr<JobRecord> JobManager::Scale(const std::string& id, int32_t num_processes, const Caller& by) {
  ManagerLock lock(&mu_);
  absl::StatusOr<ActiveJob*> found = jobs_.FindActive(id, "; only a running job can be scaled");
  if (!found.ok()) return found.status();
  if (auto s = lifecycle_.Scale(**found, num_processes, by.user); !s.ok()) return s;
  return (*found)->record;
}

absl::StatusOr<JobPage> JobManager::List(const std::set<JobState>& states, int page_size, const std::string& page_token,
                                         const Caller& by, bool all_users, bool newest_first) {
  auto after = JobPageAfter(page_token, newest_first);
  if (!after.ok()) return after.status();
  const int size = page_size <= 0 ? kDefaultPageSize : std::min(page_size, kMaxPageSize);
  ManagerLock lock(&mu_);
  absl::StatusOr<ListScope> scope = ListScopeFor(*policy_, by, all_users);
  if (!scope.ok()) return scope.status();
  return jobs_.Page(std::vector<JobState>(states.begin(), states.end()), *after, size, scope->owners, scope->groups,
                    newest_first);
}

absl::Status JobManager::Delete(const std::string& id, const Caller& by) {
  ManagerLock lock(&mu_);
  absl::StatusOr<JobRecord> ended = jobs_.Ended(id, "; cancel it first (trainctl cancel)");
  if (!ended.ok()) return ended.status();
  return jobs_.Delete(*ended, by.Describe());
}

absl::StatusOr<JobRecord> JobManager::Cancel(const std::string& id, bool checkpoint, const std::string& reason) {
  ManagerLock lock(&mu_);
  absl::StatusOr<ActiveJob*> found = jobs_.FindActive(id, "");
  if (!found.ok()) return found.status();
  return stops_.Cancel(**found, checkpoint, requests_.NextId(), reason);
}

absl::Status JobManager::AwaitRunning(const std::string& id, std::chrono::system_clock::time_point deadline) {
  ManagerLock lock(&mu_);
  auto running_or_ended = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const ActiveJob* job = jobs_.Find(id);
    return job == nullptr || job->record.state == JobState::kRunning;
  };
  if (mu_.AwaitWithDeadline(absl::Condition(&running_or_ended), absl::FromChrono(deadline))) return absl::OkStatus();
  return absl::DeadlineExceededError(
      absl::StrCat("job ", id, " is still ", JobStateName(jobs_.Find(id)->record.state)));
}

absl::StatusOr<std::vector<CheckpointRecord>> JobManager::Checkpoints(const std::string& id) {
  ManagerLock lock(&mu_);
  return jobs_.Checkpoints(id);
}

absl::StatusOr<JobHistory> JobManager::History(const std::string& id) {
  ManagerLock lock(&mu_);
  return jobs_.History(id);
}

absl::StatusOr<JobRecord> JobManager::Resume(const std::string& id, const std::string& from, int32_t num_processes,
                                             const Caller& by) {
  // Not while it runs (or was resumed meanwhile), nor on a server stopping.
  auto ended = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::StatusOr<JobRecord> {
    absl::StatusOr<JobRecord> r = jobs_.Ended(id, "; cancel it first, or checkpoint it while it runs");
    if (r.ok() && lifecycle_.shut_down()) return absl::UnavailableError("the server is shutting down");
    return r;
  };
  absl::StatusOr<JobRecord> rec;
  std::optional<Launchers> launchers;  // a copy: the launchers themselves are thread-safe
  {
    ManagerLock lock(&mu_);
    rec = ended();
    if (!rec.ok()) return rec.status();
    launchers.emplace(launchers_);
  }
  // Files (a config.json, the checkpoint's manifest) are read without the
  // lock: a slow or hostile one stalls this request alone.
  auto spec = admission_.ForResume(rec->spec_json, id, from, num_processes, *launchers, by);
  if (!spec.ok()) return spec.status();
  ManagerLock lock(&mu_);
  rec = ended();
  if (!rec.ok()) return rec.status();
  return lifecycle_.Resume(*rec, *spec, from);
}

absl::StatusOr<std::shared_ptr<JobWatch>> JobManager::Watch(const std::string& id) {
  ManagerLock lock(&mu_);
  return jobs_.Watch(id);
}

absl::StatusOr<std::pair<std::string, int32_t>> JobManager::LogPath(const std::string& id, int32_t rank,
                                                                    int32_t attempt) {
  ManagerLock lock(&mu_);
  auto rec = jobs_.Record(id);
  if (!rec.ok()) return rec.status();
  return lifecycle_.LogPath(*rec, rank, attempt);
}

absl::StatusOr<JoinInfo> JobManager::GetJoinInfo(const std::string& id) {
  ManagerLock lock(&mu_);
  return workers_.JoinInfoOf(id, lifecycle_.options().remote_coordinator_addr);
}

void JobManager::CheckProgress() {
  ManagerLock lock(&mu_);
  workers_.EndLostRanks();
  watch_.Supervise(&requests_, kWatchdogDiagnoseWait);
  metrics_->SetSchedulerUsage(scheduler_.UserUsage(clock_->SteadyNow()), scheduler_.GroupUsage());
  if (!policy_->priority_classes.empty()) metrics_->SetClassCounts(ClassCounts(*policy_, jobs_));
}

std::vector<std::string> JobManager::Shutdown(ShutdownMode mode) {
  ManagerLock lock(&mu_);
  jobs_.SaveHistories();
  return stops_.Shutdown(mode, &requests_);
}

void JobManager::StopGroups(const std::vector<std::string>& ids) {
  ManagerLock lock(&mu_);
  stops_.StopGroups(ids);
}

}  // namespace trainyard
