#include "server/jobs/job_table.h"

#include <filesystem>
#include <limits>

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/paths.h"
#include "common/secrets.h"
#include "common/unix_account.h"
#include "spdlog/spdlog.h"

namespace trainyard {

std::string JobTable::NewId() const {
  for (;;) {
    std::string id = std::string(kJobIdPrefix) + RandomHex(kJobIdHexDigits / 2);
    if (jobs_.count(id)) continue;
    if (store_->Get(id).status().code() == absl::StatusCode::kNotFound) return id;
  }
}

absl::StatusOr<ActiveJob*> JobTable::Submit(const std::string& id, const JobSpec& spec,
                                            const std::vector<std::string>& notes, const Ownership& ownership) {
  JobRecord r;
  r.id = id;
  r.name = spec.name;
  r.state = JobState::kQueued;
  r.reason = "submitted";
  r.spec_json = JobSpecToJson(spec);
  r.num_processes = spec.num_processes;
  r.max_steps = spec.script.empty() ? spec.max_steps : 0;  // a script's own length is not known
  r.created_unix_millis = clock_->UnixMillis();
  r.owner = ownership.owner;
  r.group = ownership.group;
  r.priority = ownership.priority;
  r.run_as = ownership.run_as;
  r.sweep_id = ownership.sweep_id;
  r.sweep_trial = ownership.sweep_id.empty() ? -1 : ownership.sweep_trial;
  if (auto s = store_->Insert(r, {r.created_unix_millis, JobState::kQueued, "submitted"}); !s.ok()) return s;
  counts_[JobState::kQueued]++;
  CountQueued(r, 1);
  metrics_->SetJobCounts(counts_);
  ActiveJob& job = jobs_.try_emplace(id, r, spec, metrics_, clock_).first->second;
  for (const std::string& note : notes) AddEvent(job, note);
  if (spec.script.empty()) {
    spdlog::info("job {} ({}) queued: {} processes, {} steps", id, spec.name, spec.num_processes, spec.max_steps);
  } else {
    spdlog::info("job {} ({}) queued: {} processes running {}", id, spec.name, spec.num_processes, spec.script.path);
  }
  return &job;
}

ActiveJob& JobTable::Hold(const JobRecord& record, const JobSpec& spec) {
  counts_[record.state]++;
  if (record.state == JobState::kQueued) CountQueued(record, 1);
  if (record.state != JobState::kQueued) started_.insert(record.id);
  auto [it, added] = jobs_.try_emplace(record.id, record, spec, metrics_, clock_);
  if (added) {
    // A job held again (a restart, a resume) goes on with its series.
    absl::StatusOr<JobHistory> h = StoredHistory(record.id);
    if (h.ok()) {
      it->second.history = *std::move(h);
    } else {
      spdlog::warn("job {}: its stored history is not readable ({}); it starts anew", record.id,
                   std::string(h.status().message()));
    }
  }
  return it->second;
}

void JobTable::CountEnded(JobState state) {
  counts_[state]++;
  metrics_->SetJobCounts(counts_);
}

ActiveJob* JobTable::Find(const std::string& id) {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : &it->second;
}

ActiveJob* JobTable::FindAttempt(const std::string& id, int32_t attempt) {
  ActiveJob* job = Find(id);
  return job == nullptr || job->record.attempt != attempt || !job->attempt ? nullptr : job;
}

absl::StatusOr<ActiveJob*> JobTable::FindActive(const std::string& id, const std::string& why_it_matters) {
  if (ActiveJob* job = Find(id)) return job;
  auto rec = store_->Get(id);
  if (!rec.ok()) return rec.status();
  return absl::FailedPreconditionError(
      absl::StrCat("job ", id, " has ended (", JobStateName(rec->state), ")", why_it_matters));
}

absl::StatusOr<JobRecord> JobTable::Ended(const std::string& id, const std::string& what_to_do) {
  if (const ActiveJob* live = Find(id)) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", id, " has not ended (", JobStateName(live->record.state), ")", what_to_do));
  }
  return store_->Get(id);
}

absl::StatusOr<JobRecord> JobTable::Record(const std::string& id) {
  if (ActiveJob* job = Find(id)) return job->record;
  return store_->Get(id);
}

std::set<int> JobTable::RendezvousPortsHeld() const {
  std::set<int> held;
  for (const auto& id : started_) {
    const auto it = jobs_.find(id);
    if (it != jobs_.end() && it->second.attempt != nullptr && it->second.attempt->place().master_port > 0) {
      held.insert(it->second.attempt->place().master_port);
    }
  }
  return held;
}

std::vector<std::string> JobTable::ids() const {
  std::vector<std::string> out;
  for (const auto& [id, job] : jobs_) out.push_back(id);
  return out;
}

absl::StatusOr<std::vector<JobRecord>> JobTable::Stored() { return store_->List(std::numeric_limits<int>::max()); }

absl::StatusOr<JobRecord> JobTable::StoredRecord(const std::string& id) { return store_->Get(id); }

absl::StatusOr<std::vector<JobEvent>> JobTable::Events(const std::string& id) { return store_->Events(id); }

absl::StatusOr<std::vector<CheckpointRecord>> JobTable::Checkpoints(const std::string& id) {
  auto rec = store_->Get(id);
  if (!rec.ok()) return rec.status();
  return store_->Checkpoints(id);
}

void JobTable::AddCheckpoint(ActiveJob& job, int32_t attempt, const CheckpointEvent& c) {
  if (auto s = store_->AddCheckpoint(job.record.id, {attempt, c}); !s.ok()) {
    spdlog::error("job {}: cannot record checkpoint {}: {}", job.record.id, c.index, std::string(s.message()));
  }
}

absl::StatusOr<JobPage> JobTable::Page(const std::vector<JobState>& states, int64_t after, int size,
                                       const std::vector<std::string>& owners, const std::vector<std::string>& groups,
                                       bool newest_first) {
  auto page = store_->ListPage(states, after, size, owners, groups, newest_first);
  if (!page.ok()) return page.status();
  JobPage out;
  for (JobRecord& r : page->jobs) {
    const ActiveJob* live = Find(r.id);
    out.jobs.push_back(live != nullptr ? live->record : std::move(r));  // the live one is fresher
  }
  if (page->more) out.next_page_token = JobPageToken(page->last, newest_first);
  return out;
}

absl::Status JobTable::Delete(const JobRecord& ended, const std::string& by) {
  if (auto s = store_->Delete(ended.id); !s.ok()) return s;
  if (auto it = counts_.find(ended.state); it != counts_.end() && it->second > 0) {
    it->second--;
    metrics_->SetJobCounts(counts_);
  }
  spdlog::info("job {} ({}) deleted by {}; its files stay on disk", ended.id, JobStateName(ended.state), by);
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<JobWatch>> JobTable::Watch(const std::string& id) {
  auto watch = std::make_shared<JobWatch>();
  ActiveJob* job = Find(id);
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

void JobTable::Broadcast(const std::string& id, int32_t attempt, const WorkerCommand& command) {
  if (ActiveJob* job = FindAttempt(id, attempt)) job->attempt->Broadcast(command);
}

void JobTable::Transition(ActiveJob& job, JobState state, const std::string& reason) {
  JobRecord& r = job.record;
  counts_[r.state]--;
  counts_[state]++;
  if (r.state == JobState::kQueued) CountQueued(r, -1);
  if (state == JobState::kQueued) CountQueued(r, 1);
  r.state = state;
  if (state == JobState::kQueued) {
    started_.erase(r.id);
  } else {
    started_.insert(r.id);
  }
  r.reason = reason;
  const int64_t now = clock_->UnixMillis();
  if (state == JobState::kStarting && r.started_unix_millis == 0) r.started_unix_millis = now;
  if (IsTerminal(state)) r.ended_unix_millis = now;
  JobEvent event{now, state, reason};
  if (absl::Status s = store_->Update(r, &event); !s.ok()) {
    spdlog::error("job {}: cannot persist {}: {}", r.id, JobStateName(state), std::string(s.message()));
  }
  spdlog::info("job {} -> {}: {}", r.id, JobStateName(state), reason);
  for (auto& w : job.watchers) w->Push({r, std::nullopt});
  metrics_->SetJobCounts(counts_);
}

void JobTable::PlaceRank(ActiveJob& job, int32_t rank, const std::string& node) {
  if (!job.attempt) return;
  job.attempt->place().nodes[rank] = node;
  metrics_->SetRankNode(job.record.id, rank, node);
}

void JobTable::AddEvent(ActiveJob& job, const std::string& reason) {
  JobEvent event{clock_->UnixMillis(), job.record.state, reason};
  if (auto s = store_->Update(job.record, &event); !s.ok()) {
    spdlog::error("job {}: cannot persist event: {}", job.record.id, std::string(s.message()));
  }
  spdlog::info("job {}: {}", job.record.id, reason);
}

void JobTable::AddEvent(const std::string& id, const std::string& reason) {
  if (ActiveJob* job = Find(id)) return AddEvent(*job, reason);
  absl::StatusOr<JobRecord> record = store_->Get(id);
  if (!record.ok()) return;
  const JobEvent event{clock_->UnixMillis(), record->state, reason};
  store_->Update(*record, &event).IgnoreError();
}

void JobTable::PersistProgress(ActiveJob& job, std::chrono::steady_clock::time_point now) {
  if (job.history.dirty() && now - job.history_saved >= kHistorySaveInterval) {
    job.history_saved = now;
    SaveHistory(job);
  }
  if (!job.progress.PersistDue(now)) return;
  // The points since the last save, with the progress: a kill -9 loses at
  // most the last second of the job's series.
  if (const std::string tail = job.history.TakeTail(); !tail.empty()) {
    if (auto s = store_->AppendHistory(job.record.id, tail); !s.ok()) {
      spdlog::warn("job {}: cannot append to its history: {}", job.record.id, std::string(s.message()));
    }
  }
  if (auto s = store_->Update(job.record, nullptr); !s.ok()) {
    spdlog::warn("job {}: cannot persist progress: {}", job.record.id, std::string(s.message()));
  }
}

void JobTable::SaveHistory(ActiveJob& job) {
  if (!job.history.dirty()) return;
  if (auto s = store_->SaveHistory(job.record.id, job.history.Encode()); !s.ok()) {
    spdlog::warn("job {}: cannot save its history: {}", job.record.id, std::string(s.message()));
    return;
  }
  job.history.MarkPersisted();
}

void JobTable::SaveHistories() {
  for (auto& [id, job] : jobs_) SaveHistory(job);
}

absl::StatusOr<JobHistory> JobTable::History(const std::string& id) {
  if (ActiveJob* job = Find(id)) return job->history;
  absl::StatusOr<JobRecord> record = store_->Get(id);
  if (!record.ok()) return record.status();
  return StoredHistory(id);
}

absl::StatusOr<JobHistory> JobTable::StoredHistory(const std::string& id) {
  absl::StatusOr<std::string> saved = store_->History(id);
  if (!saved.ok()) return saved.status();
  JobHistory h;
  if (!saved->empty()) {
    absl::StatusOr<JobHistory> whole = JobHistory::Decode(*saved);
    if (!whole.ok()) return whole.status();
    h = *std::move(whole);
  }
  absl::StatusOr<std::vector<std::string>> tails = store_->HistoryTails(id);
  if (!tails.ok()) return tails.status();
  for (const std::string& tail : *tails) {
    if (auto s = h.AddTail(tail); !s.ok()) return s;
  }
  return h;
}

void JobTable::Remove(const std::string& id, bool local) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return;
  ActiveJob& job = it->second;
  if (job.record.state == JobState::kQueued) CountQueued(job.record, -1);
  SaveHistory(job);
  if (local && job.spec.checkpoint.snapshot_every_steps > 0) {
    // The job's in-memory snapshots on this host (its workers remove them
    // when they end well; a failed or cancelled job leaves them).
    // Removed as what it should be: the job account's own directory, and
    // nothing a link in it leads to (common/paths.h RemoveOwnTree).
    uid_t uid = ::geteuid();
    if (!job.record.run_as.empty()) {
      absl::StatusOr<UnixAccount> account = LookupUnixAccount(job.record.run_as);
      uid = account.ok() ? account->uid : static_cast<uid_t>(-1);
    }
    if (absl::Status s = RemoveOwnTree(SnapshotDir(id), uid); !s.ok()) {
      spdlog::warn("job {}: its in-memory snapshots are left: {}", id, std::string(s.message()));
    }
  }
  if (job.attempt) job.attempt->CloseChannels();
  for (auto& w : job.watchers) w->Close();
  metrics_->RemoveJob(id);
  started_.erase(id);
  jobs_.erase(it);
}

void JobTable::CountQueued(const JobRecord& r, int delta) {
  auto it = queued_by_priority_.try_emplace(r.priority, 0).first;
  if ((it->second += delta) <= 0) queued_by_priority_.erase(it);
}

}  // namespace trainyard
