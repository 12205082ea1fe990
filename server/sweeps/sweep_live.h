// The sweep manager's state of one live sweep, and what its source files
// share. Internal to server/sweeps (sweep_manager.cc, sweep_exploits.cc).
#ifndef TRAINYARD_SERVER_SWEEPS_SWEEP_LIVE_H_
#define TRAINYARD_SERVER_SWEEPS_SWEEP_LIVE_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "server/sweeps/sweep_manager.h"

namespace trainyard {

struct SweepManager::Live {
  SweepRecord record;
  SweepSpec spec;
  Caller caller;
  std::unique_ptr<Searcher> searcher;
  std::map<int, int64_t> seen;  // trial -> the last step its metric was given to the searcher
  bool cancelled = false;       // starts no more trials
  bool budget_spent = false;    // max_rank_hours used: starts no more trials
  int announced_best = -1;      // the best trial the last BEST webhook named
  uint64_t deliveries = 0;
  // PBT: poor trials waiting for their source's checkpoint.
  struct Exploit {
    int poor = 0, source = 0;
    int64_t step = 0;        // the poor trial's, when it was found poor
    int64_t request_id = 0;  // of the source's checkpoint
    std::chrono::steady_clock::time_point since;
  };
  std::vector<Exploit> exploits;
  // A trial drawn but not yet a job: its owner's queue was full (or the
  // server busy); submitted again at the next look.
  std::optional<TrialPlan> pending;
  bool pending_noted = false;  // its wait is an event once
  int refused_in_a_row = 0;    // trials refused since the last one accepted
};

namespace sweep_detail {

inline bool Ended(JobState s) {
  return s == JobState::kSucceeded || s == JobState::kFailed || s == JobState::kCancelled;
}

}  // namespace sweep_detail
}  // namespace trainyard

#endif  // TRAINYARD_SERVER_SWEEPS_SWEEP_LIVE_H_
