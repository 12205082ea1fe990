// Victims: which running jobs give way so that the head of the queue can
// start — the lowest priority level whose jobs together free enough, then
// the fewest jobs below and at it.
//
// Pure: a function of the candidates. The Scheduler says who is a candidate
// (preemptible, of lower priority or on borrowed quota, past the minimum
// run time).
#ifndef TRAINYARD_SERVER_SCHEDULING_VICTIMS_H_
#define TRAINYARD_SERVER_SCHEDULING_VICTIMS_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace trainyard {

struct VictimCandidate {
  std::string id;
  int count = 0;  // what it frees
  int64_t priority = 0;
  std::chrono::steady_clock::time_point started;
  bool reclaim = false;  // it runs on quota the head's owner reclaims
};

// The candidates to preempt so that `need` is freed, in the order picked;
// empty when all of them together free too little. Fewest: the largest
// first; among equals the lower priority, then the one that started last
// (least work since its checkpoint is likely lost), then the id.
std::vector<VictimCandidate> PickVictims(std::vector<VictimCandidate> candidates, int need);

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_SCHEDULING_VICTIMS_H_
