// Fence: the leader term a coordinator writes under (issue 65's fencing
// token). Every write transaction of a shared (PostgreSQL) store first
// checks, in that same transaction, that the database's leader term (table
// trainyard_leader, row id 1, read FOR SHARE so that a takeover's UPDATE of
// that row waits for the write to commit) still equals term(); if not, it
// writes nothing, calls Lost(db_term) and returns FailedPrecondition naming
// both terms. term() == 0: unfenced (migrate-store, tests); SQLite stores
// never check. Thread-safe.
#ifndef TRAINYARD_SERVER_STORE_FENCE_H_
#define TRAINYARD_SERVER_STORE_FENCE_H_

#include <cstdint>
#include <functional>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace trainyard {

class Fence {
 public:
  explicit Fence(int64_t term = 0);
  Fence(const Fence&) = delete;
  Fence& operator=(const Fence&) = delete;

  int64_t term() const;
  // A new term (a coordinator that became leader): writes check it from now
  // on, lost() is false again and the OnLost callback is armed again.
  void set_term(int64_t term);
  // The callback runs once per term, on the thread of the first write that
  // found the database's term moved on (outside the fence's lock: it may
  // call term() or set_term()). Replaces an earlier callback.
  void OnLost(std::function<void(int64_t db_term)> callback);
  // A write found the database at `db_term` != term(): marks the term lost
  // and runs the callback if it has not run for this term.
  void Lost(int64_t db_term);
  // Whether a write found this term replaced (since the last set_term).
  bool lost() const;

 private:
  mutable absl::Mutex mu_;
  int64_t term_ ABSL_GUARDED_BY(mu_);
  bool lost_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void(int64_t)> on_lost_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_STORE_FENCE_H_
