// Simulated ranks: each speaks the worker protocol over a WorkerService
// stream of its own (hello, welcome, one step report when asked, the stop's
// answer and its result; in a replica job, the memberships it is sent),
// all of them from one process on gRPC's callback API. They never train:
// the server cannot tell them from real workers but by their timing.
#ifndef TRAINYARD_BENCH_SCALE_SIM_RANK_H_
#define TRAINYARD_BENCH_SCALE_SIM_RANK_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench/scale/server_process.h"
#include "common/join_retry.h"
#include "common/replica_protocol.h"
#include "trainyard/v1/trainyard.grpc.pb.h"

namespace trainyard::scale {

// What the simulated ranks of one job share.
struct Shared {
  explicit Shared(int ranks) : memberships(static_cast<size_t>(ranks)) {}
  std::string job_id, token;
  std::atomic<int> welcomed{0}, ended{0}, failed{0}, retries{0};
  std::atomic<int64_t> reports{0};
  std::mutex mu;
  std::condition_variable cv;
  std::string first_error;
  // Replica jobs: each rank's newest membership (its epoch and size) and
  // when it came; every membership's bytes on the wire, and how many came
  // as deltas; each epoch's ranks (whole, or a delta applied to its base:
  // every rank must end with the same). Under mu.
  struct Seen {
    int64_t epoch = 0;
    int size = 0;
    Clock::time_point at;
  };
  std::vector<Seen> memberships;
  int64_t membership_messages = 0, membership_bytes = 0, membership_deltas = 0;
  std::map<int64_t, MembershipView> views;
  std::map<int64_t, MembershipDelta> deltas;  // the delta each epoch of views came as
};

class SimRank;

// One stream of a simulated rank: it says hello (its job and token in the
// metadata too, as a worker's), then reports a step whenever Report is
// called, and ends with its result when the server says stop. A stream the
// server refuses before the rank has joined is asked again by the worker's
// join rule (common/join_retry.h: UNAVAILABLE and RESOURCE_EXHAUSTED, with
// backoff, until the join timeout); one that breaks after (a server
// restarting) is opened again while the server answers UNAVAILABLE or
// RESOURCE_EXHAUSTED. Lose ends it as a dead process's would (no result).
class Stream final : public grpc::ClientBidiReactor<v1::WorkerMessage, v1::CoordinatorMessage> {
 public:
  Stream(v1::WorkerService::Stub* stub, Shared* shared, int32_t rank, SimRank* owner)
      : stub_(stub), shared_(shared), rank_(rank), owner_(owner) {}

  void Start();
  // Reports `step` (one sample) once welcomed; false when not (yet) running.
  bool Report(int64_t step);
  void Lose();
  // Whether the server welcomed this stream.
  bool welcomed();

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnDone(const grpc::Status& s) override;

 private:
  void WriteNext();
  void WriteLocked();
  void TookMembership(const v1::Membership& m);

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
  std::atomic<bool> lost_{false};
};

// A simulated rank: its streams in turn (an ended one is kept until the
// end, since its reactor may not be freed from its own callback).
class SimRank {
 public:
  SimRank(v1::WorkerService::Stub* stub, Shared* shared, int32_t rank) : stub_(stub), shared_(shared), rank_(rank) {}
  // A new stream (the first, or a replacement's after Lose).
  void Start();
  bool Report(int64_t step);
  // Its stream ends without a result, as a killed process's would.
  void Lose();
  // How long to wait before a new stream, after the current one ended with
  // `code` (`welcomed`: the server had taken it); nullopt: the rank gives
  // up, as a worker would. Until the rank is first welcomed, the join rule.
  std::optional<std::chrono::milliseconds> RetryWait(grpc::StatusCode code, bool welcomed);
  // Starts a new stream after `wait`.
  void Retry(std::chrono::milliseconds wait);

 private:
  v1::WorkerService::Stub* const stub_;
  Shared* const shared_;
  const int32_t rank_;
  std::mutex mu_;
  std::unique_ptr<Stream> current_;
  std::vector<std::unique_ptr<Stream>> done_;
  std::optional<JoinRetry> join_;  // from the first stream's start
  bool joined_ = false;            // a stream of it was welcomed
};

// The simulated ranks 0..n-1 of one job, over `channels` connections to
// the server at `addr` (rank r on connection r % channels).
struct SimRanks {
  SimRanks(const std::string& addr, Shared* shared, int n, int channels);
  std::vector<std::shared_ptr<grpc::Channel>> connections;
  std::vector<std::unique_ptr<v1::WorkerService::Stub>> stubs;
  std::vector<std::unique_ptr<SimRank>> ranks;
};

// The spec of a `launcher: external` job named `name` of `ranks` ranks,
// with `more` (YAML lines) after it.
std::string ExternalSpec(const std::string& name, int ranks, const std::string& more = "");

// A job of simulated ranks on the server at `addr`: `spec` submitted, its
// worker token fetched, its ranks made (Start each to connect).
class SimJob {
 public:
  SimJob(const std::string& addr, const std::string& spec, int ranks, int channels);
  // Empty when the submission failed (error says why).
  const std::string& id() const { return shared_->job_id; }
  const std::string& error() const { return error_; }
  Shared& shared() { return *shared_; }
  SimRanks& sim() { return *sim_; }
  // Cancels the job through `stub` and waits (up to 120 s) for every rank's
  // stream to end. Returns the streams that failed; the first error goes
  // into *error when it is empty.
  int End(v1::JobService::Stub* stub, std::string* error);

 private:
  std::unique_ptr<Shared> shared_;
  std::unique_ptr<SimRanks> sim_;
  std::string error_;
};

// Every rank of `sim` reports one step a second (step s in second s), the
// ranks spread over the second, until Stop; `on_sent(step, rank)` after
// each report a stream took.
class StepReporter {
 public:
  StepReporter(SimRanks* sim, std::function<void(int64_t step, int rank)> on_sent = nullptr);
  ~StepReporter() { Stop(); }
  void Stop();
  int64_t step() const { return step_; }

 private:
  std::atomic<bool> done_{false};
  std::atomic<int64_t> step_{0};
  std::thread thread_;
};

}  // namespace trainyard::scale

#endif  // TRAINYARD_BENCH_SCALE_SIM_RANK_H_
