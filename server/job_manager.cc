#include "server/job_manager.h"

#include <algorithm>
#include <filesystem>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/accelerate_config.h"
#include "common/checkpoint_dir.h"
#include "common/clock.h"
#include "common/paths.h"
#include "common/placement.h"
#include "common/secrets.h"
#include "common/utf8.h"
#include "server/access.h"
#include "server/hang_watchdog.h"
#include "server/queue_view.h"
#include "server/restart_policy.h"
#include "spdlog/spdlog.h"

namespace trainyard {
namespace {

using std::chrono::steady_clock;

std::string AbsoluteDir(const std::string& dir) {
  std::error_code ec;
  return std::filesystem::absolute(dir, ec).lexically_normal().string();
}

AdmissionOptions AdmissionOf(const JobManagerOptions& o) {
  std::error_code ec;
  const std::string state_dir = AbsoluteDir(o.state_dir);
  return {o.slots,
          o.gpus * o.ranks_per_gpu,
          state_dir,
          o.allowed_roots.empty() ? std::vector<std::string>{state_dir, std::filesystem::current_path(ec).string()}
                                  : o.allowed_roots,
          o.default_launcher,
          o.script_python};
}

}  // namespace

JobManager::JobManager(JobStore* store, Launcher* launcher, ServerMetrics* metrics, JobManagerOptions options)
    : store_(store),
      metrics_(metrics),
      options_(std::move(options)),
      admission_(AdmissionOf(options_)),
      jobs_(store, metrics),
      scheduler_(options_.slots, options_.gpus, SchedulingOf(Policy{}), options_.ranks_per_gpu),
      lifecycle_(
          &jobs_, &scheduler_, &launchers_, &admission_, metrics,
          {options_.master_addr, admission_.options().state_dir, options_.restart_backoff, options_.coordinator_addr,
           options_.remote_coordinator_addr.empty() ? options_.coordinator_addr : options_.remote_coordinator_addr}) {
  absl::MutexLock lock(&mu_);
  launchers_.Register(LauncherKind::kLocal, launcher);
  policy_ = std::make_shared<const Policy>();
}

SchedulerPolicy JobManager::SchedulingOf(const Policy& policy) const {
  SchedulerPolicy s;
  s.user_quotas = policy.user_quotas;
  s.group_quotas = policy.group_quotas;
  s.fair_share_half_life = options_.fair_share_half_life;
  s.min_run_time = options_.preemption_min_run_time;
  return s;
}

void JobManager::SetPolicy(std::shared_ptr<const Policy> policy) {
  absl::MutexLock lock(&mu_);
  policy_ = std::move(policy);
  scheduler_.SetPolicy(SchedulingOf(*policy_));
  metrics_->SetPolicy(*policy_);
  lifecycle_.TrySchedule();  // a larger quota may let jobs start
}

absl::Status JobManager::Authorize(const Caller& by, const std::string& id, const std::string& action, bool read_only) {
  absl::MutexLock lock(&mu_);
  ActiveJob* live = jobs_.Find(id);
  JobRecord stored;
  if (live == nullptr) {
    auto rec = store_->Get(id);
    if (!rec.ok()) return rec.status();
    stored = *std::move(rec);
  }
  const JobRecord& r = live != nullptr ? live->record : stored;
  if (MayAccess(*policy_, by, r, read_only)) return absl::OkStatus();
  const std::string refusal = absl::StrCat(by.Describe(), " may not ", action, " job ", id, ": it is not theirs");
  spdlog::warn("{}", refusal);
  metrics_->CountDenied(by.user);
  if (live != nullptr) {
    jobs_.AddEvent(*live, absl::StrCat("refused: ", refusal));
  } else {
    const JobEvent event{NowMillis(), r.state, absl::StrCat("refused: ", refusal)};
    store_->Update(r, &event).IgnoreError();
  }
  return absl::PermissionDeniedError(refusal);
}

absl::StatusOr<std::vector<QueuedJob>> JobManager::Queue(const Caller& by, bool all_users) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<ListScope> scope = ListScopeFor(*policy_, by, all_users);
  if (!scope.ok()) return scope.status();
  return QueueView(scheduler_, jobs_, *policy_, *scope, std::chrono::steady_clock::now(),
                   std::chrono::system_clock::now());
}

JobManager::~JobManager() = default;

void JobManager::set_coordinator_addr(const std::string& addr, const std::string& remote_addr) {
  absl::MutexLock lock(&mu_);
  lifecycle_.set_coordinator_addr(addr, remote_addr);
}

void JobManager::RegisterLauncher(LauncherKind kind, Launcher* launcher) {
  absl::MutexLock lock(&mu_);
  launchers_.Register(kind, launcher);
}

int JobManager::free_slots() {
  absl::MutexLock lock(&mu_);
  return scheduler_.free_slots();
}

int JobManager::free_gpus() {
  absl::MutexLock lock(&mu_);
  return scheduler_.free_gpus();
}

absl::Status JobManager::Recover() {
  absl::MutexLock lock(&mu_);
  auto jobs = store_->List(std::numeric_limits<int>::max());
  if (!jobs.ok()) return jobs.status();
  std::vector<ActiveJob*> queued;
  for (JobRecord& rec : *jobs) {
    if (IsTerminal(rec.state)) {
      jobs_.CountEnded(rec.state);
      continue;
    }
    auto spec = ParseJobSpec(rec.spec_json, options_.limits);
    ActiveJob& job = jobs_.Hold(rec, spec.ok() ? *spec : JobSpec{});
    if (!spec.ok()) {
      jobs_.Transition(job, JobState::kFailed, absl::StrCat("stored spec no longer valid: ", spec.status().message()));
      jobs_.Remove(rec.id, /*local=*/false);
      continue;
    }
    // Queued: waits again. Starting or running: its workers may still be
    // training, and get to reattach.
    if (rec.state == JobState::kQueued) {
      queued.push_back(&job);
    } else {
      lifecycle_.Adopt(job);
    }
  }
  for (ActiveJob* job : queued) lifecycle_.Enqueue(*job);
  return absl::OkStatus();
}

// ---- People's side ----------------------------------------------------------

absl::StatusOr<JobRecord> JobManager::Submit(const std::string& spec_text, const std::string& accelerate_config,
                                             const Caller& by) {
  std::vector<std::string> warnings;
  auto spec = ParseJobSpecWithAccelerateConfig(spec_text, accelerate_config, options_.limits, &warnings);
  absl::MutexLock lock(&mu_);
  const std::string id = jobs_.NewId();
  absl::Status admitted = spec.status();
  if (admitted.ok()) {
    if (spec->launcher == LauncherKind::kDefault) spec->launcher = options_.default_launcher;
    admitted = admission_.CheckResources(*spec, launchers_);
  }
  if (admitted.ok() && static_cast<int>(scheduler_.size()) >= options_.max_queued_jobs) {
    admitted = absl::ResourceExhaustedError(
        absl::StrCat("the queue already holds ", scheduler_.size(), " jobs (the limit); try again later"));
  }
  if (admitted.ok() && lifecycle_.shut_down()) return absl::UnavailableError("the server is shutting down");
  absl::StatusOr<int64_t> priority = admitted.ok() ? PriorityFor(*policy_, by, spec->priority) : int64_t{0};
  if (admitted.ok()) admitted = priority.status();
  if (admitted.ok()) admitted = CheckQueuedJobs(*policy_, by, scheduler_.queued_of(by.user));
  if (admitted.ok()) admitted = admission_.ResolvePaths(*spec, id, by.roots);
  if (admitted.ok()) admitted = admission_.CheckModel(*spec);
  if (!admitted.ok()) {
    metrics_->CountRejected();
    return admitted;
  }
  for (std::string& w : warnings) w = "accelerate config: " + w;
  absl::StatusOr<ActiveJob*> job = jobs_.Submit(id, *spec, warnings, {by.user, by.group(), *priority});
  if (!job.ok()) return job.status();
  metrics_->CountSubmitted();
  if (spec->script.empty()) {
    spdlog::info("job {} ({}) queued: {} processes, {} steps", id, spec->name, spec->num_processes, spec->max_steps);
  } else {
    spdlog::info("job {} ({}) queued: {} processes running {}", id, spec->name, spec->num_processes, spec->script.path);
  }
  lifecycle_.Enqueue(**job);
  return jobs_.Record(id);
}

absl::StatusOr<JobRecord> JobManager::Get(const std::string& id) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<JobRecord> r = jobs_.Record(id);
  // A queued job says why it waits, as of the scheduler's last decision.
  if (r.ok() && r->state == JobState::kQueued) {
    if (std::string why = scheduler_.WhyWaiting(id); !why.empty()) r->reason = std::move(why);
  }
  return r;
}

absl::StatusOr<std::vector<JobEvent>> JobManager::Events(const std::string& id) { return store_->Events(id); }

std::vector<StepMetrics> JobManager::RankSamples(const std::string& id) {
  absl::MutexLock lock(&mu_);
  const ActiveJob* job = jobs_.Find(id);
  return job == nullptr ? std::vector<StepMetrics>{} : job->progress.RankSamples();
}

absl::StatusOr<JobPage> JobManager::List(const std::set<JobState>& states, int page_size, const std::string& page_token,
                                         const Caller& by, bool all_users) {
  auto after = JobPageAfter(page_token);
  if (!after.ok()) return after.status();
  const int size = page_size <= 0 ? kDefaultPageSize : std::min(page_size, kMaxPageSize);
  absl::StatusOr<ListScope> scope;
  {
    absl::MutexLock lock(&mu_);
    scope = ListScopeFor(*policy_, by, all_users);
  }
  if (!scope.ok()) return scope.status();
  auto page =
      store_->ListPage(std::vector<JobState>(states.begin(), states.end()), *after, size, scope->owners, scope->groups);
  if (!page.ok()) return page.status();
  absl::MutexLock lock(&mu_);
  JobPage out;
  for (JobRecord& r : page->jobs) {
    const ActiveJob* live = jobs_.Find(r.id);
    out.jobs.push_back(live != nullptr ? live->record : std::move(r));  // the live one is fresher
  }
  if (page->more) out.next_page_token = JobPageToken(page->last);
  return out;
}

absl::StatusOr<JobRecord> JobManager::Cancel(const std::string& id, bool checkpoint) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<ActiveJob*> found = jobs_.FindActive(id, "");
  if (!found.ok()) return found.status();
  ActiveJob& job = **found;
  if (job.record.state == JobState::kQueued) {
    lifecycle_.End(job, JobState::kCancelled, "cancelled by user while queued");
    return jobs_.Record(id);
  }
  lifecycle_.Cancel(job, checkpoint, requests_.NextId());
  return job.record;
}

absl::StatusOr<int64_t> JobManager::RequestCheckpoint(const std::string& id, CheckpointType type) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<ActiveJob*> found = jobs_.FindActive(id, "; only a running job can checkpoint");
  if (!found.ok()) return found.status();
  ActiveJob& job = **found;
  WorkerChannel* rank0 = job.attempt ? job.attempt->channel(0) : nullptr;
  const bool cancelling = job.attempt && job.attempt->cancel_requested();
  if (job.record.state != JobState::kRunning || rank0 == nullptr || cancelling) {
    return absl::FailedPreconditionError(absl::StrCat("job ", id, " is ", JobStateName(job.record.state),
                                                      cancelling ? " and being cancelled" : "",
                                                      "; only a running job can checkpoint"));
  }
  WorkerCommand cmd{WorkerCommand::Kind::kCheckpoint, "requested"};
  cmd.request_id = requests_.NextId();
  cmd.type = type;
  rank0->Push(cmd);
  spdlog::info("job {}: checkpoint requested (request {})", id, cmd.request_id);
  return cmd.request_id;
}

absl::StatusOr<CheckpointEvent> JobManager::WaitCheckpoint(const std::string& id, int64_t request_id,
                                                           std::chrono::system_clock::time_point deadline) {
  absl::MutexLock lock(&mu_);
  auto answered_or_ended = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return requests_.has_checkpoint(request_id) || jobs_.Find(id) == nullptr;
  };
  mu_.AwaitWithDeadline(absl::Condition(&answered_or_ended), absl::FromChrono(deadline));
  if (std::optional<CheckpointEvent> c = requests_.TakeCheckpoint(request_id)) return *c;
  if (jobs_.Find(id) == nullptr) {
    return absl::AbortedError(absl::StrCat("job ", id, " ended before checkpoint request ", request_id, " completed"));
  }
  return absl::DeadlineExceededError(absl::StrCat("checkpoint request ", request_id, " of job ", id,
                                                  " has not completed yet; see `trainctl checkpoints ", id, "`"));
}

absl::StatusOr<std::vector<CheckpointRecord>> JobManager::Checkpoints(const std::string& id) {
  auto rec = store_->Get(id);
  if (!rec.ok()) return rec.status();
  return store_->Checkpoints(id);
}

absl::StatusOr<JobRecord> JobManager::Resume(const std::string& id, const std::string& from, int32_t num_processes,
                                             const Caller& by) {
  absl::MutexLock lock(&mu_);
  if (const ActiveJob* live = jobs_.Find(id)) {
    return absl::FailedPreconditionError(absl::StrCat("job ", id, " has not ended (", JobStateName(live->record.state),
                                                      "); cancel it first, or checkpoint it while it runs"));
  }
  auto rec = store_->Get(id);
  if (!rec.ok()) return rec.status();
  if (lifecycle_.shut_down()) return absl::UnavailableError("the server is shutting down");
  auto spec = admission_.ForResume(rec->spec_json, options_.limits, id, from, num_processes, launchers_, by.roots);
  if (!spec.ok()) return spec.status();
  JobRecord r = *rec;
  r.spec_json = JobSpecToJson(*spec);
  r.num_processes = spec->num_processes;
  r.failed_rank = -1;
  r.ended_unix_millis = 0;
  ActiveJob& job = jobs_.Hold(r, *spec);
  jobs_.Transition(
      job, JobState::kQueued,
      absl::StrCat("resume requested from ", from.empty() ? "the latest checkpoint" : spec->checkpoint.resume_from,
                   " with ", spec->num_processes, " processes"));
  lifecycle_.Enqueue(job);
  return jobs_.Record(id);
}

absl::StatusOr<std::shared_ptr<JobWatch>> JobManager::Watch(const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto watch = std::make_shared<JobWatch>();
  ActiveJob* job = jobs_.Find(id);
  if (job == nullptr) {
    auto rec = store_->Get(id);
    if (!rec.ok()) return rec.status();
    watch->Push({*rec, std::nullopt});
    watch->Close();
    return watch;
  }
  watch->Push({job->record, std::nullopt});
  job->watchers.push_back(watch);
  return watch;
}

absl::StatusOr<std::pair<std::string, int32_t>> JobManager::LogPath(const std::string& id, int32_t rank,
                                                                    int32_t attempt) {
  absl::MutexLock lock(&mu_);
  auto rec = jobs_.Record(id);
  if (!rec.ok()) return rec.status();
  if (rec->attempt == 0)
    return absl::FailedPreconditionError(absl::StrCat("job ", id, " has not started yet: no logs"));
  if (rank < 0 || rank >= rec->num_processes) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " is out of range: job ", id, " has ranks 0..", rec->num_processes - 1));
  }
  if (attempt < 0 || attempt > rec->attempt) {
    return absl::InvalidArgumentError(absl::StrCat("field 'attempt': ", attempt, " is out of range: job ", id,
                                                   " has attempts 1..", rec->attempt, " (0: the latest)"));
  }
  const int32_t which = attempt == 0 ? rec->attempt : attempt;
  return std::make_pair(absl::StrCat(lifecycle_.LogDir(id, which), "/rank-", rank, ".log"), which);
}

absl::StatusOr<JoinInfo> JobManager::GetJoinInfo(const std::string& id) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<ActiveJob*> found = jobs_.FindActive(id, "");
  if (!found.ok()) return found.status();
  const ActiveJob& job = **found;
  const LauncherKind kind = admission_.KindOf(job.spec);
  if (kind != LauncherKind::kExternal) {
    return absl::FailedPreconditionError(absl::StrCat("job ", id, " is started by the ", LauncherKindName(kind),
                                                      " launcher; only launcher: external jobs take joining workers"));
  }
  if (job.record.worker_token.empty()) {
    return absl::UnavailableError(
        absl::StrCat("job ", id, " is ", JobStateName(job.record.state), "; it takes workers once it is started"));
  }
  return JoinInfo{id, job.record.worker_token, job.record.num_processes, job.record.attempt,
                  lifecycle_.options().remote_coordinator_addr};
}

// ---- Workers' side -----------------------------------------------------------

absl::StatusOr<WorkerAttachment> JobManager::AttachWorker(const std::string& job_id, int32_t rank, int32_t attempt,
                                                          const std::string& token, const std::string& advertise_addr,
                                                          int32_t rendezvous_port) {
  absl::MutexLock lock(&mu_);
  ActiveJob* found = jobs_.Find(job_id);
  if (found == nullptr) return absl::NotFoundError(absl::StrCat("job ", job_id, " is not running"));
  ActiveJob& job = *found;
  // Check the token before telling anything about the attempt.
  if (job.record.worker_token.empty() || !ConstantTimeEquals(token, job.record.worker_token)) {
    return absl::PermissionDeniedError(absl::StrCat("invalid worker token for job ", job_id));
  }
  const bool external = admission_.KindOf(job.spec) == LauncherKind::kExternal;
  if (attempt == 0 && external) attempt = job.record.attempt;  // joining
  if (attempt != job.record.attempt) {
    return absl::FailedPreconditionError(absl::StrCat("attempt ", attempt, " of job ", job_id,
                                                      " is stale; the current attempt is ", job.record.attempt));
  }
  if (job.record.state == JobState::kQueued || !job.attempt) {
    return absl::UnavailableError(absl::StrCat("job ", job_id, " is queued; it takes workers once it is started"));
  }
  Attempt& a = *job.attempt;
  if (auto s = a.CheckAttach(job_id, rank); !s.ok()) return s;
  if (external && job.record.state == JobState::kStarting) {
    std::string event;
    if (auto s = a.Join(job_id, rank, advertise_addr, rendezvous_port, &event); !s.ok()) return s;
    if (!event.empty()) jobs_.AddEvent(job, event);
  }
  auto channel = std::make_shared<WorkerChannel>();
  a.Attach(rank, channel);
  if (a.cancel_requested()) channel->Push({WorkerCommand::Kind::kStop, "cancelled by user"});
  if (a.all_attached() && (job.record.state == JobState::kRecovering || job.record.state == JobState::kStarting)) {
    job.progress.Touch(steady_clock::now());
    jobs_.Transition(
        job, JobState::kRunning,
        job.record.state == JobState::kRecovering
            ? absl::StrCat("all ", job.record.num_processes, " ranks reattached after a coordinator restart")
            : absl::StrCat("all ", job.record.num_processes, " ranks connected"));
  }
  return WorkerAttachment{job.record.spec_json, job.record.num_processes, a.number(),
                          a.master_addr(),      a.master_port(),          channel};
}

void JobManager::ReportMetrics(const std::string& job_id, int32_t attempt, const std::vector<StepMetrics>& samples) {
  absl::MutexLock lock(&mu_);
  ActiveJob* job = jobs_.FindAttempt(job_id, attempt);
  if (job == nullptr) return;
  const auto now = steady_clock::now();
  for (const StepMetrics& agg : job->progress.OnSamples(samples, &job->record, now)) {
    for (auto& w : job->watchers) w->Push({std::nullopt, agg});
  }
  jobs_.PersistProgress(*job, now);
}

void JobManager::ReportResult(const std::string& job_id, int32_t attempt, int32_t rank, WorkerOutcome outcome,
                              const std::string& error) {
  absl::MutexLock lock(&mu_);
  ActiveJob* job = jobs_.FindAttempt(job_id, attempt);
  if (job == nullptr) return;
  spdlog::log(outcome == WorkerOutcome::kSucceeded ? spdlog::level::info : spdlog::level::warn,
              "job {}: rank {} reports {}{}{}", job_id, rank, WorkerOutcomeName(outcome), error.empty() ? "" : ": ",
              error);
  lifecycle_.Apply(*job, job->attempt->OnResult(rank, outcome, error));
}

void JobManager::ReportCheckpoint(const std::string& job_id, int32_t attempt, const CheckpointEvent& c) {
  absl::MutexLock lock(&mu_);
  ActiveJob* job = jobs_.FindAttempt(job_id, attempt);
  if (job == nullptr) return;
  if (auto s = store_->AddCheckpoint(job_id, {attempt, c}); !s.ok()) {
    spdlog::error("job {}: cannot record checkpoint {}: {}", job_id, c.index, std::string(s.message()));
  }
  jobs_.AddEvent(*job, job->progress.OnCheckpoint(c, steady_clock::now()));
  requests_.CheckpointReported(c);
}

void JobManager::ReportNote(const std::string& job_id, int32_t attempt, int32_t rank, const std::string& text) {
  absl::MutexLock lock(&mu_);
  ActiveJob* job = jobs_.FindAttempt(job_id, attempt);
  if (job == nullptr || !job->attempt->TakeNote(kMaxNotesPerAttempt)) return;
  // Events travel in proto strings: valid UTF-8 only.
  const std::string clean = AsValidUtf8(text.substr(0, 2000));
  const bool last = job->attempt->notes() == kMaxNotesPerAttempt;
  jobs_.AddEvent(
      *job, absl::StrCat("rank ", rank, ": ", clean, last ? " (later notes of this attempt: see the rank logs)" : ""));
}

void JobManager::ReportFlightRecord(const std::string& job_id, int32_t attempt, int64_t request_id,
                                    FlightRecord record) {
  absl::MutexLock lock(&mu_);
  requests_.AddFlightRecord(job_id, attempt, request_id, std::move(record));
}

void JobManager::DetachWorker(const std::string& job_id, int32_t attempt, int32_t rank,
                              const std::shared_ptr<WorkerChannel>& channel) {
  absl::MutexLock lock(&mu_);
  channel->Close();
  ActiveJob* job = jobs_.FindAttempt(job_id, attempt);
  if (job == nullptr) return;
  lifecycle_.Apply(*job, job->attempt->Detach(job_id, rank, channel, steady_clock::now()));
}

void JobManager::OnRankExit(const RankExit& exit) {
  absl::MutexLock lock(&mu_);
  ActiveJob* job = jobs_.FindAttempt(exit.job_id, exit.attempt);
  if (job == nullptr) return;
  lifecycle_.Apply(*job, job->attempt->OnExit(exit, job->record.state == JobState::kRecovering));
}

// ---- Hang diagnosis and the watchdog -----------------------------------------

absl::StatusOr<int64_t> JobManager::RequestDiagnosis(const std::string& id, std::chrono::milliseconds wait) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<ActiveJob*> found = jobs_.FindActive(id, "; only a running job can be diagnosed");
  if (!found.ok()) return found.status();
  ActiveJob& job = **found;
  if (job.record.state != JobState::kRunning && job.record.state != JobState::kRecovering) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", id, " is ", JobStateName(job.record.state), "; only a running job can be diagnosed"));
  }
  return AskForFlightRecords(job, &requests_, wait);
}

absl::StatusOr<Diagnosis> JobManager::WaitDiagnosis(int64_t request_id) {
  absl::MutexLock lock(&mu_);
  const PendingDiagnosis* p = requests_.diagnosis(request_id);
  if (p == nullptr) return absl::NotFoundError(absl::StrCat("no diagnose request ", request_id));
  auto answered = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const PendingDiagnosis* q = requests_.diagnosis(request_id);
    return q == nullptr || q->complete();
  };
  mu_.AwaitWithDeadline(absl::Condition(&answered),
                        absl::FromChrono(std::chrono::system_clock::now() + (p->deadline - steady_clock::now())));
  std::optional<PendingDiagnosis> done = requests_.TakeDiagnosis(request_id);
  if (!done) return absl::NotFoundError(absl::StrCat("no diagnose request ", request_id));
  Diagnosis d;
  d.attempt = done->attempt;
  d.answers = std::move(done->answers);
  d.result = DiagnoseHang(done->world_size, d.answers, NowMicros());
  return d;
}

void JobManager::CheckProgress() {
  absl::MutexLock lock(&mu_);
  const auto now = steady_clock::now();
  lifecycle_.UpdateEstimates();
  lifecycle_.TrySchedule();  // restarts whose backoff is over, preemptions past the minimum run time
  for (const std::string& id : jobs_.ids()) {
    // Each step may end the attempt (and start or end other jobs): look again.
    auto attempt_of = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      ActiveJob* job = jobs_.Find(id);
      return job == nullptr || job->record.state == JobState::kQueued ? nullptr : job;
    };
    ActiveJob* job = attempt_of();
    if (job == nullptr || !job->attempt) continue;
    Attempt* a = job->attempt.get();
    // A group that did not reattach after a coordinator restart.
    if (job->record.state == JobState::kRecovering && now > a->reattach_deadline() && !a->cancel_requested()) {
      lifecycle_.Apply(*job,
                       a->FailReattach(absl::StrCat("the workers did not reattach within reattach_timeout_s (",
                                                    job->spec.reattach_timeout_s, " s) after a coordinator restart")));
    }
    // External ranks that are gone.
    for (const RankExit& e : a->LostRanks(id, now, std::chrono::duration<double>(job->spec.reattach_timeout_s))) {
      if ((job = attempt_of()) == nullptr || job->attempt.get() != a) break;
      lifecycle_.Apply(*job, a->OnExit(e, /*recovering=*/false));
    }
    if ((job = attempt_of()) == nullptr || job->attempt.get() != a) continue;
    // A job preempted for another that did not stop within its grace.
    if (job->preempt_deadline && now > *job->preempt_deadline) {
      job->preempt_deadline.reset();
      jobs_.AddEvent(*job, absl::StrCat("did not stop within preemption_grace_s (", job->spec.preemption_grace_s,
                                        " s) after its preemption: stopping its ranks"));
      lifecycle_.StopGroup(*job);
    }
    const HangVerdict hang = CheckForHang(*job, now, &requests_, kWatchdogDiagnoseWait);
    if (!hang.diagnosis.empty()) jobs_.AddEvent(*job, absl::StrCat("hang diagnosis: ", hang.diagnosis));
    if (hang.hung) lifecycle_.Apply(*job, a->Fail(-1, hang.failure));
  }
  requests_.ExpireDiagnoses(now);
  metrics_->SetSchedulerUsage(scheduler_.UserUsage(now), scheduler_.GroupUsage());
  if (!policy_->priority_classes.empty()) metrics_->SetClassCounts(ClassCounts(*policy_, jobs_));
}

// ---- Shutdown ---------------------------------------------------------------

std::vector<std::string> JobManager::Shutdown(ShutdownMode mode) {
  absl::MutexLock lock(&mu_);
  lifecycle_.Shutdown();
  std::vector<std::string> running;
  for (const std::string& id : jobs_.ids()) {
    ActiveJob& job = *jobs_.Find(id);
    if (job.attempt && job.record.state != JobState::kQueued &&
        lifecycle_.StopForShutdown(job, mode, requests_.NextId())) {
      running.push_back(id);
    }
  }
  return running;
}

void JobManager::StopGroups(const std::vector<std::string>& ids) {
  absl::MutexLock lock(&mu_);
  for (const std::string& id : ids) {
    ActiveJob* job = jobs_.Find(id);
    if (job != nullptr && job->attempt && job->record.state != JobState::kQueued) lifecycle_.StopGroup(*job);
  }
}

}  // namespace trainyard
