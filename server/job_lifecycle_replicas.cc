// JobLifecycle, fault_tolerance.mode replica and elastic jobs: applying the
// membership's decisions, evicting ranks (hung, slow), and resizing.
#include "server/job_lifecycle.h"

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace trainyard {

void JobLifecycle::Resize(ActiveJob& job, int32_t n, const std::string& why) {
  Attempt& a = *job.attempt;
  Membership* m = a.membership();
  if (m == nullptr || a.stopping() || a.stop_requested() || a.failed() || shut_down_) {
    // It ends soon and gives back all it holds; a grow it cannot take is given back now.
    if (m != nullptr) scheduler_->Resized(job.record.id, m->running(), clock_->SteadyNow());
    return;
  }
  if (n == m->size()) return;
  if (!ApplyReplicas(job, m->Resize(n, why), -1)) return;
  scheduler_->Resized(job.record.id, m->running(), clock_->SteadyNow());
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
  Membership* m = a == nullptr ? nullptr : a->membership();
  if (m == nullptr || a->stopping() || a->stop_requested() || a->failed() ||
      (job.record.state != JobState::kRunning && job.record.state != JobState::kStarting)) {
    return absl::FailedPreconditionError(absl::StrCat("job ", job.record.id, " is ", JobStateName(job.record.state),
                                                      "; only a running job can be scaled"));
  }
  if (absl::Status s = scheduler_->Scale(job.record.id, n, clock_->SteadyNow()); !s.ok()) return s;
  const std::string why = absl::StrCat("scaled to ", n, by.empty() ? "" : absl::StrCat(" by ", by));
  if (n != m->size()) {
    if (!ApplyReplicas(job, m->Resize(n, why), -1)) return absl::OkStatus();
  }
  scheduler_->Resized(job.record.id, m->running(), clock_->SteadyNow());
  TrySchedule();  // what a shrink frees goes to waiting jobs once its ranks left
  return absl::OkStatus();
}

bool JobLifecycle::ApplyReplicas(ActiveJob& job, const Membership::Decision& d, int32_t rank) {
  Attempt& a = *job.attempt;
  Membership* m = a.membership();
  if (m == nullptr) return true;
  if (!d.event.empty()) jobs_->AddEvent(job, d.event);
  if (d.fail) {
    Apply(job, a.Fail(rank, d.failure));
    return false;
  }
  if (d.send) {
    WorkerCommand cmd{WorkerCommand::Kind::kMembership, d.send->reason};
    cmd.membership = *d.send;
    for (int32_t to : d.to) {
      if (WorkerChannel* ch = a.channel(to)) ch->Push(cmd);
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
  metrics_->SetReplicas(job.record.id, m->live_replicas(), m->healing_replicas(), m->epoch());
  if (d.parked >= 0) {
    // A rank that left on purpose: it ended neither well nor badly, and
    // what it held goes to the job it left for (or whoever waits).
    a.Park(d.parked);
    scheduler_->Resized(job.record.id, m->running(), clock_->SteadyNow());
    TrySchedule();
  }
  return true;
}

bool JobLifecycle::LookForStraggler(ActiveJob& job, SteadyTime now) {
  Attempt& a = *job.attempt;
  // DDP ranks only: their forward passes hold no collective (FSDP's gather
  // parameters in them, so a fast rank would wait there too).
  if (job.record.state != JobState::kRunning || a.stopping() || a.stop_requested() || shut_down_ ||
      job.spec.distributed_type != DistributedType::kDdp) {
    return true;
  }
  Membership* m = a.membership();
  std::vector<int32_t> ranks;
  if (m != nullptr) {
    if (!m->formed()) return true;
    ranks = m->view().ranks;
  } else {
    for (int32_t r = 0; r < a.world_size(); ++r) ranks.push_back(r);
  }
  StragglerWatch& watch = job.progress.stragglers();
  const std::optional<StragglerWatch::Verdict> slow = watch.Look(ranks, now);
  if (!slow) return true;
  const std::string why = absl::StrCat(slow->Describe(), " for ",
                                       std::chrono::duration_cast<std::chrono::seconds>(watch.window()).count(), " s");
  if (m == nullptr) {  // a whole group cannot drop a rank: it is named
    jobs_->AddEvent(job, absl::StrCat("rank ", slow->rank, " is slow: ", why));
    return true;
  }
  watch.Forget(slow->rank);  // its replacement is another process
  return Evict(job, slow->rank, absl::StrCat("evicted as slow: ", why));
}

bool JobLifecycle::Evict(ActiveJob& job, int32_t rank, const std::string& why) {
  Membership* m = job.attempt->membership();
  if (m == nullptr || m->state(rank) != Membership::State::kMember) return true;
  jobs_->AddEvent(job, absl::StrCat("rank ", rank, " ", why));
  const bool on = ApplyReplicas(job, m->OnLost(rank, why), rank);
  // Its end launches the replacement (or, once the attempt failed, counts as one of the group's).
  if (Launcher* l = launchers_->Get(launchers_->KindOf(job.spec))) l->KillRank(job.record.id, job.record.attempt, rank);
  // On another host, a rank that cannot be killed (its node dead or cut
  // off) ends after the node-loss grace (WorkerSessions::EndRanksOnLostNodes).
  if (job.attempt) job.attempt->Evicted(rank, clock_->SteadyNow());
  return on;
}

}  // namespace trainyard
