#include "bench/scale/rank_run.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "bench/scale/sim_rank.h"

namespace trainyard::scale {

// trainyard_coordinator_lock_hold_seconds' buckets: upper bound → count.
namespace {

std::map<double, double> LockHoldBuckets(const std::string& body) {
  std::map<double, double> out;
  const std::string prefix = "trainyard_coordinator_lock_hold_seconds_bucket{le=\"";
  for (absl::string_view line : absl::StrSplit(body, '\n')) {
    if (!absl::StartsWith(line, prefix)) continue;
    line.remove_prefix(prefix.size());
    const size_t quote = line.find('"');
    const size_t space = line.rfind(' ');
    double le = 0, count = 0;
    if (quote == absl::string_view::npos || space == absl::string_view::npos) continue;
    const std::string bound(line.substr(0, quote));
    le = bound == "+Inf" ? 1e9 : std::stod(bound);
    if (absl::SimpleAtod(line.substr(space + 1), &count)) out[le] = count;
  }
  return out;
}

// The job's trainyard_job_samples_total, summed over its series (per rank,
// or the one of a job above the per-rank limit).
int64_t SamplesCounted(const std::string& body, const std::string& id) {
  double total = 0;
  const std::string prefix = "trainyard_job_samples_total{job_id=\"" + id + "\"";
  for (absl::string_view line : absl::StrSplit(body, '\n')) {
    if (!absl::StartsWith(line, prefix)) continue;
    double v = 0;
    if (absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &v)) total += v;
  }
  return static_cast<int64_t>(total);
}

// The smallest bound under which every hold between two scrapes fell (ms).
double LongestHoldMs(const std::map<double, double>& before, const std::map<double, double>& after) {
  if (before.empty() || after.empty()) return -1;  // a server without the metric
  const double total = after.rbegin()->second - before.rbegin()->second;
  for (const auto& [le, count] : after) {
    auto b = before.find(le);
    if (count - (b == before.end() ? 0 : b->second) >= total) return le * 1e3;
  }
  return -1;
}

// What is wrong with the job's ranks as GetJob's pages (five or more) and the
// scrape show them ("" when nothing): every rank must have one sample and
// one place, and /metrics cover every rank, per rank up to `per_rank_max`
// ranks, else in the aggregates.
std::string CheckRanks(v1::JobService::Stub* stub, const std::string& id, int ranks, int per_rank_max,
                       const Scrape& scrape) {
  std::vector<int> samples(ranks), places(ranks);
  v1::GetJobRequest req;
  req.set_id(id);
  const int page = std::clamp(ranks / 5, 1, 1000);  // five pages or more
  req.set_rank_page_size(page);
  int pages = 0;
  do {
    grpc::ClientContext ctx;
    v1::GetJobResponse resp;
    if (auto st = stub->GetJob(&ctx, req, &resp); !st.ok()) return "GetJob page: " + st.error_message();
    for (const v1::MetricsSample& m : resp.job().ranks()) {
      if (m.rank() < 0 || m.rank() >= ranks) return "GetJob: rank " + std::to_string(m.rank()) + " out of range";
      ++samples[m.rank()];
    }
    for (const v1::RankPlace& p : resp.job().places()) {
      if (p.rank() >= 0 && p.rank() < ranks) ++places[p.rank()];
    }
    req.set_rank_page_token(resp.next_rank_page_token());
    if (++pages > ranks / page + 2) return "GetJob: more pages than ranks";
  } while (!req.rank_page_token().empty());
  for (int r = 0; r < ranks; ++r) {
    if (samples[r] != 1 || places[r] != 1) {
      return "GetJob's pages show rank " + std::to_string(r) + " " + std::to_string(samples[r]) + " times, its place " +
             std::to_string(places[r]) + " times";
    }
  }
  const std::string job = "job_id=\"" + id + "\"";
  if (ranks > (per_rank_max > 0 ? per_rank_max : 64)) {  // the server's default: 64
    const std::string want = "trainyard_job_reporting_ranks{" + job + "} " + std::to_string(ranks) + "\n";
    if (scrape.body.find(want) == std::string::npos) return "/metrics lacks " + want.substr(0, want.size() - 1);
    if (scrape.body.find(job + ",rank=") != std::string::npos) return "/metrics has per-rank series above the limit";
    for (const char* family : {"trainyard_job_slowest_rank", "trainyard_job_slowest_rank_forward_seconds"}) {
      if (scrape.body.find(std::string(family) + "{" + job + ",place=\"1\"} ") == std::string::npos) {
        return "/metrics lacks " + std::string(family) + " of place 1";
      }
    }
  } else {
    size_t n = 0;
    for (size_t at = scrape.body.find("\ntrainyard_job_step{" + job + ",rank="); at != std::string::npos;
         at = scrape.body.find("\ntrainyard_job_step{" + job + ",rank=", at + 1)) {
      ++n;
    }
    if (n != static_cast<size_t>(ranks)) return "/metrics has trainyard_job_step of " + std::to_string(n) + " ranks";
  }
  return "";
}

}  // namespace

RankRow RunRanks(const std::string& binary, int ranks, double seconds, int channels, int per_rank_max) {
  RankRow row;
  row.ranks = ranks;
  ServerProcess server(binary, ranks, 1000, per_rank_max);
  auto jobs = JobStub(server.addr());
  SimJob job(server.addr(), ExternalSpec("scale", ranks, "metrics_every_steps: 1\n"), ranks, channels);
  row.error = job.error();
  if (job.id().empty()) return row;
  const std::string id = job.id();
  Shared& shared = job.shared();
  SimRanks& sim = job.sim();
  std::vector<std::unique_ptr<SimRank>>& sims = sim.ranks;

  auto get_job = [&](double* ms) { return TimedGetJob(jobs.get(), id, ms); };
  const auto t_join = Clock::now();
  sims[0]->Start();
  for (int r = 1; r < ranks; ++r) sims[r]->Start();
  while (get_job(nullptr).state() != v1::RUNNING && Seconds(Clock::now() - t_join) < 300) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  row.join_s = Seconds(Clock::now() - t_join);
  row.retries = shared.retries;

  // Reports: every rank one step a second, spread over the second.
  std::mutex sent_mu;
  std::vector<std::pair<int64_t, Clock::time_point>> sent;  // rank 0's steps and when
  StepReporter reporter(&sim, [&](int64_t s, int r) {
    if (r != 0) return;
    std::lock_guard<std::mutex> lock(sent_mu);
    sent.emplace_back(s, Clock::now());
  });
  std::this_thread::sleep_for(std::chrono::seconds(3));  // past the first reports
  const double cpu0 = server.CpuSeconds();
  const auto t0 = Clock::now();
  std::vector<double> gets, lists, delays, pages;
  // The web UI's job page: each refresh calls GetJob, GetJobHistory and
  // GetLogs (a joined rank has no log here: 404).
  WebUi web(server.http_port());
  const std::string job_json = "{\"id\": \"" + id + "\"}";
  while (Seconds(Clock::now() - t0) < seconds) {
    if (web.signed_in()) {
      const auto p0 = Clock::now();
      const int got = web.Call("GetJob", job_json), history = web.Call("GetJobHistory", job_json);
      web.Call("GetLogs", "{\"id\": \"" + id + "\", \"rank\": 0, \"tail_bytes\": 32768}");
      pages.push_back(Seconds(Clock::now() - p0) * 1e3);
      if ((got != 200 || history != 200) && row.error.empty()) {
        row.error = "the web UI's GetJob/GetJobHistory answered " + std::to_string(got) + "/" + std::to_string(history);
      }
    }
    double ms = 0;
    const v1::Job j = get_job(&ms);
    gets.push_back(ms);
    const auto now = Clock::now();
    {
      std::lock_guard<std::mutex> lock(sent_mu);
      // How long the oldest step sent that the job does not show yet has
      // waited so far (0: it shows every step sent).
      double waited = 0;
      for (const auto& [s, at] : sent) {
        if (s > j.step()) {
          waited = Seconds(now - at);
          break;
        }
      }
      delays.push_back(waited);
    }
    grpc::ClientContext ctx;
    v1::ListJobsRequest lr;
    v1::ListJobsResponse lresp;
    const auto l0 = Clock::now();
    jobs->ListJobs(&ctx, lr, &lresp);
    lists.push_back(Seconds(Clock::now() - l0) * 1e3);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  row.cpu = (server.CpuSeconds() - cpu0) / Seconds(Clock::now() - t0);
  row.rss_mb = server.Status("VmRSS") / 1024;
  row.threads = server.Status("Threads");
  row.server_fds = server.OpenFiles();
  row.connections = channels <= 0 ? ranks : std::min(channels, ranks);
  row.scrape = ScrapeMetrics(server.metrics_port());
  row.get_p99_ms = P99(gets);
  row.list_p99_ms = P99(lists);
  row.page_p99_ms = pages.empty() ? -1 : P99(pages);
  row.delay_p99_s = P99(delays);
  reporter.Stop();
  row.reports = shared.reports;
  // Lost reports, report by report: each carried one sample; wait (up to
  // 10 s) for the server to have counted every one written.
  for (const auto give_up = Clock::now() + std::chrono::seconds(10);;) {
    row.lost = row.reports - SamplesCounted(ScrapeMetrics(server.metrics_port()).body, id);
    if (row.lost <= 0 || Clock::now() > give_up) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (row.error.empty()) row.error = CheckRanks(jobs.get(), id, ranks, per_rank_max, row.scrape);

  // The job's end: cancelled; the slowest GetJob until every stream ended,
  // and the longest hold of the coordinator's lock meanwhile.
  const std::map<double, double> holds_before = LockHoldBuckets(ScrapeMetrics(server.metrics_port()).body);
  std::atomic<bool> ended{false};
  double hold = 0;
  std::thread prober([&] {
    auto stub = JobStub(server.addr());
    while (!ended) {
      double ms = 0;
      TimedGetJob(stub.get(), id, &ms);
      hold = std::max(hold, ms);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  row.failed = job.End(jobs.get(), &row.error);
  while (get_job(nullptr).state() == v1::RUNNING) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ended = true;
  prober.join();
  row.end_hold_ms = hold;
  row.end_lock_ms = LongestHoldMs(holds_before, LockHoldBuckets(ScrapeMetrics(server.metrics_port()).body));
  return row;
}

}  // namespace trainyard::scale
