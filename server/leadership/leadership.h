// Leadership: which of the coordinators sharing one PostgreSQL database leads.
//
// A thread campaigns for the lease (LeaseTable). As a standby it looks at the
// lease every poll_every and takes it, with the next term, once it has
// expired by the database's clock. As the leader it renews it every
// renew_every and steps down (Role back to kStandby, AwaitLost returns) when
//   - a renewal finds another term or holder in the row (it was replaced), or
//   - no renewal has succeeded for `lease` by this host's monotonic clock,
//     counted from when the last good one was sent: by then the database may
//     have let the lease expire, so this coordinator stops acting before a
//     standby can start (the fence, server/store/fence.h, stops its writes
//     even when the two clocks disagree), or
//   - StepDown is called (a store write found its term stale).
// A coordinator that stepped down campaigns again as a standby.
//
// Thread-safe. Time: the monotonic clock of the TimeSource it is given.
#ifndef TRAINYARD_SERVER_LEADERSHIP_LEADERSHIP_H_
#define TRAINYARD_SERVER_LEADERSHIP_LEADERSHIP_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "server/leadership/lease_table.h"

namespace trainyard {

struct LeadershipOptions {
  // How long a lease lasts without renewal: the longest a lost leader's
  // host can hold the service up, and the shortest pause (GC, network
  // blip, SIGSTOP) that costs a takeover. docs/operating/high-availability.md.
  std::chrono::milliseconds lease{5000};
  std::chrono::milliseconds renew_every{1000};
  std::chrono::milliseconds poll_every{250};  // a standby's look at the lease
};

class Leadership {
 public:
  enum class Role { kStandby, kLeader };
  struct View {
    Role role = Role::kStandby;
    int64_t term = 0;            // the leader's term as last seen (this one's when leading)
    std::string leader_address;  // gRPC; "" when none is known live
    std::string leader_http;
    std::string why;  // the last step-down or database error, for a person
  };

  Leadership(std::unique_ptr<LeaseTable> table, LeadershipOptions options,
             const TimeSource* clock = TimeSource::Real());
  ~Leadership();  // Stop()

  void Start();
  // Resigns a held lease (so a standby takes over at once, not after the
  // lease) and ends the thread. Idempotent.
  void Stop();

  View view() const;
  // Blocks until this coordinator leads (its term) or Stop (nullopt).
  std::optional<int64_t> AwaitLeading();
  // Blocks until leadership of `term` is lost (the reason) or Stop ("").
  std::string AwaitLost(int64_t term);
  // Steps down from `term` now (ignored for another term): a write found the
  // database's term moved on.
  void StepDown(int64_t term, const std::string& reason);

 private:
  void Run();
  void Campaign();
  void Hold();
  void LoseLocked(const std::string& reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits up to `d` or until Stop; false once stopping.
  bool Pause(std::chrono::milliseconds d);

  const std::unique_ptr<LeaseTable> table_;  // the thread's alone
  const LeadershipOptions options_;
  const TimeSource* const clock_;

  mutable absl::Mutex mu_;
  View view_ ABSL_GUARDED_BY(mu_);
  int64_t lost_term_ ABSL_GUARDED_BY(mu_) = 0;  // the last term given up
  std::string lost_why_ ABSL_GUARDED_BY(mu_);   // and why
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  TimeSource::Steady last_renewal_sent_ ABSL_GUARDED_BY(mu_){};
  std::thread thread_;
};

const char* RoleName(Leadership::Role role);

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_LEADERSHIP_LEADERSHIP_H_
