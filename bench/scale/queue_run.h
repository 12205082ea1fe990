// The queue runs of bench/scale: submissions into a deep queue (rate,
// latency, the idle server's CPU with that queue, GetQueue's pages), and a
// burst of submissions with a kill -9 of the server in its middle.
#ifndef TRAINYARD_BENCH_SCALE_QUEUE_RUN_H_
#define TRAINYARD_BENCH_SCALE_QUEUE_RUN_H_

#include <cstdint>
#include <string>

namespace trainyard::scale {

struct QueueRow {
  int queued = 0;
  double per_second = 0, p99_ms = 0, idle_cpu = 0, queue_p99_ms = 0;
  int64_t failed = 0;
  std::string error;  // what GetQueue's pages got wrong
};

// Submissions of local jobs from `clients` threads until `queued` are
// queued (the server has one slot, held by the first job's stand-in
// worker); then the idle server's CPU and GetQueue's p99 with that queue.
// `store`: the server's --store ("": SQLite in its state directory).
QueueRow RunQueue(const std::string& binary, int queued, int clients, double idle_seconds,
                  const std::string& store = "");

struct KillRow {
  int acknowledged = 0, found = 0, unacknowledged_found = 0;
  double restart_s = 0;
  std::string error;
};

// Submissions from `clients` threads until half of `submissions` were
// acknowledged, then kill -9 of the server in the middle of the burst; the
// server started again on its state directory must have every job it
// acknowledged, each with its "submitted" event.
KillRow RunBurstKill(const std::string& binary, int submissions, int clients);

}  // namespace trainyard::scale

#endif  // TRAINYARD_BENCH_SCALE_QUEUE_RUN_H_
