#include "server/jobs/attempt.h"

#include "absl/strings/str_cat.h"

namespace trainyard {

Attempt::Attempt(int32_t number, int32_t world_size, bool external)
    : number_(number), world_size_(world_size), external_(external) {}

absl::Status Attempt::CheckAttach(const std::string& job_id, int32_t rank) const {
  if (rank < 0 || rank >= world_size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " is out of range for job ", job_id, " (ranks 0..", world_size_ - 1, ")"));
  }
  if (channels_.count(rank)) {
    return absl::AlreadyExistsError(absl::StrCat("rank ", rank, " of job ", job_id, " is already connected"));
  }
  if (external_ && (exited_.count(rank) || stopping())) {
    return absl::FailedPreconditionError(
        absl::StrCat("attempt ", number_, " of job ", job_id, " is stopping; join again when the next one starts"));
  }
  return absl::OkStatus();
}

absl::Status Attempt::Join(const std::string& job_id, int32_t rank, const std::string& advertise_addr,
                           int rendezvous_port, std::string* event) {
  if (rank != 0) {
    if (place_.master_addr.empty())
      return absl::UnavailableError(absl::StrCat("waiting for rank 0 of job ", job_id, " to join"));
    return absl::OkStatus();
  }
  if (advertise_addr.empty() || rendezvous_port <= 0 || rendezvous_port > 65535) {
    return absl::InvalidArgumentError(
        "rank 0 of a joined job must say where its rendezvous store listens "
        "(trainyard-worker --advertise-addr, --master-port)");
  }
  place_.master_addr = advertise_addr;
  place_.master_port = rendezvous_port;
  *event = absl::StrCat("rank 0 joined; rendezvous at ", advertise_addr, ":", rendezvous_port);
  return absl::OkStatus();
}

void Attempt::Attach(int32_t rank, std::shared_ptr<WorkerChannel> channel) {
  channels_[rank] = std::move(channel);
  attached_.insert(rank);
  detached_at_.erase(rank);
}

std::optional<RankExit> Attempt::Detach(const std::string& job_id, int32_t rank,
                                        const std::shared_ptr<WorkerChannel>& channel, SteadyTime now) {
  auto ch = channels_.find(rank);
  if (ch == channels_.end() || ch->second != channel) return std::nullopt;
  channels_.erase(ch);
  if (exited_.count(rank)) return std::nullopt;
  auto result = results_.find(rank);
  // A launcher reports the ends of the ranks it started; on another host
  // its report may come late (LostRanks).
  if (!external_) {
    if (node_loss_grace_ && result == results_.end()) detached_at_[rank] = now;
    return std::nullopt;
  }
  if (result == results_.end()) {
    // Lost without a result: it may reconnect (a network blip); LostRanks
    // gives up on it after the reattach timeout.
    detached_at_[rank] = now;
    return std::nullopt;
  }
  return RankExit::Ended(job_id, number_, rank, result->second,
                         absl::StrCat("rank ", rank, " ended (", WorkerOutcomeName(result->second), ")"));
}

void Attempt::Replace(int32_t rank) {
  if (auto ch = channels_.find(rank); ch != channels_.end()) {
    ch->second->Close();
    channels_.erase(ch);
  }
  results_.erase(rank);
  exited_.erase(rank);
  parked_.erase(rank);
  detached_at_.erase(rank);
  evicted_at_.erase(rank);
}

bool Attempt::all_attached() const {
  for (int32_t r = 0; r < world_size_; ++r) {
    if (!attached_.count(r) && !parked_.count(r)) return false;
  }
  return true;
}

void Attempt::Park(int32_t rank) {
  if (rank < 0 || rank >= world_size_) return;
  Replace(rank);
  exited_.insert(rank);
  parked_.insert(rank);
}

WorkerChannel* Attempt::channel(int32_t rank) const {
  auto it = channels_.find(rank);
  return it == channels_.end() ? nullptr : it->second.get();
}

void Attempt::Broadcast(const WorkerCommand& command) const {
  for (const auto& [rank, ch] : channels_) ch->Push(command);
}

void Attempt::CloseChannels() const {
  for (const auto& [rank, ch] : channels_) ch->Close();
}

Attempt::Update Attempt::OnResult(int32_t rank, WorkerOutcome outcome, const std::string& detail) {
  results_[rank] = outcome;
  switch (outcome) {
    case WorkerOutcome::kSucceeded: return {};
    case WorkerOutcome::kPreempted: {
      Update u;
      if (!preempted_) u.event = absl::StrCat("preempted: ", detail);
      preempted_ = true;
      return u;
    }
    case WorkerOutcome::kUsage: failure_.usage_error = true; break;
    case WorkerOutcome::kFailed:
    case WorkerOutcome::kStopped: break;
  }
  if (stop_requested()) return {};  // a stop we asked for is no failure
  return Fail(rank, absl::StrCat("rank ", rank, ": ", detail));
}

Attempt::Update Attempt::OnExit(const RankExit& exit, bool recovering) {
  if (exit.rank < 0 || exit.rank >= world_size_ || exited_.count(exit.rank)) return {};
  exited_.insert(exit.rank);
  std::optional<WorkerOutcome> outcome = exit.outcome;
  if (!outcome) {
    // Not the launcher's child (adopted): the rank's own report says how it ended.
    auto reported = results_.find(exit.rank);
    if (reported != results_.end()) outcome = reported->second;
    // Gone without a word before reattaching (killed with the coordinator,
    // say) is the coordinator's loss, not the job's: no restart is counted.
    if (!outcome && recovering) failure_.reattach_failed = true;
  }
  Update u;
  if (outcome == WorkerOutcome::kSucceeded) ++succeeded_;
  if (outcome == WorkerOutcome::kUsage) failure_.usage_error = true;
  if (outcome == WorkerOutcome::kPreempted) {
    preempted_ = true;  // the other ranks stop at the same step; nothing to stop here
  } else if (outcome != WorkerOutcome::kSucceeded && !stop_requested()) {
    u = Fail(exit.rank, exit.description);
  }
  u.ended = static_cast<int32_t>(exited_.size()) == world_size_;
  return u;
}

namespace {

// A rank that failed because a peer went away (its connection closed or
// reset): the peer's own failure, when it comes, is the cause.
bool LostItsPeer(const std::string& reason) {
  for (const char* symptom : {"closed by peer", "reset by peer", "Connection closed by", "Broken pipe"}) {
    if (reason.find(symptom) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

Attempt::Update Attempt::Fail(int32_t rank, const std::string& reason, bool reattach) {
  if (reattach) failure_.reattach_failed = true;
  if (failure_.failed) {
    // The first failure is the root cause, unless it was a rank losing the
    // peer whose own failure (killed by a signal, an error) comes now.
    if (LostItsPeer(failure_.reason) && !LostItsPeer(reason)) {
      failure_.reason = reason;
      failure_.rank = rank;
    }
    return {};
  }
  failure_.failed = true;
  failure_.reason = reason;
  failure_.rank = rank;
  Update u;
  u.failed_now = true;
  return u;
}

std::vector<RankExit> Attempt::LostRanks(const std::string& job_id, SteadyTime now,
                                         std::chrono::duration<double> reattach_timeout) const {
  std::vector<RankExit> gone;
  if (!external_) return gone;
  for (int32_t rank = 0; rank < world_size_; ++rank) {
    if (exited_.count(rank) || channels_.count(rank)) continue;
    if (stopping()) {
      // Not connected while its attempt stops: nothing to wait for.
      gone.push_back(RankExit::Ended(
          job_id, number_, rank, preempted_ && !failure_.failed ? WorkerOutcome::kPreempted : WorkerOutcome::kStopped,
          absl::StrCat("rank ", rank, " was not connected when attempt ", number_, " stopped")));
      continue;
    }
    auto lost = detached_at_.find(rank);
    if (lost != detached_at_.end() && now - lost->second > reattach_timeout) {
      gone.push_back(RankExit::Ended(
          job_id, number_, rank, WorkerOutcome::kFailed,
          absl::StrCat("rank ", rank, " lost its connection without a result and did not reconnect within ",
                       reattach_timeout.count(), " s")));
    }
  }
  return gone;
}

std::vector<RankExit> Attempt::RanksOnLostNodes(const std::string& job_id, SteadyTime now) const {
  std::vector<RankExit> gone;
  if (external_ || !node_loss_grace_) return gone;
  // Since when each rank is lost: its stream ended without a result (and it
  // did not connect again), or it was evicted; the earlier of the two.
  std::map<int32_t, std::pair<SteadyTime, bool>> lost;  // rank -> (since, evicted)
  for (const auto& [rank, since] : detached_at_) {
    if (!channels_.count(rank)) lost[rank] = {since, false};
  }
  for (const auto& [rank, since] : evicted_at_) {
    auto it = lost.find(rank);
    if (it == lost.end() || since < it->second.first) lost[rank] = {since, true};
  }
  for (const auto& [rank, when] : lost) {
    if (exited_.count(rank) || now - when.first <= *node_loss_grace_) continue;
    auto node = place_.nodes.find(rank);
    gone.push_back(RankExit::Ended(
        job_id, number_, rank, stopping() ? WorkerOutcome::kStopped : WorkerOutcome::kFailed,
        absl::StrCat("rank ", rank, node == place_.nodes.end() ? "" : absl::StrCat(" on node ", node->second),
                     when.second ? " was evicted" : " lost its stream without a result",
                     " and no end was reported within ", node_loss_grace_->count(), " s: its node is presumed lost")));
  }
  return gone;
}

AttemptEnd Attempt::End() const {
  AttemptEnd end;
  end.cancel_requested = cancel_requested();
  end.cancel_reason = stop_reason_;
  end.stopped_for_restart = stop_ == Stop::kForRestart;
  // A job that trained to its end before the preemption took effect is done.
  end.stopped_for_priority =
      stop_ == Stop::kForPriority && succeeded_ < world_size_ - static_cast<int32_t>(parked_.size());
  end.failed = failure_.failed;
  end.failure = failure_.reason;
  end.reattach_failed = failure_.reattach_failed;
  end.usage_error = failure_.usage_error;
  end.preempted = preempted_;
  // A rank that did not end well failed the attempt, unless preempted.
  end.all_succeeded = !failure_.failed && !preempted_;
  end.num_processes = world_size_;
  return end;
}

}  // namespace trainyard
