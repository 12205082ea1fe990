// NotifyingJobStore: the job store as the job manager sees it, with the
// jobs' webhooks behind it. Every call goes to the real store; a job's
// change of state whose new state its spec's `notify.on` names (PREEMPTED:
// queued again with a "preempted" reason) hands one delivery per URL to the
// Notifier, after the change is committed. So the core learns nothing of
// webhooks: what it persists is what they announce. The policy's `notify`
// (every job's) and its user's (that user's jobs') are called the same way,
// as the operator's (their outcomes in the server log, not the job's
// events); a URL named by several is called once per change. Each delivery
// is queued for the job's owner (fair between users: notifier.h).
//
// Thread-safe as the store and the notifier are.
#ifndef TRAINYARD_SERVER_NOTIFY_NOTIFYING_JOB_STORE_H_
#define TRAINYARD_SERVER_NOTIFY_NOTIFYING_JOB_STORE_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/policy.h"
#include "server/notify/notifier.h"
#include "server/store/job_store.h"

namespace trainyard {

class NotifyingJobStore final : public JobStore {
 public:
  // Both must outlive it.
  NotifyingJobStore(JobStore* store, Notifier* notifier) : store_(store), notifier_(notifier) {}

  // The policy whose webhooks are called beside the specs' (null: none);
  // set again when the policy is reloaded.
  void SetPolicy(std::shared_ptr<const Policy> policy) ABSL_LOCKS_EXCLUDED(mu_);

  absl::Status Insert(const JobRecord& job, const JobEvent& event) override { return store_->Insert(job, event); }
  // A job's events that change nothing a webhook announces (a checkpoint
  // saved, a rank's note: most of them) cost a lookup of the state it last
  // had here, no parse of its spec and no read of the store.
  absl::Status Update(const JobRecord& job, const JobEvent* event) override;
  // How often a job's spec was read for its webhooks (for tests).
  uint64_t spec_reads() const { return spec_reads_; }
  absl::Status AddEvent(const std::string& id, const JobEvent& event) override { return store_->AddEvent(id, event); }
  absl::StatusOr<JobRecord> Get(const std::string& id) override { return store_->Get(id); }
  absl::StatusOr<std::vector<JobRecord>> List(int limit) override { return store_->List(limit); }
  absl::StatusOr<Page> ListPage(const std::vector<JobState>& states, int64_t after, int limit,
                                const std::vector<std::string>& owners, const std::vector<std::string>& groups,
                                bool newest_first) override {
    return store_->ListPage(states, after, limit, owners, groups, newest_first);
  }
  // (Ended jobs, which alone may go, have left states_.)
  absl::Status Delete(const std::string& id) override { return store_->Delete(id); }
  absl::StatusOr<std::vector<JobEvent>> Events(const std::string& id) override { return store_->Events(id); }
  absl::Status AddCheckpoint(const std::string& id, const CheckpointRecord& c) override {
    return store_->AddCheckpoint(id, c);
  }
  absl::StatusOr<std::vector<CheckpointRecord>> Checkpoints(const std::string& id) override {
    return store_->Checkpoints(id);
  }
  absl::Status SaveHistory(const std::string& id, const std::string& data) override {
    return store_->SaveHistory(id, data);
  }
  absl::StatusOr<std::string> History(const std::string& id) override { return store_->History(id); }
  absl::Status AppendHistory(const std::string& id, const std::string& tail) override {
    return store_->AppendHistory(id, tail);
  }
  absl::StatusOr<std::vector<std::string>> HistoryTails(const std::string& id) override {
    return store_->HistoryTails(id);
  }

 private:
  JobStore* const store_;
  Notifier* const notifier_;
  std::atomic<uint64_t> deliveries_{0};
  std::atomic<uint64_t> spec_reads_{0};
  absl::Mutex mu_;
  std::shared_ptr<const Policy> policy_ ABSL_GUARDED_BY(mu_);
  // The state each job that may have webhooks was last seen in (ended
  // jobs leave; after a restart, read from the store at a job's first
  // event).
  std::map<std::string, JobState> states_ ABSL_GUARDED_BY(mu_);
};

// The JSON a webhook receives for `job` reaching `event` (SUCCEEDED, ...).
std::string WebhookBody(const JobRecord& job, const std::string& event, int64_t unix_millis);

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_NOTIFY_NOTIFYING_JOB_STORE_H_
