#include "worker/replicas/replica_membership.h"

#include <c10/util/Exception.h>
#include <torch/torch.h>

#include <cstdlib>
#include <stdexcept>

#include "common/log.h"
#include "worker/collectives/abortable_store.h"
#include "worker/collectives/shm_collectives.h"

namespace trainyard {
namespace {

using ReplicaClock = std::chrono::steady_clock;

// The message of `e` without c10's backtrace.
std::string GroupErrorText(const std::exception& e) {
  const auto* ce = dynamic_cast<const c10::Error*>(&e);
  return ce != nullptr ? ce->what_without_backtrace() : e.what();
}

}  // namespace

ReplicaOptions ReplicaOptionsFromEnvironment(int32_t launch_rank) {
  ReplicaOptions o;
  o.launch_rank = launch_rank;
  const char* hash = std::getenv("TRAINYARD_REPLICA_HASH");
  o.log_hashes = hash != nullptr && std::string(hash) == "1";
  o.log_commits = o.log_hashes || (hash != nullptr && std::string(hash) == "commits");
  return o;
}

bool IsGroupFailure(const std::exception& e) {
  if (dynamic_cast<const c10::DistError*>(&e) != nullptr || dynamic_cast<const ShmAborted*>(&e) != nullptr ||
      dynamic_cast<const GroupSuperseded*>(&e) != nullptr) {
    return true;
  }
  const auto* ce = dynamic_cast<const c10::Error*>(&e);
  const std::string text = ce != nullptr ? ce->what_without_backtrace() : e.what();
  for (const char* sign : {"Connection closed by peer", "Connection reset by peer", "Broken pipe", "Timed out",
                           "timed out", "Socket Timeout", "gloo", "Gloo", "connection refused", "Connection refused"}) {
    if (text.find(sign) != std::string::npos) return true;
  }
  return false;
}

ReplicaMembership::ReplicaMembership(ReplicaOptions options, MembershipMailbox* mailbox, FlightRecorder* recorder)
    : options_(std::move(options)), mailbox_(mailbox), recorder_(recorder) {}

ReplicaMembership::~ReplicaMembership() = default;

int64_t ReplicaMembership::epoch() const { return epoch_; }

void ReplicaMembership::Report(const ReplicaReport& event) {
  if (options_.reporter != nullptr) options_.reporter->OnReplica(event);
}

void ReplicaMembership::Drop() { group_.reset(); }

const ReplicaGroup* ReplicaMembership::Join(const MembershipView& offered, int64_t step) {
  group_.reset();
  taken_at_ = ReplicaClock::now();
  MembershipView m = offered;
  for (;;) {
    epoch_ = m.epoch;
    mailbox_->Forget(m.epoch);
    committed_in_epoch_ = false;
    heal_ = HealResult{};
    if (m.IndexOf(options_.launch_rank) < 0) {
      log::Info("rank {}: membership {} leaves this rank out; it leaves at step {}", options_.launch_rank, m.Describe(),
                step);
      Report({ReplicaReport::Kind::kLeft, m.epoch, step});
      return nullptr;
    }
    log::Info("rank {}: taking membership {}", options_.launch_rank, m.Describe());
    const int64_t epoch = m.epoch;
    MembershipMailbox* mailbox = mailbox_;
    try {
      group_ = std::make_unique<ReplicaGroup>(
          m, options_.launch_rank, options_.bind_addr, options_.group_timeout, options_.shared_memory, recorder_,
          [mailbox, epoch] { return mailbox->latest_epoch() > epoch; }, options_.fsdp_unit, options_.secret);
      return group_.get();
    } catch (const std::exception& e) {
      // A member of this epoch is gone before its groups formed (a newer
      // membership came, or its store or connection is gone): the newer
      // membership the coordinator offers is the one to form.
      const bool superseded = dynamic_cast<const GroupSuperseded*>(&e) != nullptr;
      if (!superseded && !IsGroupFailure(e)) throw;
      const std::string detail = GroupErrorText(e);
      log::Warn("rank {}: forming the groups of epoch {} failed: {}", options_.launch_rank, epoch, detail);
      if (!superseded) Report({ReplicaReport::Kind::kGroupBroken, epoch, step, detail});
      std::optional<MembershipView> next =
          mailbox_->WaitNewer(epoch, ReplicaClock::now() + options_.membership_timeout);
      if (!next) throw std::runtime_error(detail + ", and no newer membership came");
      m = std::move(*next);
    }
  }
}

const ReplicaGroup& ReplicaMembership::JoinFirst() {
  std::optional<MembershipView> m = mailbox_->WaitNewer(0, ReplicaClock::now() + options_.membership_timeout);
  if (!m) throw std::runtime_error("no membership came from the coordinator");
  const ReplicaGroup* g = Join(*m, 0);
  if (g == nullptr) throw std::runtime_error("the first membership leaves this rank out: " + m->Describe());
  return *g;
}

const ReplicaGroup* ReplicaMembership::JoinNewer(const std::string& detail, int64_t step) {
  group_.reset();
  log::Warn("rank {}: the group of epoch {} broke at step {}: {}", options_.launch_rank, epoch_, step, detail);
  Report({ReplicaReport::Kind::kGroupBroken, epoch_, step, detail});
  std::optional<MembershipView> m = mailbox_->WaitNewer(epoch_, ReplicaClock::now() + options_.membership_timeout);
  if (!m) throw std::runtime_error("the group broke (" + detail + ") and no newer membership came");
  return Join(*m, step);
}

const ReplicaGroup* ReplicaMembership::JoinAgreed(int64_t epoch, int64_t step) {
  std::optional<MembershipView> m = mailbox_->WaitFor(epoch, ReplicaClock::now() + options_.membership_timeout);
  if (!m) throw std::runtime_error("membership epoch " + std::to_string(epoch) + " was agreed but never came");
  return Join(*m, step);
}

void ReplicaMembership::Healed(const HealResult& heal) {
  heal_ = heal;
  if (heal.healed) {
    log::Info("rank {}: healed from group rank {} at step {} ({} bytes)", options_.launch_rank, heal.source, heal.step,
              heal.bytes);
  }
}

void ReplicaMembership::Committed(int64_t step, int64_t cursor, const std::vector<int64_t>& positions,
                                  const std::vector<at::Tensor>& parameters) {
  if (!committed_in_epoch_) {
    committed_in_epoch_ = true;
    ReplicaReport e{ReplicaReport::Kind::kCommitted, epoch_, step};
    e.seconds = std::chrono::duration<double>(ReplicaClock::now() - taken_at_).count();
    e.healed = heal_.healed;
    e.heal_bytes = heal_.healed ? heal_.bytes : 0;
    Report(e);
  }
  Record(epoch_, step, cursor, positions, parameters);
}

void ReplicaMembership::CommittedEarlier(int64_t epoch, int64_t step, int64_t cursor,
                                         const std::vector<int64_t>& positions,
                                         const std::vector<at::Tensor>& parameters) {
  Record(epoch, step, cursor, positions, parameters);
}

void ReplicaMembership::Record(int64_t epoch, int64_t step, int64_t cursor, const std::vector<int64_t>& positions,
                               const std::vector<at::Tensor>& parameters) {
  const bool wants = options_.reporter != nullptr && options_.reporter->WantsCommits();
  if (!wants && !options_.log_hashes) {
    if (options_.log_commits) {
      log::Info("replica rank {} epoch {} step {} cursor {}", options_.launch_rank, epoch, step, cursor);
    }
    return;
  }
  ReplicaCommit c{options_.launch_rank,   epoch, step, cursor, group_ ? group_->size() : 0, positions,
                  HashTensors(parameters)};
  if (options_.log_hashes) {
    log::Info("replica rank {} epoch {} step {} cursor {} hash {}", c.rank, c.epoch, c.step, c.cursor, c.hash);
  }
  if (wants) options_.reporter->OnCommit(c);
}

}  // namespace trainyard
