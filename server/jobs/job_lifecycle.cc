#include "server/jobs/job_lifecycle.h"

#include "server/jobs/fault_tolerance_modes.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/placement.h"
#include "common/secrets.h"
#include "server/health/restart_policy.h"
#include "server/jobs/hang_watchdog.h"
#include "spdlog/spdlog.h"

namespace trainyard {

using std::chrono::steady_clock;

JobLifecycle::JobLifecycle(JobTable* jobs, Scheduler* scheduler, Launchers* launchers, ServerMetrics* metrics,
                           const TimeSource* clock, LifecycleOptions options)
    : jobs_(jobs),
      scheduler_(scheduler),
      launchers_(launchers),
      metrics_(metrics),
      clock_(clock),
      options_(std::move(options)) {}

void JobLifecycle::set_coordinator_addr(const std::string& addr, const std::string& remote_addr) {
  options_.coordinator_addr = addr;
  options_.remote_coordinator_addr = remote_addr.empty() ? addr : remote_addr;
}

Demand JobLifecycle::DemandOf(const JobSpec& spec) const {
  const Launcher::Traits traits = launchers_->TraitsOf(spec);
  Demand d{traits.on_this_host, spec.device == Device::kCuda ? ResourcePool::Kind::kGpus : ResourcePool::Kind::kSlots,
           spec.num_processes};
  // An elastic job's ranks come and go where the launcher replaces ranks.
  if (spec.elastic.enabled() && traits.replaces_ranks) d.min_count = std::min(spec.elastic.min_processes, d.count);
  return d;
}

JobClaim JobLifecycle::ClaimOf(const ActiveJob& job) const {
  JobClaim c;
  c.owner = job.record.owner;
  c.group = job.record.group;
  c.priority = job.record.priority;
  c.preemptible = job.spec.preemptible;
  // Known once an attempt reported its step time; a script job's length is its own.
  if (const double step_s = job.progress.step_seconds(); step_s > 0 && job.spec.max_steps > 0) {
    const int64_t left = std::max<int64_t>(0, job.spec.max_steps - job.record.step);
    c.runtime = std::chrono::duration_cast<steady_clock::duration>(std::chrono::duration<double>(left * step_s));
  }
  return c;
}

absl::Status JobLifecycle::Recover(const SpecLimits& limits) {
  auto jobs = jobs_->Stored();
  if (!jobs.ok()) return jobs.status();
  std::vector<ActiveJob*> queued;
  for (JobRecord& rec : *jobs) {
    if (IsTerminal(rec.state)) {
      jobs_->CountEnded(rec.state);
      continue;
    }
    auto spec = ParseJobSpec(rec.spec_json, limits);
    ActiveJob& job = jobs_->Hold(rec, spec.ok() ? *spec : JobSpec{});
    if (!spec.ok()) {
      jobs_->Transition(job, JobState::kFailed, absl::StrCat("stored spec no longer valid: ", spec.status().message()));
      jobs_->Remove(rec.id, /*local=*/false);
      continue;
    }
    // Queued: waits again. Starting or running: its workers may still be
    // training, and get to reattach.
    if (rec.state == JobState::kQueued) {
      queued.push_back(&job);
    } else {
      Adopt(job);
    }
  }
  for (ActiveJob* job : queued) Enqueue(*job);
  return absl::OkStatus();
}

JobRecord JobLifecycle::Resume(const JobRecord& stored, const JobSpec& spec, const std::string& from) {
  JobRecord r = stored;
  r.spec_json = JobSpecToJson(spec);
  r.num_processes = spec.num_processes;
  r.failed_rank = -1;
  r.ended_unix_millis = 0;
  ActiveJob& job = jobs_->Hold(r, spec);
  jobs_->Transition(
      job, JobState::kQueued,
      absl::StrCat("resume requested from ", from.empty() ? "the latest checkpoint" : spec.checkpoint.resume_from,
                   " with ", spec.num_processes, " processes"));
  Enqueue(job);
  return *jobs_->Record(r.id);
}

void JobLifecycle::Enqueue(ActiveJob& job) {
  scheduler_->Enqueue(job.record.id, DemandOf(job.spec), ClaimOf(job));
  TrySchedule();
}

void JobLifecycle::TrySchedule() {
  Scheduler::Decision d = scheduler_->Schedule(clock_->SteadyNow());
  for (const std::string& id : d.start) {
    if (ActiveJob* job = jobs_->Find(id)) StartJob(*job);
  }
  for (const Scheduler::Preemption& p : d.preempt) {
    if (ActiveJob* job = jobs_->Find(p.victim); job != nullptr && job->attempt) Preempt(*job, p);
  }
  for (const Scheduler::Resize& r : d.shrink) {
    const ActiveJob* other = jobs_->Find(r.for_job);
    const std::string why =
        absl::StrCat("shrunk for job ", r.for_job,
                     other ? absl::StrCat(" (priority ", other->record.priority,
                                          other->record.owner.empty() ? "" : ", user ", other->record.owner, ")")
                           : "");
    if (ActiveJob* job = jobs_->Find(r.job); job != nullptr && job->attempt) Resize(*job, r.to, why);
  }
  for (const Scheduler::Resize& r : d.grow) {
    if (ActiveJob* job = jobs_->Find(r.job); job != nullptr && job->attempt) Resize(*job, r.to, "slots came free");
  }
}

void JobLifecycle::UpdateEstimates() {
  const auto now = clock_->SteadyNow();
  for (const std::string& id : jobs_->started_ids()) {
    ActiveJob* job = jobs_->Find(id);
    if (job == nullptr || !job->attempt || !scheduler_->running(id)) continue;
    if (std::optional<steady_clock::duration> left = ClaimOf(*job).runtime) scheduler_->SetExpectedEnd(id, now + *left);
  }
}

void JobLifecycle::Preempt(ActiveJob& job, const Scheduler::Preemption& why) {
  Attempt& a = *job.attempt;
  if (a.stop_requested()) return;  // stopping already
  a.RequestStop(Attempt::Stop::kForPriority);
  job.preempt_deadline = clock_->SteadyNow() + std::chrono::duration_cast<steady_clock::duration>(
                                                   std::chrono::duration<double>(job.spec.preemption_grace_s));
  metrics_->CountPreemption(job.record.owner);
  const ActiveJob* other = jobs_->Find(why.for_job);
  const std::string for_whom =
      absl::StrCat("job ", why.for_job,
                   other ? absl::StrCat(" (priority ", other->record.priority,
                                        other->record.owner.empty() ? "" : ", user ", other->record.owner, ")")
                         : "",
                   why.reclaim ? ", whose owner reclaims the quota this job borrowed" : "");
  WorkerChannel* rank0 = a.channel(a.lead_rank());
  if (job.record.state == JobState::kRunning && rank0 != nullptr && !a.failed()) {
    WorkerCommand cmd{WorkerCommand::Kind::kCheckpoint, "preempted by the scheduler"};
    cmd.stop_after = true;
    rank0->Push(cmd);
    jobs_->AddEvent(job, absl::StrCat("preempted for ", for_whom, ": checkpoint, then stop; queued again to resume"));
  } else {
    StopGroup(job);
    jobs_->AddEvent(job, absl::StrCat("preempted for ", for_whom,
                                      " before it ran: stopped; queued again to resume from its latest checkpoint"));
  }
}

std::unique_ptr<Attempt> JobLifecycle::NewAttempt(const ActiveJob& job, const Launcher::Traits& traits) const {
  auto a = std::make_unique<Attempt>(job.record.attempt, job.record.num_processes, traits.ranks_join);
  // Launched elsewhere: the cluster reports a dead node's ranks late.
  if (!traits.on_this_host && !traits.ranks_join) a->WatchForLostNodes(options_.node_loss_grace);
  return a;
}

void JobLifecycle::StartJob(ActiveJob& job) {
  JobRecord& r = job.record;
  const LauncherKind kind = launchers_->KindOf(job.spec);
  auto fail = [&](const std::string& why) { End(job, JobState::kFailed, why); };
  const Launcher* launcher = launchers_->Get(kind);
  if (launcher == nullptr) {
    return fail(absl::StrCat("launcher ", LauncherKindName(kind), " is not available on this server"));
  }
  const Launcher::Traits traits = launcher->traits();
  r.attempt += 1;
  job.attempt = NewAttempt(job, traits);
  // An elastic job starts with the ranks the scheduler found room for.
  const ResourcePool::Held& held = scheduler_->Held(r.id);
  const int32_t holds = static_cast<int32_t>(job.spec.device == Device::kCuda ? held.gpus.size() : held.slots);
  job.attempt->SetSupervisor(MakeRankSupervisor(job, traits, *clock_, holds, /*adopting=*/false));
  const int32_t ranks = job.attempt->supervisor().running(r.num_processes);
  for (int32_t rank = ranks; rank < r.num_processes; ++rank) job.attempt->Park(rank);
  if (!traits.ranks_join) {
    // On this host: rank 0 serves the store here. Elsewhere (Slurm): on the
    // first node of the step (the worker reads it from Slurm); the port is
    // a guess that is free here, and none that a started attempt holds
    // (its rank 0 may listen on another host). Joining ranks say where
    // theirs listens.
    const int port = PickFreePortOn(options_.master_addr, jobs_->RendezvousPortsHeld());
    if (port == 0) return fail("cannot find a free port for the rendezvous");
    job.attempt->place().master_addr = traits.on_this_host ? options_.master_addr : "";
    job.attempt->place().master_port = port;
  }
  // A new token fences the previous attempt's workers. Joined workers are
  // fenced by the attempt number alone: their token is the job's.
  if (!traits.ranks_join || r.worker_token.empty()) r.worker_token = NewWorkerToken();
  job.progress.Launched(clock_->SteadyNow(), r.num_processes);
  if (traits.ranks_join) {
    return jobs_->Transition(
        job, JobState::kStarting,
        absl::StrCat("attempt ", r.attempt, ": waiting for ", r.num_processes,
                     " ranks to join (trainyard-worker --join ", r.id, "; `trainctl join-info ", r.id, "`)"));
  }
  const std::vector<int>& gpus = scheduler_->Held(r.id).gpus;
  jobs_->Transition(
      job, JobState::kStarting,
      absl::StrCat("launching ", ranks == r.num_processes ? "" : absl::StrCat(ranks, " of "), r.num_processes,
                   r.num_processes == 1 ? " rank" : " ranks", " (attempt ", r.attempt, ", ", LauncherKindName(kind),
                   gpus.empty() ? "" : absl::StrCat(", GPUs ", absl::StrJoin(gpus, ",")), ")"));
  if (auto s = launchers_->Launch(job, ContextOf(job)); !s.ok()) {
    fail(absl::StrCat("launch failed: ", s.message()));
    return;
  }
  NoteExternalId(job);
}

void JobLifecycle::NoteExternalId(ActiveJob& job) {
  if (!job.attempt) return;
  const std::string id = launchers_->ExternalIdOf(job);
  if (id.empty() || id == job.attempt->place().external_id) return;
  job.attempt->place().external_id = id;
  jobs_->AddEvent(job, absl::StrCat("attempt ", job.record.attempt, " runs as ",
                                    LauncherKindName(launchers_->KindOf(job.spec)), " job ", id));
}

void JobLifecycle::Apply(ActiveJob& job, const Attempt::Update& update) {
  if (!update.event.empty()) jobs_->AddEvent(job, update.event);
  // The root cause may be named later than the failure (Attempt::Fail).
  if (job.attempt && job.attempt->failed()) job.record.failed_rank = job.attempt->failure().rank;
  if (update.failed_now) {
    job.progress.FailureDetected(job.record.step);
    job.record.failed_rank = job.attempt->failure().rank;
    spdlog::warn("job {}: {}; stopping the other ranks", job.record.id, job.attempt->failure().reason);
    StopGroup(job);
  }
  if (update.ended) EndAttempt(job);
}

LaunchContext JobLifecycle::ContextOf(const ActiveJob& job) const {
  return {options_.coordinator_addr, options_.remote_coordinator_addr, LogDir(job.record.id, job.record.attempt),
          scheduler_->Held(job.record.id).gpus};
}

void JobLifecycle::StopGroup(ActiveJob& job) { launchers_->Stop(job); }

void JobLifecycle::EndAttempt(ActiveJob& job) {
  AttemptEnd end = job.attempt->End();
  end.shutting_down = shut_down_;
  end.restarts = job.restarts;
  end.max_restarts = job.attempt->supervisor().max_restarts(job.spec.max_restarts);
  end.preemptible = job.spec.preemptible;
  end.step = job.record.step;
  end.script = !job.spec.script.empty();
  end.attempt = job.record.attempt;
  if (end.failed && job.restarts < end.max_restarts) {
    // What the job's ranks reported committing: the coordinator's own
    // records, never the job's directory (a user's files, read under the
    // lock, could hold every request for as long as they take).
    if (auto saved = jobs_->Checkpoints(job.record.id); saved.ok()) {
      for (auto it = saved->rbegin(); it != saved->rend(); ++it) {
        if (!it->checkpoint.ok || it->checkpoint.index < 0) continue;
        end.latest_checkpoint = absl::StrCat("checkpoint_", it->checkpoint.index, " (step ", it->checkpoint.step, ")");
        break;
      }
    }
  }
  const NextStep next = DecideAfterAttempt(end);
  const std::string id = job.record.id;
  if (next.kind != NextStep::Kind::kRequeue) {
    End(job,
        next.kind == NextStep::Kind::kSucceeded   ? JobState::kSucceeded
        : next.kind == NextStep::Kind::kCancelled ? JobState::kCancelled
                                                  : JobState::kFailed,
        next.reason);
    TrySchedule();
    return;
  }
  std::string reason = next.reason;
  SteadyTime not_before{};
  if (next.counts_restart) {
    ++job.restarts;
    job.progress.CountFailure();
    metrics_->CountRestart(id);
    // Repeated failures (no attempt trained a step in between) back off; a
    // group that trained before it failed restarts at once.
    if (const auto backoff = RestartBackoff(job.progress.failures_in_a_row(), options_.restart_backoff);
        backoff.count() > 0) {
      not_before = clock_->SteadyNow() + backoff;
      reason += absl::StrCat(" (starts in ", backoff.count() / 1000.0, " s: backoff after repeated failures)");
    }
  }
  // Queued again to resume from its latest checkpoint, ahead of jobs that
  // have not started yet.
  job.progress.FailureDetected(job.record.step);  // preemptions and stops: from the attempt's end
  job.progress.AttemptEnded();
  scheduler_->Release(id, clock_->SteadyNow());
  job.attempt.reset();
  job.preempt_deadline.reset();
  job.spec.checkpoint.resume_from = "latest";
  job.record.spec_json = JobSpecToJson(job.spec);
  jobs_->Transition(job, JobState::kQueued, reason);
  scheduler_->Enqueue(id, DemandOf(job.spec), ClaimOf(job), not_before, /*ahead=*/true);
  TrySchedule();
}

void JobLifecycle::End(ActiveJob& job, JobState state, const std::string& reason) {
  const std::string id = job.record.id;
  jobs_->Transition(job, state, reason);
  scheduler_->Remove(id);
  scheduler_->Release(id, clock_->SteadyNow());
  jobs_->Remove(id, launchers_->TraitsOf(job.spec).on_this_host);  // waiters of its checkpoints give up
}

void JobLifecycle::Adopt(ActiveJob& job) {
  const JobRecord& r = job.record;
  job.attempt = NewAttempt(job, launchers_->TraitsOf(job.spec));
  // A replica group is taken on from the membership its ranks hold when
  // they reattach; ranks that died meanwhile are replaced then.
  job.attempt->SetSupervisor(
      MakeRankSupervisor(job, launchers_->TraitsOf(job.spec), *clock_, r.num_processes, /*adopting=*/true));
  scheduler_->HoldAdopted(r.id, DemandOf(job.spec), ClaimOf(job), clock_->SteadyNow());
  // The launcher follows the processes (local: found by command line) or
  // the batch job (Slurm: found by name) and reports their ends.
  launchers_->Adopt(job, ContextOf(job));
  NoteExternalId(job);
  const auto now = clock_->SteadyNow();
  job.attempt->watch().reattach_deadline = now + std::chrono::duration_cast<steady_clock::duration>(
                                                     std::chrono::duration<double>(job.spec.reattach_timeout_s));
  job.progress.Adopted(now, r.num_processes);
  jobs_->Transition(job, JobState::kRecovering,
                    absl::StrCat("the coordinator restarted; waiting up to ", job.spec.reattach_timeout_s,
                                 " s for the workers of attempt ", r.attempt, " to reattach"));
}

std::string JobLifecycle::LogDir(const std::string& job_id, int32_t attempt) const {
  return absl::StrCat(options_.state_dir, "/jobs/", job_id, "/attempt-", attempt);
}

absl::StatusOr<std::pair<std::string, int32_t>> JobLifecycle::LogPath(const JobRecord& rec, int32_t rank,
                                                                      int32_t attempt) const {
  if (rec.attempt == 0) {
    return absl::FailedPreconditionError(absl::StrCat("job ", rec.id, " has not started yet: no logs"));
  }
  if (rank < 0 || rank >= rec.num_processes) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " is out of range: job ", rec.id, " has ranks 0..", rec.num_processes - 1));
  }
  if (attempt < 0 || attempt > rec.attempt) {
    return absl::InvalidArgumentError(absl::StrCat("field 'attempt': ", attempt, " is out of range: job ", rec.id,
                                                   " has attempts 1..", rec.attempt, " (0: the latest)"));
  }
  const int32_t which = attempt == 0 ? rec.attempt : attempt;
  return std::make_pair(absl::StrCat(LogDir(rec.id, which), "/rank-", rank, ".log"), which);
}

void JobLifecycle::Resize(ActiveJob& job, int32_t n, const std::string& why) {
  Attempt& a = *job.attempt;
  RankSupervisor& sup = a.supervisor();
  const int32_t world = a.world_size();
  if (!sup.elastic()) return;
  if (a.stopping() || a.stop_requested() || a.failed() || shut_down_) {
    // It ends soon and gives back all it holds; a grow it cannot take is given back now.
    scheduler_->Resized(job.record.id, sup.running(world), clock_->SteadyNow());
    return;
  }
  if (n == sup.size(world)) return;
  const std::optional<RankActions> actions = sup.Resize(n, why);
  if (actions && !Act(job, *actions, -1)) return;
  scheduler_->Resized(job.record.id, sup.running(world), clock_->SteadyNow());
}

absl::Status JobLifecycle::Scale(ActiveJob& job, int32_t n, const std::string& by) {
  const JobSpec& spec = job.spec;
  if (!spec.elastic.enabled()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job.record.id, " is not elastic: give elastic.min_processes (with fault_tolerance.mode replica)"));
  }
  if (n < spec.elastic.min_processes || n > spec.num_processes) {
    return absl::InvalidArgumentError(absl::StrCat("job ", job.record.id, " runs with between ",
                                                   spec.elastic.min_processes, " (elastic.min_processes) and ",
                                                   spec.num_processes, " (num_processes) ranks; asked for ", n));
  }
  Attempt* a = job.attempt.get();
  if (a == nullptr || !a->supervisor().elastic() || a->stopping() || a->stop_requested() || a->failed() ||
      (job.record.state != JobState::kRunning && job.record.state != JobState::kStarting)) {
    return absl::FailedPreconditionError(absl::StrCat("job ", job.record.id, " is ", JobStateName(job.record.state),
                                                      "; only a running job can be scaled"));
  }
  if (absl::Status s = scheduler_->Scale(job.record.id, n, clock_->SteadyNow()); !s.ok()) return s;
  const std::string why = absl::StrCat("scaled to ", n, by.empty() ? "" : absl::StrCat(" by ", by));
  RankSupervisor& sup = a->supervisor();
  if (n != sup.size(a->world_size())) {
    const std::optional<RankActions> actions = sup.Resize(n, why);
    if (actions && !Act(job, *actions, -1)) return absl::OkStatus();
  }
  scheduler_->Resized(job.record.id, sup.running(a->world_size()), clock_->SteadyNow());
  TrySchedule();  // what a shrink frees goes to waiting jobs once its ranks left
  return absl::OkStatus();
}

bool JobLifecycle::Act(ActiveJob& job, const RankActions& d, int32_t rank) {
  Attempt& a = *job.attempt;
  if (!d.event.empty()) jobs_->AddEvent(job, d.event);
  if (d.fail) {
    Apply(job, a.Fail(rank, d.failure));
    return false;
  }
  if (d.command) {
    for (int32_t to : d.to) {
      if (WorkerChannel* ch = a.channel(to)) ch->Push(*d.command);
    }
  }
  if (d.healed_rank >= 0) metrics_->RecordHeal(job.record.id, d.heal_seconds);
  Launcher* launcher = launchers_->Get(launchers_->KindOf(job.spec));
  for (int32_t r : d.kill) {
    if (launcher != nullptr) launcher->KillRank(job.record.id, job.record.attempt, r);
  }
  for (int32_t r : d.launch) {
    a.Replace(r);
    if (absl::Status s = launchers_->LaunchRank(job, ContextOf(job), r); !s.ok()) {
      Apply(job, a.Fail(r, absl::StrCat("rank ", r, " could not be launched: ", s.message())));
      return false;
    }
    spdlog::info("job {}: launched rank {}", job.record.id, r);
  }
  a.supervisor().Export(job.record.id, metrics_);
  if (d.parked >= 0) {
    // A rank that left on purpose: it ended neither well nor badly, and
    // what it held goes to the job it left for (or whoever waits).
    a.Park(d.parked);
    scheduler_->Resized(job.record.id, a.supervisor().running(a.world_size()), clock_->SteadyNow());
    TrySchedule();
  }
  return true;
}

void JobLifecycle::BeginShutdown() {
  shut_down_ = true;
  scheduler_->Pause();
}

}  // namespace trainyard
