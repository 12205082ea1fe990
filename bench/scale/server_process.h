// The trainyard-server a scale run measures, started afresh in a state
// directory of its own (`launcher: external`, one slot), and the probes the
// runs share: /metrics scrapes, GetJob timings, percentiles.
#ifndef TRAINYARD_BENCH_SCALE_SERVER_PROCESS_H_
#define TRAINYARD_BENCH_SCALE_SERVER_PROCESS_H_

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "trainyard/v1/trainyard.grpc.pb.h"

namespace trainyard::scale {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d);
double P99(std::vector<double> v);

class ServerProcess {
 public:
  // `per_rank_max` 0: the server's default (not passed, for servers older
  // than the flag). Local jobs run a stand-in that sleeps: the first holds
  // the one slot, the others wait in the queue.
  // `extra`: more of the server's flags (--store URL).
  ServerProcess(const std::string& binary, int max_processes, int max_queued, int per_rank_max = 0,
                std::vector<std::string> extra = {});
  ~ServerProcess();
  // kill -9, and the server started again on the same state directory and
  // ports.
  void Restart();

  std::string addr() const { return "127.0.0.1:" + std::to_string(grpc_port_); }
  int metrics_port() const { return metrics_port_; }
  int http_port() const { return http_port_; }
  // CPU seconds (user + system) the server has used so far.
  double CpuSeconds() const;
  // A line of /proc/<pid>/status ("VmRSS", "Threads") as a number.
  int64_t Status(const std::string& key) const;
  // Its open file descriptors (one a connection, and its files).
  int64_t OpenFiles() const;

 private:
  void Start();
  void Kill();

  const std::string binary_;
  std::vector<std::string> args_;
  std::string dir_;
  pid_t pid_ = -1;
  int grpc_port_ = 0, metrics_port_ = 0, http_port_ = 0;
};

// GET /metrics: its size, series, seconds, and the body.
struct Scrape {
  size_t bytes = 0, series = 0;
  double seconds = 0;
  std::string body;
};
Scrape ScrapeMetrics(int port);

// One HTTP/1.0 request to 127.0.0.1:`port`: the status line's code, the
// response's headers and body (status 0: no connection).
struct HttpReply {
  int status = 0;
  std::string headers, body;
};
HttpReply Http(int port, const std::string& method, const std::string& path, const std::string& headers = "",
               const std::string& body = "");

// The web UI's JSON API as a signed-in browser calls it (on a server
// without tokens any token signs in).
class WebUi {
 public:
  explicit WebUi(int port);
  bool signed_in() const { return !csrf_.empty(); }
  // POST /ui/api/v1/<method> with `json`: the HTTP status.
  int Call(const std::string& method, const std::string& json);

 private:
  const int port_;
  std::string cookie_, csrf_;
};

std::unique_ptr<v1::JobService::Stub> JobStub(const std::string& addr);
// GetJob of `id`, its round trip in milliseconds into `ms` (when given).
v1::Job TimedGetJob(v1::JobService::Stub* stub, const std::string& id, double* ms);
// Submits `spec`; the job's id, or "" with `error` set.
std::string Submit(v1::JobService::Stub* stub, const std::string& spec, std::string* error);
// The job's worker token (GetJoinInfo), tried for up to 5 s.
std::string JoinToken(v1::JobService::Stub* stub, const std::string& id);
void CancelJob(v1::JobService::Stub* stub, const std::string& id);

}  // namespace trainyard::scale

#endif  // TRAINYARD_BENCH_SCALE_SERVER_PROCESS_H_
