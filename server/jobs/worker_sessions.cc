#include "server/jobs/worker_sessions.h"

#include <algorithm>

#include "server/replicas/shard_groups.h"

#include "absl/strings/str_cat.h"
#include "common/secrets.h"
#include "common/utf8.h"
#include "spdlog/spdlog.h"

namespace trainyard {

absl::StatusOr<WorkerAttachment> WorkerSessions::Attach(const std::string& job_id, int32_t rank, int32_t attempt,
                                                        const std::string& token, const std::string& advertise_addr,
                                                        int32_t rendezvous_port, int32_t replica_store_port,
                                                        const MembershipView& held, const std::string& node) {
  ActiveJob* found = jobs_->Find(job_id);
  if (found == nullptr) return absl::NotFoundError(absl::StrCat("job ", job_id, " is not running"));
  ActiveJob& job = *found;
  // Check the token before telling anything about the attempt.
  if (job.record.worker_token.empty() || !ConstantTimeEquals(token, job.record.worker_token)) {
    return absl::PermissionDeniedError(absl::StrCat("invalid worker token for job ", job_id));
  }
  const bool joining = launchers_->TraitsOf(job.spec).ranks_join;
  if (attempt == 0 && joining) attempt = job.record.attempt;
  if (attempt != job.record.attempt) {
    return absl::FailedPreconditionError(absl::StrCat("attempt ", attempt, " of job ", job_id,
                                                      " is stale; the current attempt is ", job.record.attempt));
  }
  if (job.record.state == JobState::kQueued || !job.attempt) {
    return absl::UnavailableError(absl::StrCat("job ", job_id, " is queued; it takes workers once it is started"));
  }
  Attempt& a = *job.attempt;
  if (auto s = a.CheckAttach(job_id, rank); !s.ok()) return s;
  if (joining && job.record.state == JobState::kStarting) {
    std::string event;
    if (auto s = a.Join(job_id, rank, advertise_addr, rendezvous_port, &event); !s.ok()) return s;
    if (!event.empty()) jobs_->AddEvent(job, event);
  }
  auto channel = std::make_shared<WorkerChannel>();
  a.Attach(rank, channel);
  if (!node.empty()) jobs_->PlaceRank(job, rank, node);
  if (a.cancel_requested()) channel->Push({WorkerCommand::Kind::kStop, a.stop_reason()});
  RunningOnceAllAttached(job);
  WorkerAttachment attachment{job.record.spec_json,  job.record.num_processes, a.number(),
                              a.place().master_addr, a.place().master_port,    channel};
  // A membership goes down after the welcome (the stream writes the
  // welcome before it takes commands).
  if (!a.stopping()) {
    const std::string store = advertise_addr.empty() ? a.place().master_addr : advertise_addr;
    lifecycle_->Act(job, a.supervisor().OnHello(rank, store, replica_store_port, held), rank);
  }
  return attachment;
}

bool WorkerSessions::HoldsToken(const std::string& job_id, const std::string& token) {
  const ActiveJob* job = jobs_->Find(job_id);
  return job != nullptr && !job->record.worker_token.empty() && ConstantTimeEquals(token, job->record.worker_token);
}

void WorkerSessions::RunningOnceAllAttached(ActiveJob& job) {
  const Attempt& a = *job.attempt;
  if (!a.all_attached() || (job.record.state != JobState::kRecovering && job.record.state != JobState::kStarting)) {
    return;
  }
  job.progress.Touch(clock_->SteadyNow());
  const int32_t parked = a.parked();
  const std::string ranks =
      parked == 0 ? (job.record.num_processes == 1 ? std::string("its one rank")
                                                   : absl::StrCat("all ", job.record.num_processes, " ranks"))
                  : absl::StrCat(job.record.num_processes - parked, " of ", job.record.num_processes, " ranks");
  jobs_->Transition(job, JobState::kRunning,
                    job.record.state == JobState::kRecovering
                        ? absl::StrCat(ranks, " reattached after a coordinator restart")
                        : absl::StrCat(ranks, " connected"));
  if (std::string groups = ShardGroupsEvent(job.spec, a.place().nodes); !groups.empty()) jobs_->AddEvent(job, groups);
}

absl::StatusOr<JoinInfo> WorkerSessions::JoinInfoOf(const std::string& job_id,
                                                    const std::string& remote_coordinator_addr) {
  absl::StatusOr<ActiveJob*> found = jobs_->FindActive(job_id, "");
  if (!found.ok()) return found.status();
  const ActiveJob& job = **found;
  if (!launchers_->TraitsOf(job.spec).ranks_join) {
    return absl::FailedPreconditionError(absl::StrCat("job ", job_id, " is started by the ",
                                                      LauncherKindName(launchers_->KindOf(job.spec)),
                                                      " launcher; only launcher: external jobs take joining workers"));
  }
  if (job.record.worker_token.empty()) {
    return absl::UnavailableError(
        absl::StrCat("job ", job_id, " is ", JobStateName(job.record.state), "; it takes workers once it is started"));
  }
  return JoinInfo{job_id, job.record.worker_token, job.record.num_processes, job.record.attempt,
                  remote_coordinator_addr};
}

void WorkerSessions::Metrics(const std::string& job_id, int32_t attempt, const std::vector<StepMetrics>& samples) {
  ActiveJob* job = jobs_->FindAttempt(job_id, attempt);
  if (job == nullptr) return;
  const auto now = clock_->SteadyNow();
  // Replica and elastic jobs train with their membership's ranks.
  const int world_size = job->attempt->supervisor().training_size(job->attempt->world_size());
  for (const StepMetrics& agg : job->progress.OnSamples(samples, &job->record, now, job->attempt->lead_rank())) {
    job->history.Add(agg, world_size);
    for (auto& w : job->watchers) w->Push({std::nullopt, agg});
  }
  jobs_->PersistProgress(*job, now);
}

void WorkerSessions::Result(const std::string& job_id, int32_t attempt, int32_t rank, WorkerOutcome outcome,
                            const std::string& error) {
  ActiveJob* job = jobs_->FindAttempt(job_id, attempt);
  if (job == nullptr) return;
  spdlog::log(outcome == WorkerOutcome::kSucceeded ? spdlog::level::info : spdlog::level::warn,
              "job {}: rank {} reports {}{}{}", job_id, rank, WorkerOutcomeName(outcome), error.empty() ? "" : ": ",
              error);
  // A rank the mode replaces when it ends (Exit): its result does not
  // fail the attempt.
  const RankSupervisor& sup = job->attempt->supervisor();
  if ((outcome == WorkerOutcome::kFailed || outcome == WorkerOutcome::kStopped) && sup.Absorbs(rank, Live(*job))) {
    job->attempt->NoteResult(rank, outcome);
    if (sup.LeftOnPurpose(rank)) return;
    jobs_->AddEvent(*job, absl::StrCat("rank ", rank, " ", WorkerOutcomeName(outcome), ": ", error));
    return;
  }
  lifecycle_->Apply(*job, job->attempt->OnResult(rank, outcome, error));
}

void WorkerSessions::Checkpoint(const std::string& job_id, int32_t attempt, const CheckpointEvent& c, int32_t rank) {
  ActiveJob* job = jobs_->FindAttempt(job_id, attempt);
  if (job == nullptr || rank != job->attempt->lead_rank()) return;
  jobs_->AddCheckpoint(*job, attempt, c);
  jobs_->AddEvent(*job, job->progress.OnCheckpoint(c, clock_->SteadyNow()));
  requests_->CheckpointReported(c);
}

void WorkerSessions::Note(const std::string& job_id, int32_t attempt, int32_t rank, const std::string& text) {
  ActiveJob* job = jobs_->FindAttempt(job_id, attempt);
  const int taken = job == nullptr ? 0 : job->attempt->TakeNote(WorkerHandler::kMaxNotesPerAttempt);
  if (taken == 0) return;
  // Events travel in proto strings: valid UTF-8 only.
  const std::string clean = AsValidUtf8(text.substr(0, 2000));
  const bool last = taken == WorkerHandler::kMaxNotesPerAttempt;
  jobs_->AddEvent(
      *job, absl::StrCat("rank ", rank, ": ", clean, last ? " (later notes of this attempt: see the rank logs)" : ""));
}

void WorkerSessions::LauncherNote(const std::string& job_id, int32_t attempt, const std::string& text) {
  const std::string clean = AsValidUtf8(text.substr(0, 2000));
  ActiveJob* job = jobs_->FindAttempt(job_id, attempt);
  if (job == nullptr) {
    // An earlier attempt's batch job that ended after the job went on (or
    // ended): how it ended is still the job's history (the launcher says
    // it once per batch job).
    jobs_->AddEvent(job_id, clean);
    return;
  }
  if (job->attempt->TakeNote(WorkerHandler::kMaxNotesPerAttempt) == 0) return;
  jobs_->AddEvent(*job, clean);
}

void WorkerSessions::Replica(const std::string& job_id, int32_t attempt, int32_t rank, const ReplicaReport& report) {
  ActiveJob* job = jobs_->FindAttempt(job_id, attempt);
  if (job == nullptr) return;
  lifecycle_->Act(*job, job->attempt->supervisor().OnReport(rank, report), rank);
}

bool WorkerSessions::Live(const ActiveJob& job) const {
  return !job.attempt->stopping() && !job.attempt->stop_requested() && !lifecycle_->shut_down() &&
         job.record.state == JobState::kRunning;
}

void WorkerSessions::Detach(const std::string& job_id, int32_t attempt, int32_t rank,
                            const std::shared_ptr<WorkerChannel>& channel) {
  channel->Close();
  ActiveJob* job = jobs_->FindAttempt(job_id, attempt);
  if (job == nullptr) return;
  Attempt& a = *job->attempt;
  // A stream lost without a result: its process's end follows if it died;
  // else (where the mode takes ranks out) AttemptWatch::Supervise evicts it
  // after a grace.
  if (a.channel(rank) == channel.get() && !a.reported(rank)) a.supervisor().OnStreamLost(rank, Live(*job));
  if (std::optional<RankExit> end = a.Detach(job_id, rank, channel, clock_->SteadyNow())) Exit(*end);
}

namespace {

// "rank 1 was killed by signal 9 (Killed)" -> "killed by signal 9 (Killed)".
std::string WhyEnded(const RankExit& exit) {
  std::string why = exit.description;
  const std::string prefix = absl::StrCat("rank ", exit.rank, " ");
  if (why.rfind(prefix, 0) == 0) why.erase(0, prefix.size());
  if (why.rfind("was ", 0) == 0) why.erase(0, 4);
  return why.empty() ? "ended" : why;
}

}  // namespace

void WorkerSessions::Exit(const RankExit& exit) {
  ActiveJob* job = jobs_->FindAttempt(exit.job_id, exit.attempt);
  if (job == nullptr) return;
  // The mode may take the end (a replica replaced while enough are left).
  const bool finished = exit.outcome == WorkerOutcome::kSucceeded || exit.outcome == WorkerOutcome::kPreempted ||
                        exit.outcome == WorkerOutcome::kUsage;
  const Attempt& a = *job->attempt;
  const AttemptCondition now{Live(*job), a.stopping(), a.stop_requested()};
  if (std::optional<ExitDecision> d = job->attempt->supervisor().OnExit(exit.rank, finished, WhyEnded(exit), now)) {
    if (d->ended_while_away) {
      job->attempt->Park(exit.rank);
      RunningOnceAllAttached(*job);
    }
    if (lifecycle_->Act(*job, d->actions, exit.rank) || d->taken) return;
    if ((job = jobs_->FindAttempt(exit.job_id, exit.attempt)) == nullptr) return;
  }
  lifecycle_->Apply(*job, job->attempt->OnExit(exit, job->record.state == JobState::kRecovering));
}

void WorkerSessions::Exits(const std::vector<RankExit>& exits) {
  std::vector<std::pair<std::string, int32_t>> batched;
  for (const RankExit& e : exits) {
    const std::pair<std::string, int32_t> key{e.job_id, e.attempt};
    ActiveJob* job = jobs_->FindAttempt(e.job_id, e.attempt);
    if (job != nullptr && std::find(batched.begin(), batched.end(), key) == batched.end()) {
      job->attempt->supervisor().BeginBatch();
      batched.push_back(key);
    }
    Exit(e);
  }
  EndBatches(batched);
}

void WorkerSessions::EndBatches(const std::vector<std::pair<std::string, int32_t>>& attempts) {
  for (const auto& [id, number] : attempts) {
    ActiveJob* job = jobs_->FindAttempt(id, number);
    if (job == nullptr || !job->attempt) continue;
    Attempt& a = *job->attempt;
    const RankActions end = a.supervisor().EndBatch();
    if (!end.empty() && !a.stopping() && !a.stop_requested()) lifecycle_->Act(*job, end, -1);
  }
}

void WorkerSessions::NoteLostNode(ActiveJob& job, int32_t rank) {
  if (launchers_->TraitsOf(job.spec).ranks_join) return;  // joined ranks come back by themselves
  auto node = job.attempt->place().nodes.find(rank);
  if (node == job.attempt->place().nodes.end() || node->second.empty()) return;
  if (!job.lost_nodes.insert(node->second).second) return;
  jobs_->AddEvent(job, absl::StrCat("node ", node->second, " presumed lost (rank ", rank,
                                    " lost its stream and no end was reported): later attempts and replacements "
                                    "leave it out"));
}

void WorkerSessions::EndLostRanks() {
  const SteadyTime now = clock_->SteadyNow();
  for (const std::string& id : jobs_->started_ids()) {
    const ActiveJob* job = jobs_->Find(id);
    if (job == nullptr || !job->attempt || job->record.state == JobState::kQueued) continue;
    const int32_t attempt = job->attempt->number();
    std::vector<RankExit> ends =
        job->attempt->LostRanks(id, now, std::chrono::duration<double>(job->spec.reattach_timeout_s));
    const size_t joined = ends.size();
    for (RankExit& e : job->attempt->RanksOnLostNodes(id, now)) ends.push_back(std::move(e));
    if (ends.empty()) continue;
    job->attempt->supervisor().BeginBatch();  // a node's ranks leave the group together
    for (size_t i = 0; i < ends.size(); ++i) {
      ActiveJob* current = jobs_->FindAttempt(id, attempt);
      if (current == nullptr) break;  // the attempt ended meanwhile
      if (i >= joined) NoteLostNode(*current, ends[i].rank);
      Exit(ends[i]);
    }
    EndBatches({{id, attempt}});
  }
}

}  // namespace trainyard
