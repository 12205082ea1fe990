// Hang diagnosis: from the flight records of a job's ranks (common/
// flight_record.h), which rank is behind and at which collective.
//
// Every rank numbers the collectives of each group in call order, so the
// ranks of a healthy group differ by at most the one collective some have
// started and the others are about to. A rank whose last collective of a
// group is numbered below another's has not reached the collective the
// others wait in: it is behind, and the verdict names it with that
// collective and its own phase. A rank that did not answer (stopped, or
// its whole process stuck) is named with the collective the answering
// ranks wait in. Ranks whose collective of the same number and group differ
// in kind or size (as PyTorch's fr_trace classifies them: a collective
// skipped, or issued out of order) are a mismatch: the ranks outside the
// largest agreeing set, when it is a majority, are blamed. Pure functions;
// no I/O.
#ifndef TRAINYARD_SERVER_HEALTH_HANG_DIAGNOSIS_H_
#define TRAINYARD_SERVER_HEALTH_HANG_DIAGNOSIS_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/flight_record.h"

namespace trainyard {

struct HangDiagnosis {
  std::string verdict;                // one line, for people and job events
  std::vector<int32_t> behind_ranks;  // the ranks the verdict blames, ascending
  std::vector<int32_t> silent_ranks;  // ranks of [0, world_size) that did not answer
  // The first collective whose copies differ between ranks: "collective #5
  // of group world: allreduce (4.0 MB) on ranks 0, 2, broadcast (4.0 MB) on
  // rank 1 (kind mismatch: ...)"; empty when they all agree.
  std::string mismatch;
};

// `answers`: the records of the ranks that answered, by rank. A rank is
// behind only when the collective it has not reached was started at least
// `stuck_after_micros` ago (ranks of a healthy group trail each other by
// moments).
HangDiagnosis DiagnoseHang(int32_t world_size, const std::map<int32_t, FlightRecord>& answers, int64_t now_unix_micros,
                           int64_t stuck_after_micros = 1000000);

// A diagnose request of the coordinator, waiting for its ranks' answers.
struct PendingDiagnosis {
  std::string job_id;
  int32_t attempt = 0;
  int32_t world_size = 0;
  std::map<int32_t, FlightRecord> answers;
  std::chrono::steady_clock::time_point deadline;
  bool complete() const { return static_cast<int32_t>(answers.size()) >= world_size; }
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_HEALTH_HANG_DIAGNOSIS_H_
