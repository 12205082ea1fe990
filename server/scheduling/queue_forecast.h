// QueueForecast: when one kind of this host's resources (CPU slots or GPUs)
// comes free — what is free now plus what running local jobs give back when
// they end — and so when waiting jobs can start. One timeline serves both
// questions the Scheduler asks:
//   Shadow   when the head of the queue could start at the earliest (a job
//            whose end nobody knows, or that is being preempted, may end at
//            once), and what is spare then: what backfill may use;
//   Place    the estimated start of each waiting job in queue order, from
//            known ends only; once one never gets enough, none is known.
//
// Pure: the time is passed in. Not thread-safe.
#ifndef TRAINYARD_SERVER_SCHEDULING_QUEUE_FORECAST_H_
#define TRAINYARD_SERVER_SCHEDULING_QUEUE_FORECAST_H_

#include <chrono>
#include <map>
#include <optional>
#include <utility>
#include <vector>

namespace trainyard {

class QueueForecast {
 public:
  using Time = std::chrono::steady_clock::time_point;
  using Duration = std::chrono::steady_clock::duration;

  // A running job that holds `count` of the resource.
  struct Holder {
    int count = 0;
    std::optional<Time> expected_end;  // none: unknown
    bool preempting = false;
  };
  // How a Holder's end counts.
  enum class Ends {
    kEarliest,  // unknown ends and preemptions come at once (Shadow)
    kKnown,     // only expected ends come, when expected (Place)
  };

  // `free` of the resource is free at `now`.
  QueueForecast(Time now, int free, const std::vector<Holder>& holders, Ends ends);

  // When `need` is free at the earliest, and how much beyond `need` is free
  // then. REQUIRES: nothing placed yet.
  std::pair<Time, int> Shadow(int need) const;
  // The next waiting job in queue order needs `count`, not before
  // `not_before`: its estimated start (none: unknown), after which it holds
  // `count` until `runtime` has passed (forever when unknown).
  std::optional<Time> Place(int count, Time not_before, std::optional<Duration> runtime);

 private:
  const Time now_;
  const int free_;
  std::multimap<Time, int> changes_;  // what comes free (+) or is taken (-) when
  Time last_;                         // the last estimated start: later jobs start no earlier
  bool known_ = true;
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_SCHEDULING_QUEUE_FORECAST_H_
