// JoinRetry: the one rule by which a rank's first stream to the coordinator
// is asked again after a refusal. The worker (ControlClient::Connect) and
// bench/scale's simulated ranks, which stand in for it, both follow it, so
// that the benchmark measures the system workers meet.
//
// A refusal for now — UNAVAILABLE (the job is queued, rank 0 of an external
// job has not joined yet, the coordinator is starting) or RESOURCE_EXHAUSTED
// (too many streams wait to say hello: a stranger may hold them, for at
// most the hello timeout each) — is tried again after a wait that doubles
// from `initial_backoff` up to `max_backoff`, each drawn with jitter so that
// many ranks refused at once do not come back at once, until `join_timeout`
// after the first try. Any other code is final (a wrong token, a stale
// attempt, a bad hello: asking again changes nothing).
//
// Not thread-safe: one per rank's join. Torch- and gRPC-free (the codes are
// absl's, which are gRPC's numbers).
#ifndef TRAINYARD_COMMON_JOIN_RETRY_H_
#define TRAINYARD_COMMON_JOIN_RETRY_H_

#include <chrono>
#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "common/clock.h"

namespace trainyard {

struct JoinRetryOptions {
  // How long a rank keeps asking, from its first try (the worker's
  // --join-timeout-s; 10 minutes).
  std::chrono::milliseconds join_timeout{std::chrono::minutes(10)};
  // The first wait (200 ms); each next one doubles, up to max_backoff (2 s).
  std::chrono::milliseconds initial_backoff{200};
  std::chrono::milliseconds max_backoff{2000};
  // Each wait is drawn uniformly from [(1 - jitter) * backoff, backoff]
  // (0.5: the waits still grow, and ranks refused together spread out).
  double jitter = 0.5;
};

// Whether a join refused with `code` is asked again: UNAVAILABLE and
// RESOURCE_EXHAUSTED.
bool RetriesJoin(absl::StatusCode code);

class JoinRetry {
 public:
  // The first try was at `start`; `seed` draws the jitter (give each rank
  // its own: its rank and its process's randomness).
  JoinRetry(const JoinRetryOptions& options, TimeSource::Steady start, uint64_t seed);

  // After a refusal with `code` at `now`: how long to wait before the next
  // try, or nullopt to give up — the code is final, or the join timeout has
  // passed. A wait never runs past the join timeout (the last try is at it).
  std::optional<std::chrono::milliseconds> NextWait(absl::StatusCode code, TimeSource::Steady now);

  // The refusals asked again after so far.
  int retries() const { return retries_; }
  TimeSource::Steady deadline() const { return deadline_; }

 private:
  const JoinRetryOptions options_;
  const TimeSource::Steady deadline_;
  uint64_t state_;
  std::chrono::milliseconds backoff_;
  int retries_ = 0;
};

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_JOIN_RETRY_H_
