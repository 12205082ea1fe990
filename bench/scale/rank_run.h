// The rank run of bench/scale: N simulated ranks of one job report a step
// a second each while the server is measured (join time, CPU, RSS, threads,
// /metrics, read latencies, report delay), every rank is looked for in
// GetJob's pages and /metrics, every report is counted, and the job's end
// is timed (the slowest GetJob meanwhile, the longest hold of the
// coordinator's lock).
#ifndef TRAINYARD_BENCH_SCALE_RANK_RUN_H_
#define TRAINYARD_BENCH_SCALE_RANK_RUN_H_

#include <cstdint>
#include <string>

#include "bench/scale/server_process.h"

namespace trainyard::scale {

struct RankRow {
  int ranks = 0;
  double join_s = 0, cpu = 0, get_p99_ms = 0, list_p99_ms = 0, delay_p99_s = 0, end_hold_ms = 0;
  double page_p99_ms = 0;  // the web UI's job page (its three API calls); -1: not signed in
  double end_lock_ms = 0;  // the longest hold of the coordinator's lock during the end (its bucket's bound)
  int64_t rss_mb = 0, threads = 0, reports = 0;
  int64_t connections = 0, server_fds = 0;  // the ranks' gRPC connections; the server's open descriptors
  int64_t lost = -1;  // reports written that the server did not count (its trainyard_job_samples_total)
  Scrape scrape;
  int failed = 0, retries = 0;
  std::string error;
};

// `ranks` simulated ranks over `channels` connections, measured for
// `seconds`; `per_rank_max`: the server's --metrics-per-rank-max-ranks (0:
// its default).
RankRow RunRanks(const std::string& binary, int ranks, double seconds, int channels, int per_rank_max);

}  // namespace trainyard::scale

#endif  // TRAINYARD_BENCH_SCALE_RANK_RUN_H_
