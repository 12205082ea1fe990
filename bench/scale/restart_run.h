// The restart run of bench/scale: a job of N simulated ranks reports a
// step a second each; the server is killed (kill -9) in the middle and
// started again on its state directory and ports; the ranks reconnect and
// reattach. Measured: the restart, the ranks reattached → RUNNING again,
// and what the job's owner saw before that is gone after: events and
// history points (the progress and the history's points are written once
// a second: only the last seconds' may go).
#ifndef TRAINYARD_BENCH_SCALE_RESTART_RUN_H_
#define TRAINYARD_BENCH_SCALE_RESTART_RUN_H_

#include <cstdint>
#include <string>

namespace trainyard::scale {

struct RestartRow {
  int ranks = 0;
  double reported_s = 0;  // seconds of reports before the kill
  double restart_s = 0;   // kill -9 → the server ready again
  double running_s = 0;   // the server ready → the job RUNNING again (every rank reattached)
  int events_before = 0, events_lost = 0;
  int points_before = 0, points_lost = 0;  // the loss series' history points
  int old_points_lost = 0;                 // of them, points of steps reported over 2.5 s before the kill
  int failed = 0;
  std::string error;
};

RestartRow RunRestart(const std::string& binary, int ranks, double report_seconds, int channels);

}  // namespace trainyard::scale

#endif  // TRAINYARD_BENCH_SCALE_RESTART_RUN_H_
