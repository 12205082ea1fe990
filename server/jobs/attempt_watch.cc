#include "server/jobs/attempt_watch.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "common/replica_protocol.h"
#include "server/jobs/hang_watchdog.h"

namespace trainyard {

void AttemptWatch::Supervise(PendingRequests* requests, std::chrono::milliseconds diagnose_wait) {
  const auto now = clock_->SteadyNow();
  lifecycle_->UpdateEstimates();
  lifecycle_->TrySchedule();  // restarts whose backoff is over, preemptions past the minimum run time
  for (const std::string& id : jobs_->started_ids()) {
    ActiveJob* job = AttemptOf(id);
    if (job == nullptr || !job->attempt) continue;
    Attempt* a = job->attempt.get();
    // What this pass finds changes the group once (one membership for
    // every rank it takes out), with what fell due meanwhile.
    a->supervisor().BeginBatch();
    SuperviseAttempt(id, a, now, requests, diagnose_wait);
    if ((job = AttemptOf(id)) == nullptr || job->attempt.get() != a) continue;  // gone, and its batch with it
    // An attempt that is stopping (it failed in this pass) gets no new
    // group, but its batch is closed all the same.
    auto live = [&] { return !a->stopping() && !a->stop_requested(); };
    if (const RankActions due = a->supervisor().OnPass(); !due.empty() && live()) lifecycle_->Act(*job, due, -1);
    if ((job = AttemptOf(id)) == nullptr || job->attempt.get() != a) continue;
    if (const RankActions batch = a->supervisor().EndBatch(); !batch.empty() && live()) {
      lifecycle_->Act(*job, batch, -1);
    }
  }
  requests->ExpireDiagnoses(now);
}

ActiveJob* AttemptWatch::AttemptOf(const std::string& id) {
  ActiveJob* job = jobs_->Find(id);
  return job == nullptr || job->record.state == JobState::kQueued ? nullptr : job;
}

void AttemptWatch::SuperviseAttempt(const std::string& id, Attempt* a, SteadyTime now, PendingRequests* requests,
                                    std::chrono::milliseconds diagnose_wait) {
  // Each step may end the attempt (and start or end other jobs): look again.
  ActiveJob* job = AttemptOf(id);
  auto same = [&] { return (job = AttemptOf(id)) != nullptr && job->attempt.get() == a; };
  // A group that did not reattach after a coordinator restart.
  if (job->record.state == JobState::kRecovering && now > a->watch().reattach_deadline && !a->cancel_requested()) {
    lifecycle_->Apply(*job, a->Fail(-1,
                                    absl::StrCat("the workers did not reattach within reattach_timeout_s (",
                                                 job->spec.reattach_timeout_s, " s) after a coordinator restart"),
                                    /*reattach=*/true));
  }
  // A job preempted for another that did not stop within its grace.
  if (job->preempt_deadline && now > *job->preempt_deadline) {
    job->preempt_deadline.reset();
    jobs_->AddEvent(*job, absl::StrCat("did not stop within preemption_grace_s (", job->spec.preemption_grace_s,
                                       " s) after its preemption: stopping its ranks"));
    lifecycle_->StopGroup(*job);
  }
  // Ranks whose stream stayed lost (where the mode takes them out): out, and ended.
  if (job->record.state == JobState::kRunning && !a->stopping() && !a->stop_requested() && !lifecycle_->shut_down()) {
    if (const std::vector<int32_t> lost = a->supervisor().StreamsLost(); !lost.empty()) {
      Evict(*job, lost, "lost its stream without a result");
    }
    if (!same()) return;
  }
  if (!LookForStraggler(*job, now) || !same()) return;
  const HangVerdict hang = CheckForHang(*job, *clock_, requests, diagnose_wait);
  if (!hang.diagnosis.empty()) jobs_->AddEvent(*job, absl::StrCat("hang diagnosis: ", hang.diagnosis));
  if (!hang.hung) return;
  // The ranks the diagnosis blames are evicted and replaced where the
  // mode allows it; the others go on. A hang nobody is blamed for fails
  // the group.
  std::vector<int32_t> evict;
  for (int32_t r : hang.culprits) {
    if (a->supervisor().Evictable(r)) evict.push_back(r);
  }
  if (evict.empty()) {
    lifecycle_->Apply(*job, a->Fail(-1, hang.failure));
    return;
  }
  job->progress.Touch(now);  // the members left get step_timeout_s of their own
  Evict(*job, evict, absl::StrCat("evicted as hung: ", hang.failure));
}

bool AttemptWatch::LookForStraggler(ActiveJob& job, SteadyTime now) {
  Attempt& a = *job.attempt;
  // DDP ranks only: their forward passes hold no collective (FSDP's gather
  // parameters in them, so a fast rank would wait there too).
  if (job.record.state != JobState::kRunning || a.stopping() || a.stop_requested() || lifecycle_->shut_down() ||
      job.spec.distributed_type != DistributedType::kDdp) {
    return true;
  }
  const std::vector<int32_t> ranks = a.supervisor().TrainingRanks(a.world_size());
  if (ranks.empty()) return true;
  StragglerWatch& watch = job.progress.stragglers();
  const std::optional<StragglerWatch::Verdict> slow = watch.Look(ranks, now);
  if (!slow) return true;
  const std::string why = absl::StrCat(slow->Describe(), " for ",
                                       std::chrono::duration_cast<std::chrono::seconds>(watch.window()).count(), " s");
  if (!a.supervisor().Evictable(slow->rank)) {  // a whole group cannot drop a rank: it is named
    jobs_->AddEvent(job, absl::StrCat("rank ", slow->rank, " is slow: ", why));
    return true;
  }
  watch.Forget(slow->rank);  // its replacement is another process
  return Evict(job, {slow->rank}, absl::StrCat("evicted as slow: ", why));
}

bool AttemptWatch::Evict(ActiveJob& job, const std::vector<int32_t>& ranks, const std::string& why) {
  const std::string id = job.record.id;
  const int32_t attempt = job.record.attempt;
  std::vector<int32_t> out;
  for (int32_t r : ranks) {
    if (job.attempt->supervisor().Evictable(r)) out.push_back(r);
  }
  if (out.empty()) return true;
  jobs_->AddEvent(job, out.size() == 1 ? absl::StrCat("rank ", out[0], " ", why)
                                       : absl::StrCat("ranks ", RankRanges(out), " each ", why));
  // A joined rank's process is not the coordinator's to end or see end:
  // its eviction is its end (its next hello is its replacement's).
  const bool joined = launchers_->TraitsOf(job.spec).ranks_join;
  std::vector<RankExit> ends;
  for (int32_t rank : out) {
    ActiveJob* current = jobs_->FindAttempt(id, attempt);
    if (current == nullptr || !current->attempt) return false;
    RankSupervisor& sup = current->attempt->supervisor();
    if (!sup.Evictable(rank)) continue;  // left with a shard-mate evicted before it
    if (!lifecycle_->Act(*current, sup.Evict(rank, why), rank)) return false;
    // Its end launches the replacement (or, once the attempt failed, counts as one of the group's).
    if (Launcher* l = launchers_->Get(launchers_->KindOf(current->spec))) l->KillRank(id, attempt, rank);
    // On another host, a rank that cannot be killed (its node dead or cut
    // off) ends after the node-loss grace (WorkerSessions::EndLostRanks).
    if (current->attempt) current->attempt->Evicted(rank, clock_->SteadyNow());
    if (joined) {
      ends.push_back(RankExit::Ended(id, attempt, rank, WorkerOutcome::kFailed, absl::StrCat("rank ", rank, " ", why)));
    }
  }
  if (!ends.empty()) sessions_->Exits(ends);
  const ActiveJob* after = jobs_->FindAttempt(id, attempt);
  return after != nullptr && after->attempt && !after->attempt->stopping();
}

}  // namespace trainyard
