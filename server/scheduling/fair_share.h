// FairShare: each owner's recent usage in rank-seconds, decaying with a
// half-life (as Slurm's fair-share factor): the owner with less comes first
// among jobs of one priority. Usage accrues while the owner's ranks run.
//
// Pure: the time is passed in. Not thread-safe (the Scheduler's).
#ifndef TRAINYARD_SERVER_SCHEDULING_FAIR_SHARE_H_
#define TRAINYARD_SERVER_SCHEDULING_FAIR_SHARE_H_

#include <chrono>
#include <map>
#include <string>

namespace trainyard {

class FairShare {
 public:
  using Time = std::chrono::steady_clock::time_point;
  using Duration = std::chrono::steady_clock::duration;

  explicit FairShare(Duration half_life = std::chrono::hours(24)) : half_life_(half_life) {}
  // From now on (a policy reload); usage so far stays.
  void set_half_life(Duration half_life) { half_life_ = half_life; }

  // `ranks` of `owner` started or stopped running at `now`.
  void Started(const std::string& owner, int ranks, Time now);
  void Stopped(const std::string& owner, int ranks, Time now);
  // The owner's decayed usage at `now` (rank-seconds; 0 for an owner never seen).
  double UsageAt(const std::string& owner, Time now) const;
  // Every owner that ran, with their usage at `now`.
  std::map<std::string, double> Usage(Time now) const;

 private:
  struct Owner {
    double usage = 0;  // decayed rank-seconds at `updated`
    Time updated{};
    int ranks_running = 0;
  };
  double UsageAt(const Owner& o, Time now) const;
  void Accrue(Owner& o, Time now) const;

  Duration half_life_;
  std::map<std::string, Owner> owners_;
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_SCHEDULING_FAIR_SHARE_H_
