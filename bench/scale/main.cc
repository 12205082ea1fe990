// Scale benchmark: N simulated ranks of one job against a real
// trainyard-server, and submissions into a deep queue. A simulated rank
// speaks the worker protocol (WorkerService.Connect: hello, welcome, one
// step report per second, the stop's answer, its result) over a gRPC stream
// of its own, all of them from this one process on gRPC's callback API; it
// never trains. The job is `launcher: external`, so the server launches
// nothing and cannot tell the ranks from real ones but by their timing.
//
// Printed per rank count: join (first hello → RUNNING), the server's CPU
// (of one core) while the ranks report, its RSS and threads, /metrics'
// size, series and scrape time, GetJob and ListJobs p99 under the load, the
// report delay (a step reported by rank 0 → GetJob shows it) p99, the
// streams that failed, and what the job's end does to the server: the
// slowest GetJob while it ends, and the longest hold of the coordinator's
// lock meanwhile (trainyard_coordinator_lock_hold_seconds' bucket), and
// the reports lost, report by report (each carries one sample; the server's
// trainyard_job_samples_total counts them). With `--replica-ranks`, a
// fault_tolerance.mode replica job of each count loses `--losses` ranks at
// once and takes their replacements back (bench/scale/replica_run.h); with
// `--restart-ranks`, the server is killed (kill -9) during a job of each
// count and started again (bench/scale/restart_run.h). Then submissions
// per second from `--clients` threads into a queue that grows to
// `--queued`, the idle server's CPU with that queue, and GetQueue's pages;
// then, with `--kill-burst N`, a burst of N submissions with a kill -9 of
// the server in its middle: every acknowledged job must be there after the
// restart.
//
//   scale [--ranks 1024,2048] [--seconds 20] [--server-binary build/bin/trainyard-server]
//         [--channels 32] [--queued 0] [--clients 8] [--idle-seconds 10] [--kill-burst 0]
//         [--replica-ranks 0] [--losses 10] [--max-epochs 0] [--restart-ranks 0] [--restart-after 15]
//
// It exits 1 when a stream failed, a report was lost, a job never ran, a
// rank is missing from GetJob's pages or from /metrics (per rank or in the
// aggregates), a submission failed, a waiting job is missing from
// GetQueue's pages, an acknowledged submission was lost to the kill, a
// replica group did not take its losses and replacements (in at most
// --max-epochs), or a restarted server lost a job's event, a history
// point older than 2.5 s or its ranks: the scale_smoke test runs it at 16
// and 64 ranks (aggregated above 16), 64 replica ranks losing 10, a 64-rank
// job through a restart, 1,000 submissions and a burst of 1,000 killed in
// the middle.
#include <signal.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "bench/scale/queue_run.h"
#include "bench/scale/rank_run.h"
#include "bench/scale/replica_run.h"
#include "bench/scale/restart_run.h"

int main(int argc, char** argv) {
  CLI::App app{"Simulated ranks and a deep queue against a real trainyard-server"};
  std::vector<int> ranks = {1024};
  double seconds = 20, idle_seconds = 10;
  int channels = 32, queued = 0, clients = 8;
  std::string server_binary = "build/bin/trainyard-server";
  int per_rank_max = 0, kill_burst = 0, losses = 10, max_epochs = 0;
  std::vector<int> replica_ranks, restart_ranks;
  double restart_after = 15;
  app.add_option("--ranks", ranks, "Rank counts, one job each")->delimiter(',')->capture_default_str();
  app.add_option("--seconds", seconds, "How long the ranks report while measured")->capture_default_str();
  app.add_option("--channels", channels, "gRPC connections the ranks share (0: one per rank, as workers connect)")
      ->capture_default_str();
  app.add_option("--queued", queued, "Jobs submitted into the queue (0: no queue run)")->capture_default_str();
  app.add_option("--clients", clients, "Threads submitting")->capture_default_str();
  app.add_option("--idle-seconds", idle_seconds, "How long the idle server's CPU is measured")->capture_default_str();
  app.add_option("--server-binary", server_binary)->capture_default_str();
  std::string store;
  app.add_option("--store", store,
                 "The queue run's server's --store (postgresql://...; default: SQLite in its state directory)");
  app.add_option("--metrics-per-rank-max-ranks", per_rank_max, "The server's flag of that name (0: its default, 64)")
      ->capture_default_str();
  app.add_option("--kill-burst", kill_burst,
                 "Submissions of a burst the server is killed (kill -9) in the middle of (0: none)")
      ->capture_default_str();
  app.add_option("--replica-ranks", replica_ranks, "Rank counts of replica jobs that lose ranks (none: no run)")
      ->delimiter(',');
  app.add_option("--restart-ranks", restart_ranks,
                 "Rank counts of jobs during which the server is killed (kill -9) and started again (none: no run)")
      ->delimiter(',');
  app.add_option("--restart-after", restart_after, "Seconds of reports before that kill")->capture_default_str();
  app.add_option("--losses", losses, "Ranks a replica job loses at once")->capture_default_str();
  app.add_option("--max-epochs", max_epochs,
                 "Exit 1 when a replica job's losses or replacements take more epochs than this (0: any)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  signal(SIGPIPE, SIG_IGN);
  // A connection a rank (--channels 0) is a descriptor here and one in the
  // server, which inherits this limit: as high as the hard limit allows.
  rlimit files{};
  getrlimit(RLIMIT_NOFILE, &files);
  files.rlim_cur = files.rlim_max;
  setrlimit(RLIMIT_NOFILE, &files);
  int status = 0;  // 1: a stream failed, a rank count never ran, or a submission failed
  std::string command = "bench/scale";
  for (int i = 1; i < argc; ++i) command += std::string(" ") + argv[i];
  std::printf("command: %s\n", command.c_str());
  std::printf(
      "conditions: server and simulator on one machine, %u hardware threads; one step report per rank per "
      "second; gRPC connections: %s; open files at most %llu a process\n\n",
      std::thread::hardware_concurrency(), channels <= 0 ? "one per rank" : std::to_string(channels).c_str(),
      static_cast<unsigned long long>(files.rlim_cur));
  if (!ranks.empty() && ranks.front() > 0) {
    std::printf(
        "| ranks | connections | server fds | join → RUNNING s | server CPU | RSS MB | threads | /metrics MB |"
        " series | scrape s |"
        " GetJob p99 ms | ListJobs p99 ms | web job page p99 ms | report delay p99 ms | end: GetJob max ms |"
        " end: lock held ≤ ms | reports | lost | failed |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int n : ranks) {
      const trainyard::scale::RankRow r = trainyard::scale::RunRanks(server_binary, n, seconds, channels, per_rank_max);
      std::printf(
          "| %d | %lld | %lld | %.1f | %.0f%% | %lld | %lld | %.2f | %zu | %.2f | %.0f | %.0f | %.0f | %.0f | %.0f | "
          "%g | %lld | %lld | %d |\n",
          r.ranks, static_cast<long long>(r.connections), static_cast<long long>(r.server_fds), r.join_s, r.cpu * 100,
          static_cast<long long>(r.rss_mb), static_cast<long long>(r.threads),
          static_cast<double>(r.scrape.bytes) / 1e6, r.scrape.series, r.scrape.seconds, r.get_p99_ms, r.list_p99_ms,
          r.page_p99_ms, r.delay_p99_s * 1e3, r.end_hold_ms, r.end_lock_ms, static_cast<long long>(r.reports),
          static_cast<long long>(r.lost), r.failed);
      if (!r.error.empty()) std::printf("  (%d ranks: %s)\n", n, r.error.c_str());
      // A test runs this at small N: the protocol's path must hold.
      if (r.failed > 0 || r.lost != 0 || !r.error.empty() || r.reports == 0 || r.join_s >= 300) status = 1;
      std::fflush(stdout);
    }
  }
  if (!replica_ranks.empty() && replica_ranks.front() > 0) {
    std::printf(
        "\n| replica ranks | lost at once | group formed s | loss → membership at the first survivor s | at every "
        "survivor s | epochs for the "
        "losses | replacements → membership at every rank s | epochs for the joins | memberships sent | of them "
        "deltas | membership MB | failed |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int n : replica_ranks) {
      const trainyard::scale::ReplicaRow r = trainyard::scale::RunReplicaLoss(server_binary, n, losses, channels);
      std::printf("| %d | %d | %.1f | %.2f | %.2f | %lld | %.2f | %lld | %lld | %lld | %.1f | %d |\n", r.ranks,
                  r.losses, r.formed_s, r.loss_first_s, r.loss_s, static_cast<long long>(r.loss_epochs), r.rejoin_s,
                  static_cast<long long>(r.rejoin_epochs), static_cast<long long>(r.membership_messages),
                  static_cast<long long>(r.membership_deltas), r.membership_mb, r.failed);
      if (!r.error.empty()) std::printf("  (%d replica ranks: %s)\n", n, r.error.c_str());
      if (r.failed > 0 || !r.error.empty() || r.loss_epochs < 1 || r.rejoin_epochs < 1) status = 1;
      if (max_epochs > 0 && (r.loss_epochs > max_epochs || r.rejoin_epochs > max_epochs)) status = 1;
      std::fflush(stdout);
    }
  }
  if (!restart_ranks.empty() && restart_ranks.front() > 0) {
    std::printf(
        "\n| ranks | reports before kill -9 s | restart s | restarted → RUNNING (ranks reattached) s | events "
        "before | lost | loss history points before | lost | of them older than 2.5 s | failed |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
    for (int n : restart_ranks) {
      const trainyard::scale::RestartRow r = trainyard::scale::RunRestart(server_binary, n, restart_after, channels);
      std::printf("| %d | %.0f | %.1f | %.1f | %d | %d | %d | %d | %d | %d |\n", r.ranks, r.reported_s, r.restart_s,
                  r.running_s, r.events_before, r.events_lost, r.points_before, r.points_lost, r.old_points_lost,
                  r.failed);
      if (!r.error.empty()) std::printf("  (%d ranks restarted: %s)\n", n, r.error.c_str());
      if (r.failed > 0 || !r.error.empty() || r.events_lost > 0 || r.old_points_lost > 0) status = 1;
      std::fflush(stdout);
    }
  }
  if (queued > 0) {
    const trainyard::scale::QueueRow q =
        trainyard::scale::RunQueue(server_binary, queued, clients, idle_seconds, store);
    std::printf("\n| store | queued | submissions/s | submit p99 ms | failed | idle CPU | GetQueue p99 ms |\n");
    std::printf("|---|---|---|---|---|---|---|\n");
    std::printf("| %s | %d | %.0f | %.0f | %lld | %.1f%% | %.0f |\n", store.empty() ? "sqlite" : "postgresql", q.queued,
                q.per_second, q.p99_ms, static_cast<long long>(q.failed), q.idle_cpu * 100, q.queue_p99_ms);
    if (!q.error.empty()) std::printf("  (%s)\n", q.error.c_str());
    if (q.failed > 0 || !q.error.empty()) status = 1;
  }
  if (kill_burst > 0) {
    const trainyard::scale::KillRow k = trainyard::scale::RunBurstKill(server_binary, kill_burst, clients);
    std::printf(
        "\n| burst | acknowledged before kill -9 | found after restart | stored, not acknowledged | restart s |\n");
    std::printf("|---|---|---|---|---|\n");
    std::printf("| %d | %d | %d | %d | %.1f |\n", kill_burst, k.acknowledged, k.found, k.unacknowledged_found,
                k.restart_s);
    if (!k.error.empty()) std::printf("  (%s)\n", k.error.c_str());
    if (!k.error.empty() || k.acknowledged == 0) status = 1;
  }
  return status;
}
