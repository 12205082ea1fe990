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
// trainyard_job_samples_total counts them). Then submissions per second
// from `--clients` threads into a queue that grows to `--queued`, the idle
// server's CPU with that queue, and GetQueue's pages; then, with
// `--kill-burst N`, a burst of N submissions with a kill -9 of the server
// in its middle: every acknowledged job must be there after the restart.
//
//   scale [--ranks 1024,2048] [--seconds 20] [--server-binary build/bin/trainyard-server]
//         [--channels 32] [--queued 0] [--clients 8] [--idle-seconds 10] [--kill-burst 0]
//
// It exits 1 when a stream failed, a report was lost, a job never ran, a
// rank is missing from GetJob's pages or from /metrics (per rank or in the
// aggregates), a submission failed, a waiting job is missing from
// GetQueue's pages, or an acknowledged submission was lost to the kill: the
// scale_smoke test runs it at 16 and 64 ranks (aggregated above 16), 1,000
// submissions and a burst of 1,000 killed in the middle.
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "bench/bench_util.h"
#include "trainyard/v1/trainyard.grpc.pb.h"

namespace trainyard {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

double P99(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(0.99 * static_cast<double>(v.size())))];
}

// The server under test, started afresh in its own state directory.
class ServerProcess {
 public:
  // `per_rank_max` 0: the server's default (not passed, for servers older than the flag).
  ServerProcess(const std::string& binary, int max_processes, int max_queued, int per_rank_max = 0) : binary_(binary) {
    dir_ = std::filesystem::temp_directory_path() / ("trainyard-bench-scale-" + std::to_string(getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    // Local jobs run a stand-in that sleeps: the first holds the one slot,
    // the others wait in the queue. Its pid is kept, to end it with the
    // benchmark (a killed server leaves it).
    const std::string worker = dir_ + "/worker.sh";
    std::ofstream(worker) << "#!/bin/sh\necho $$ >> " << dir_ << "/workers.pid\nexec sleep 1000000\n";
    std::filesystem::permissions(worker, std::filesystem::perms::owner_all);
    args_ = {"--listen",
             "127.0.0.1:0",
             "--metrics-listen",
             "127.0.0.1:0",
             "--http-listen",
             "127.0.0.1:0",
             "--state-dir",
             dir_,
             "--slots",
             "1",
             "--ready-file",
             dir_ + "/ready.json",
             "--max-num-processes",
             std::to_string(max_processes),
             "--max-queued-jobs",
             std::to_string(max_queued),
             "--launcher",
             "external",
             "--worker-binary",
             worker};
    if (per_rank_max > 0) {
      args_.push_back("--metrics-per-rank-max-ranks");
      args_.push_back(std::to_string(per_rank_max));
    }
    Start();
  }
  // kill -9, and the server started again on the same state directory.
  void Restart() {
    Kill();
    std::filesystem::remove(dir_ + "/ready.json");
    grpc_port_ = metrics_port_ = 0;
    Start();
  }

 private:
  void Kill() {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  void Start() {
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // the server ends with the benchmark, however it ends
      if (FILE* log = std::fopen((dir_ + "/server.log").c_str(), "a")) {
        dup2(fileno(log), STDOUT_FILENO);
        dup2(fileno(log), STDERR_FILENO);
      }
      std::vector<char*> argv = {const_cast<char*>(binary_.c_str())};
      for (std::string& a : args_) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(binary_.c_str(), argv.data());
      _exit(127);
    }
    for (int i = 0; i < 600 && grpc_port_ == 0; ++i) {
      std::ifstream ready(dir_ + "/ready.json");
      auto j = nlohmann::json::parse(ready, nullptr, false);
      if (!j.is_discarded() && j.contains("grpc_port")) {
        grpc_port_ = j["grpc_port"].get<int>();
        metrics_port_ = j["metrics_port"].get<int>();
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
    if (grpc_port_ == 0) throw std::runtime_error("the server did not start; see " + dir_ + "/server.log");
  }

 public:
  ~ServerProcess() {
    Kill();
    std::ifstream pids(dir_ + "/workers.pid");
    for (pid_t p = 0; pids >> p;) kill(p, SIGKILL);
    std::filesystem::remove_all(dir_);
  }
  std::string addr() const { return "127.0.0.1:" + std::to_string(grpc_port_); }
  int metrics_port() const { return metrics_port_; }

  // CPU seconds (user + system) the server has used so far.
  double CpuSeconds() const {
    std::ifstream f("/proc/" + std::to_string(pid_) + "/stat");
    std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const size_t close = text.rfind(')');
    if (close == std::string::npos) return 0;
    std::vector<std::string> fields = absl::StrSplit(text.substr(close + 2), ' ');
    double utime = 0, stime = 0;  // fields 14 and 15 of stat: here 11 and 12
    if (fields.size() < 13 || !absl::SimpleAtod(fields[11], &utime) || !absl::SimpleAtod(fields[12], &stime)) return 0;
    return (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
  }
  // A line of /proc/<pid>/status ("VmRSS", "Threads") as a number.
  int64_t Status(const std::string& key) const {
    std::ifstream f("/proc/" + std::to_string(pid_) + "/status");
    for (std::string line; std::getline(f, line);) {
      if (line.rfind(key + ":", 0) != 0) continue;
      int64_t v = 0;
      std::istringstream(line.substr(key.size() + 1)) >> v;
      return v;
    }
    return 0;
  }

 private:
  const std::string binary_;
  std::vector<std::string> args_;
  std::string dir_;
  pid_t pid_ = -1;
  int grpc_port_ = 0, metrics_port_ = 0;
};

// GET /metrics: (bytes, series, seconds), and the body.
struct Scrape {
  size_t bytes = 0, series = 0;
  double seconds = 0;
  std::string body;
};
Scrape ScrapeMetrics(int port) {
  Scrape out;
  const auto t0 = Clock::now();
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return out;
  }
  const std::string req = "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n";
  if (write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) {
    close(fd);
    return out;
  }
  std::string body;
  char buf[1 << 16];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) body.append(buf, static_cast<size_t>(n));
  close(fd);
  out.seconds = Seconds(Clock::now() - t0);
  const size_t start = body.find("\r\n\r\n");
  if (start != std::string::npos) body.erase(0, start + 4);
  out.bytes = body.size();
  for (absl::string_view line : absl::StrSplit(body, '\n')) {
    if (!line.empty() && line[0] != '#') ++out.series;
  }
  out.body = std::move(body);
  return out;
}

// What the simulated ranks of one job share.
struct Shared {
  std::string job_id, token;
  std::atomic<int> welcomed{0}, ended{0}, failed{0}, retries{0};
  std::atomic<int64_t> reports{0};
  std::mutex mu;
  std::condition_variable cv;
  std::string first_error;
};

class SimRank;

// One WorkerService stream of a simulated rank: it says hello, then
// reports a step whenever Report is called, and ends with its result when
// the server says stop. A stream the server refuses for now (UNAVAILABLE:
// rank 0 not there yet; RESOURCE_EXHAUSTED: too many hellos waiting) has
// its rank try again with a new one.
class Stream final : public grpc::ClientBidiReactor<v1::WorkerMessage, v1::CoordinatorMessage> {
 public:
  Stream(v1::WorkerService::Stub* stub, Shared* shared, int32_t rank, SimRank* owner)
      : stub_(stub), shared_(shared), rank_(rank), owner_(owner) {}

  void Start() {
    ctx_ = std::make_unique<grpc::ClientContext>();
    {
      std::lock_guard<std::mutex> lock(mu_);
      welcomed_ = false;
      stopping_ = false;
      writing_ = false;
      pending_.clear();
      v1::WorkerMessage hello;
      v1::WorkerHello* h = hello.mutable_hello();
      h->set_job_id(shared_->job_id);
      h->set_rank(rank_);
      h->set_attempt(0);
      h->set_token(shared_->token);
      h->set_node("sim" + std::to_string(rank_ / 8));
      if (rank_ == 0) {
        h->set_advertise_addr("127.0.0.1");
        h->set_rendezvous_port(29500);
      }
      pending_.push_back(std::move(hello));
    }
    stub_->async()->Connect(ctx_.get(), this);
    StartRead(&in_);
    WriteNext();
    StartCall();
  }

  // Reports `step` (one sample) once welcomed; false when not (yet) running.
  bool Report(int64_t step) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!welcomed_ || stopping_) return false;
    if (pending_.size() > 4) return true;  // the server is behind: the report waits with the others
    v1::WorkerMessage m;
    v1::MetricsSample* s = m.mutable_metrics()->add_samples();
    s->set_rank(rank_);
    s->set_step(step);
    s->set_loss(2.0 / static_cast<double>(step + 1));
    s->set_step_seconds(1.0);
    s->set_samples_per_second(32);
    s->set_samples(1);  // the server's samples_total counts the reports it took
    s->set_learning_rate(1e-3);
    s->set_unix_millis(
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
            .count());
    pending_.push_back(std::move(m));
    WriteLocked();
    return true;
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // the stream ends: OnDone
    if (in_.has_welcome()) {
      std::lock_guard<std::mutex> lock(mu_);
      welcomed_ = true;
      ++shared_->welcomed;
    } else if (in_.has_stop()) {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) {  // said again (a cancel and the attempt's stop): answered once
        StartRead(&in_);
        return;
      }
      stopping_ = true;
      v1::WorkerMessage result;
      result.mutable_result()->set_outcome(v1::WORKER_OUTCOME_STOPPED);
      pending_.push_back(std::move(result));
      closing_ = true;
      WriteLocked();
    }
    StartRead(&in_);
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    writing_ = false;
    if (!ok) return;
    if (counting_) ++shared_->reports;
    WriteLocked();
  }

  void OnDone(const grpc::Status& s) override {
    const bool retry = !stopping_ && (s.error_code() == grpc::StatusCode::UNAVAILABLE ||
                                      s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
    if (retry) {
      ++shared_->retries;
      Retry();
      return;
    }
    if (!s.ok() && !stopping_) {
      ++shared_->failed;
      std::lock_guard<std::mutex> lock(shared_->mu);
      if (shared_->first_error.empty()) shared_->first_error = s.error_message();
    }
    {
      std::lock_guard<std::mutex> lock(shared_->mu);
      ++shared_->ended;
    }
    shared_->cv.notify_all();
  }

 private:
  void WriteNext() {
    std::lock_guard<std::mutex> lock(mu_);
    WriteLocked();
  }
  void WriteLocked() {
    if (writing_ || pending_.empty()) {
      if (!writing_ && pending_.empty() && closing_) {
        closing_ = false;
        StartWritesDone();
      }
      return;
    }
    out_ = std::move(pending_.front());
    pending_.pop_front();
    counting_ = out_.has_metrics();
    writing_ = true;
    StartWrite(&out_);
  }

  void Retry();

  v1::WorkerService::Stub* const stub_;
  Shared* const shared_;
  const int32_t rank_;
  SimRank* const owner_;
  std::unique_ptr<grpc::ClientContext> ctx_;
  v1::CoordinatorMessage in_;
  v1::WorkerMessage out_;
  std::mutex mu_;
  std::deque<v1::WorkerMessage> pending_;
  bool welcomed_ = false, stopping_ = false, writing_ = false, closing_ = false, counting_ = false;
};

// A simulated rank: its streams in turn (a refused one is kept until the
// end, since its reactor may not be freed from its own callback).
class SimRank {
 public:
  SimRank(v1::WorkerService::Stub* stub, Shared* shared, int32_t rank) : stub_(stub), shared_(shared), rank_(rank) {}
  void Start() {
    std::lock_guard<std::mutex> lock(mu_);
    if (current_) done_.push_back(std::move(current_));
    current_ = std::make_unique<Stream>(stub_, shared_, rank_, this);
    current_->Start();
  }
  bool Report(int64_t step) {
    std::lock_guard<std::mutex> lock(mu_);
    return current_ != nullptr && current_->Report(step);
  }
  // Starts a new stream after a pause, spread over the ranks.
  void Retry() {
    std::thread([this] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100 + rank_ % 400));
      Start();
    }).detach();
  }

 private:
  v1::WorkerService::Stub* const stub_;
  Shared* const shared_;
  const int32_t rank_;
  std::mutex mu_;
  std::unique_ptr<Stream> current_;
  std::vector<std::unique_ptr<Stream>> done_;
};

void Stream::Retry() { owner_->Retry(); }

struct RankRow {
  int ranks = 0;
  double join_s = 0, cpu = 0, get_p99_ms = 0, list_p99_ms = 0, delay_p99_s = 0, end_hold_ms = 0;
  double end_lock_ms = 0;  // the longest hold of the coordinator's lock during the end (its bucket's bound)
  int64_t rss_mb = 0, threads = 0, reports = 0;
  int64_t lost = -1;  // reports written that the server did not count (its trainyard_job_samples_total)
  Scrape scrape;
  int failed = 0, retries = 0;
  std::string error;
};

// trainyard_coordinator_lock_hold_seconds' buckets: upper bound → count.
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

std::unique_ptr<v1::JobService::Stub> JobStub(const std::string& addr) {
  return v1::JobService::NewStub(grpc::CreateChannel(addr, grpc::InsecureChannelCredentials()));
}

// GetJob of `id`, its round trip in milliseconds into `ms` (when given).
v1::Job TimedGetJob(v1::JobService::Stub* stub, const std::string& id, double* ms) {
  grpc::ClientContext ctx;
  v1::GetJobRequest req;
  req.set_id(id);
  v1::GetJobResponse resp;
  const auto t0 = Clock::now();
  stub->GetJob(&ctx, req, &resp);
  if (ms != nullptr) *ms = Seconds(Clock::now() - t0) * 1e3;
  return resp.job();
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

RankRow RunRanks(const std::string& binary, int ranks, double seconds, int channels, int per_rank_max) {
  RankRow row;
  row.ranks = ranks;
  ServerProcess server(binary, ranks, 1000, per_rank_max);
  auto jobs = JobStub(server.addr());
  v1::SubmitJobRequest submit;
  submit.set_spec("name: scale\nlauncher: external\nmodel: {kind: mlp}\nmax_steps: 1000000\nnum_processes: " +
                  std::to_string(ranks) + "\nmetrics_every_steps: 1\n");
  v1::SubmitJobResponse submitted;
  {
    grpc::ClientContext ctx;
    if (auto st = jobs->SubmitJob(&ctx, submit, &submitted); !st.ok()) {
      row.error = "submit: " + st.error_message();
      return row;
    }
  }
  const std::string id = submitted.job().id();
  v1::GetJoinInfoResponse join;
  for (int i = 0; i < 100; ++i) {
    grpc::ClientContext ctx;
    v1::GetJoinInfoRequest req;
    req.set_id(id);
    if (jobs->GetJoinInfo(&ctx, req, &join).ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  Shared shared;
  shared.job_id = id;
  shared.token = join.token();
  std::vector<std::shared_ptr<grpc::Channel>> chans;
  std::vector<std::unique_ptr<v1::WorkerService::Stub>> stubs;
  for (int c = 0; c < channels; ++c) {
    grpc::ChannelArguments args;
    args.SetInt("trainyard.bench.channel", c);  // a connection each
    chans.push_back(grpc::CreateCustomChannel(server.addr(), grpc::InsecureChannelCredentials(), args));
    stubs.push_back(v1::WorkerService::NewStub(chans.back()));
  }
  std::vector<std::unique_ptr<SimRank>> sims;
  for (int r = 0; r < ranks; ++r) sims.push_back(std::make_unique<SimRank>(stubs[r % channels].get(), &shared, r));

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
  std::atomic<bool> done{false};
  std::atomic<int64_t> step{0};
  std::mutex sent_mu;
  std::vector<std::pair<int64_t, Clock::time_point>> sent;  // rank 0's steps and when
  std::thread reporter([&] {
    const auto t0 = Clock::now();
    for (int64_t s = 1; !done; ++s) {
      const auto second = t0 + std::chrono::seconds(s);
      for (int r = 0; r < ranks && !done; ++r) {
        std::this_thread::sleep_until(second - std::chrono::seconds(1) +
                                      std::chrono::microseconds(1000000LL * r / ranks));
        if (sims[r]->Report(s) && r == 0) {
          std::lock_guard<std::mutex> lock(sent_mu);
          sent.emplace_back(s, Clock::now());
        }
      }
      step = s;
      std::this_thread::sleep_until(second);
    }
  });
  std::this_thread::sleep_for(std::chrono::seconds(3));  // past the first reports
  const double cpu0 = server.CpuSeconds();
  const auto t0 = Clock::now();
  std::vector<double> gets, lists, delays;
  while (Seconds(Clock::now() - t0) < seconds) {
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
  row.scrape = ScrapeMetrics(server.metrics_port());
  row.get_p99_ms = P99(gets);
  row.list_p99_ms = P99(lists);
  row.delay_p99_s = P99(delays);
  done = true;
  reporter.join();
  row.reports = shared.reports;
  // Lost reports, report by report: each carried one sample; wait (up to
  // 10 s) for the server to have counted every one written.
  for (const auto give_up = Clock::now() + std::chrono::seconds(10);;) {
    row.lost = row.reports - SamplesCounted(ScrapeMetrics(server.metrics_port()).body, id);
    if (row.lost <= 0 || Clock::now() > give_up) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  row.error = CheckRanks(jobs.get(), id, ranks, per_rank_max, row.scrape);  // the job ends all the same

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
  {
    grpc::ClientContext ctx;
    v1::CancelJobRequest req;
    req.set_id(id);
    v1::CancelJobResponse resp;
    jobs->CancelJob(&ctx, req, &resp);
  }
  {
    std::unique_lock<std::mutex> lock(shared.mu);
    shared.cv.wait_for(lock, std::chrono::seconds(120), [&] { return shared.ended >= ranks; });
  }
  while (get_job(nullptr).state() == v1::RUNNING) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ended = true;
  prober.join();
  row.end_hold_ms = hold;
  row.end_lock_ms = LongestHoldMs(holds_before, LockHoldBuckets(ScrapeMetrics(server.metrics_port()).body));
  row.failed = shared.failed;
  if (row.error.empty()) row.error = shared.first_error;
  return row;
}

struct QueueRow {
  int queued = 0;
  double per_second = 0, p99_ms = 0, idle_cpu = 0, queue_p99_ms = 0;
  int64_t failed = 0;
  std::string error;  // what GetQueue's pages got wrong
};

// Submissions of local jobs from `clients` threads until `queued` are
// queued (the server has one slot, held by the first job's stand-in
// worker); then the idle server's CPU and GetQueue's p99 with that queue.
QueueRow RunQueue(const std::string& binary, int queued, int clients, double idle_seconds) {
  QueueRow row;
  row.queued = queued;
  ServerProcess server(binary, 16, queued + 16);
  std::atomic<int> next{0};
  std::atomic<int64_t> failed{0};
  std::mutex mu;
  std::vector<double> ms;
  const auto t0 = Clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&] {
      auto stub = JobStub(server.addr());
      std::vector<double> mine;
      while (next++ < queued) {
        v1::SubmitJobRequest req;
        req.set_spec("name: queued\nlauncher: local\nmodel: {kind: mlp}\nmax_steps: 10\nnum_processes: 1\n");
        v1::SubmitJobResponse resp;
        grpc::ClientContext ctx;
        const auto s0 = Clock::now();
        if (!stub->SubmitJob(&ctx, req, &resp).ok()) ++failed;
        mine.push_back(Seconds(Clock::now() - s0) * 1e3);
      }
      std::lock_guard<std::mutex> lock(mu);
      ms.insert(ms.end(), mine.begin(), mine.end());
    });
  }
  for (auto& t : threads) t.join();
  row.per_second = static_cast<double>(queued) / Seconds(Clock::now() - t0);
  row.p99_ms = P99(ms);
  row.failed = failed;
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const double cpu0 = server.CpuSeconds();
  std::this_thread::sleep_for(std::chrono::duration<double>(idle_seconds));
  row.idle_cpu = (server.CpuSeconds() - cpu0) / idle_seconds;
  auto stub = JobStub(server.addr());
  std::vector<double> q;
  for (int i = 0; i < 20; ++i) {
    grpc::ClientContext ctx;
    v1::GetQueueRequest req;
    v1::GetQueueResponse resp;
    const auto s0 = Clock::now();
    stub->GetQueue(&ctx, req, &resp);
    q.push_back(Seconds(Clock::now() - s0) * 1e3);
  }
  row.queue_p99_ms = P99(q);
  // Every waiting job once in GetQueue's pages (five or more; the queue
  // stands still meanwhile), as many as the first page's total_size.
  std::set<std::string> seen;
  v1::GetQueueRequest req;
  req.set_page_size(std::max(1, queued / 5));
  int32_t total = -1;
  do {
    grpc::ClientContext ctx;
    v1::GetQueueResponse resp;
    if (auto st = stub->GetQueue(&ctx, req, &resp); !st.ok()) {
      row.error = "GetQueue: " + st.error_message();
      return row;
    }
    if (total < 0) total = resp.total_size();
    for (const v1::QueueEntry& e : resp.entries()) {
      if (!seen.insert(e.id()).second) row.error = "GetQueue's pages show " + e.id() + " twice";
    }
    req.set_page_token(resp.next_page_token());
  } while (!req.page_token().empty() && seen.size() <= static_cast<size_t>(queued));
  if (row.error.empty() && (seen.size() != static_cast<size_t>(total) || total < queued - 1)) {
    row.error = "GetQueue's pages show " + std::to_string(seen.size()) + " jobs of " + std::to_string(total) +
                " (submitted " + std::to_string(queued) + ")";
  }
  return row;
}

struct KillRow {
  int acknowledged = 0, found = 0, unacknowledged_found = 0;
  double restart_s = 0;
  std::string error;
};

// Submissions from `clients` threads until half of `submissions` were
// acknowledged, then kill -9 of the server in the middle of the burst; the
// server started again on its state directory must have every job it
// acknowledged, each with its "submitted" event.
KillRow RunBurstKill(const std::string& binary, int submissions, int clients) {
  KillRow row;
  ServerProcess server(binary, 16, submissions + 16);
  std::mutex mu;
  std::vector<std::string> acked;
  std::atomic<int> next{0};
  std::atomic<bool> down{false};
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&] {
      auto stub = JobStub(server.addr());
      while (!down && next++ < submissions) {
        v1::SubmitJobRequest req;
        req.set_spec("name: burst\nlauncher: local\nmodel: {kind: mlp}\nmax_steps: 10\nnum_processes: 1\n");
        v1::SubmitJobResponse resp;
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
        if (!stub->SubmitJob(&ctx, req, &resp).ok()) break;  // the server is gone
        std::lock_guard<std::mutex> lock(mu);
        acked.push_back(resp.job().id());
      }
    });
  }
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (static_cast<int>(acked.size()) >= submissions / 2) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const auto t0 = Clock::now();
  server.Restart();  // kill -9 while the clients submit, then start again
  row.restart_s = Seconds(Clock::now() - t0);
  down = true;
  for (auto& t : threads) t.join();
  row.acknowledged = static_cast<int>(acked.size());
  auto stub = JobStub(server.addr());
  const std::set<std::string> ack_set(acked.begin(), acked.end());
  for (const std::string& id : acked) {
    grpc::ClientContext ctx;
    v1::GetJobRequest req;
    req.set_id(id);
    v1::GetJobResponse resp;
    if (!stub->GetJob(&ctx, req, &resp).ok()) continue;
    bool submitted = false;
    for (const v1::JobEvent& e : resp.job().events()) submitted |= e.reason() == "submitted";
    if (submitted) ++row.found;
  }
  // Jobs stored but not acknowledged (the reply lost with the server).
  v1::ListJobsRequest list;
  list.set_page_size(1000);
  do {
    grpc::ClientContext ctx;
    v1::ListJobsResponse page;
    if (!stub->ListJobs(&ctx, list, &page).ok()) break;
    for (const v1::Job& j : page.jobs()) row.unacknowledged_found += ack_set.count(j.id()) ? 0 : 1;
    list.set_page_token(page.next_page_token());
  } while (!list.page_token().empty());
  if (row.found != row.acknowledged) {
    row.error = std::to_string(row.acknowledged - row.found) + " acknowledged submissions lost to kill -9";
  }
  return row;
}

}  // namespace
}  // namespace trainyard

int main(int argc, char** argv) {
  CLI::App app{"Simulated ranks and a deep queue against a real trainyard-server"};
  std::vector<int> ranks = {1024};
  double seconds = 20, idle_seconds = 10;
  int channels = 32, queued = 0, clients = 8;
  std::string server_binary = "build/bin/trainyard-server";
  int per_rank_max = 0, kill_burst = 0;
  app.add_option("--ranks", ranks, "Rank counts, one job each")->delimiter(',')->capture_default_str();
  app.add_option("--seconds", seconds, "How long the ranks report while measured")->capture_default_str();
  app.add_option("--channels", channels, "gRPC connections the ranks share")->capture_default_str();
  app.add_option("--queued", queued, "Jobs submitted into the queue (0: no queue run)")->capture_default_str();
  app.add_option("--clients", clients, "Threads submitting")->capture_default_str();
  app.add_option("--idle-seconds", idle_seconds, "How long the idle server's CPU is measured")->capture_default_str();
  app.add_option("--server-binary", server_binary)->capture_default_str();
  app.add_option("--metrics-per-rank-max-ranks", per_rank_max, "The server's flag of that name (0: its default, 64)")
      ->capture_default_str();
  app.add_option("--kill-burst", kill_burst,
                 "Submissions of a burst the server is killed (kill -9) in the middle of (0: none)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  signal(SIGPIPE, SIG_IGN);
  int status = 0;  // 1: a stream failed, a rank count never ran, or a submission failed
  std::string command = "bench/scale";
  for (int i = 1; i < argc; ++i) command += std::string(" ") + argv[i];
  std::printf("command: %s\n", command.c_str());
  std::printf(
      "conditions: server and simulator on one machine, %u hardware threads; one step report per rank per "
      "second; %d gRPC connections\n\n",
      std::thread::hardware_concurrency(), channels);
  if (!ranks.empty() && ranks.front() > 0) {
    std::printf(
        "| ranks | join → RUNNING s | server CPU | RSS MB | threads | /metrics MB | series | scrape s |"
        " GetJob p99 ms | ListJobs p99 ms | report delay p99 ms | end: GetJob max ms | end: lock held ≤ ms |"
        " reports | lost | failed |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int n : ranks) {
      const trainyard::RankRow r = trainyard::RunRanks(server_binary, n, seconds, channels, per_rank_max);
      std::printf(
          "| %d | %.1f | %.0f%% | %lld | %lld | %.2f | %zu | %.2f | %.0f | %.0f | %.0f | %.0f | %g | %lld | %lld | %d "
          "|\n",
          r.ranks, r.join_s, r.cpu * 100, static_cast<long long>(r.rss_mb), static_cast<long long>(r.threads),
          static_cast<double>(r.scrape.bytes) / 1e6, r.scrape.series, r.scrape.seconds, r.get_p99_ms, r.list_p99_ms,
          r.delay_p99_s * 1e3, r.end_hold_ms, r.end_lock_ms, static_cast<long long>(r.reports),
          static_cast<long long>(r.lost), r.failed);
      if (!r.error.empty()) std::printf("  (%d ranks: %s)\n", n, r.error.c_str());
      // A test runs this at small N: the protocol's path must hold.
      if (r.failed > 0 || r.lost != 0 || !r.error.empty() || r.reports == 0 || r.join_s >= 300) status = 1;
      std::fflush(stdout);
    }
  }
  if (queued > 0) {
    const trainyard::QueueRow q = trainyard::RunQueue(server_binary, queued, clients, idle_seconds);
    std::printf("\n| queued | submissions/s | submit p99 ms | failed | idle CPU | GetQueue p99 ms |\n");
    std::printf("|---|---|---|---|---|---|\n");
    std::printf("| %d | %.0f | %.0f | %lld | %.1f%% | %.0f |\n", q.queued, q.per_second, q.p99_ms,
                static_cast<long long>(q.failed), q.idle_cpu * 100, q.queue_p99_ms);
    if (!q.error.empty()) std::printf("  (%s)\n", q.error.c_str());
    if (q.failed > 0 || !q.error.empty()) status = 1;
  }
  if (kill_burst > 0) {
    const trainyard::KillRow k = trainyard::RunBurstKill(server_binary, kill_burst, clients);
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
