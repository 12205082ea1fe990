// HelloGuard: what a caller of WorkerService.Connect holds before it has
// said who it is. Each stream takes the server's memory at once, and its
// first message (the hello, with the job's token) may never come: a stranger
// could hold a stream open for as long as it likes. Here each stream waiting
// for its hello is counted and cancelled after `timeout` (its Read returns
// false), by one reaper thread. More than a budget allows are refused at
// once (RESOURCE_EXHAUSTED; a worker asks again: common/join_retry.h).
//
// Whose budget a stream takes:
// - A stream that proved its job at its start (the job's worker token in
//   its metadata, checked by the caller) counts against that job's budget
//   (`per_job`), which nobody without the token can use up.
// - Any other stream counts against its peer host's (`per_host`) and,
//   together with every other host's, against `all_hosts`: a stranger
//   with many source addresses (127.0.0.2, .3, ...) does not get a budget
//   for each.
//
// Thread-safe.
#ifndef TRAINYARD_SERVER_API_HELLO_GUARD_H_
#define TRAINYARD_SERVER_API_HELLO_GUARD_H_

#include <grpcpp/server_context.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/status.h"

namespace trainyard {

struct HelloLimits {
  // Streams waiting for their hello without a job's token, per peer host.
  int per_host = 256;
  // The same, all hosts together.
  int all_hosts = 1024;
  // Streams waiting for their hello that proved their job, per job.
  int per_job = 256;
  // How long a stream may wait before its hello.
  std::chrono::milliseconds timeout{std::chrono::seconds(5)};
};

class HelloGuard {
 public:
  explicit HelloGuard(const HelloLimits& limits);
  ~HelloGuard();
  HelloGuard(const HelloGuard&) = delete;
  HelloGuard& operator=(const HelloGuard&) = delete;

  // Held while a stream waits for its hello; the destructor ends the wait's
  // count (call it once the hello came, or the stream ended).
  class Wait {
   public:
    Wait(HelloGuard* guard, grpc::ServerContextBase* ctx) : guard_(guard), ctx_(ctx) {}
    ~Wait() {
      if (guard_ != nullptr) guard_->Done(ctx_);
    }
    Wait(Wait&& o) noexcept : guard_(o.guard_), ctx_(o.ctx_) { o.guard_ = nullptr; }
    Wait(const Wait&) = delete;
    Wait& operator=(const Wait&) = delete;
    Wait& operator=(Wait&&) = delete;

   private:
    HelloGuard* guard_;
    grpc::ServerContextBase* ctx_;
  };

  // A stream of `ctx` starts waiting for its hello, counted against job
  // `proven_job`'s budget (it proved it holds the job's token) or, without
  // one, its host's and all hosts'. RESOURCE_EXHAUSTED, naming the budget,
  // when that is full (refuse the stream).
  absl::Status Start(grpc::ServerContextBase* ctx, const std::optional<std::string>& proven_job);
  // The host part of a gRPC peer string ("ipv4:10.0.0.7:5123" -> "ipv4:10.0.0.7").
  static std::string HostOf(const std::string& peer);

  // The streams waiting now, in all.
  int waiting();

 private:
  struct Entry {
    std::string key;  // "host <host>" or "job <id>"
    bool unproven = false;
    std::chrono::steady_clock::time_point deadline;
  };
  void Done(grpc::ServerContextBase* ctx);
  void Reap();

  const HelloLimits limits_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::map<grpc::ServerContextBase*, Entry> waiting_;
  std::map<std::string, int> per_key_count_;
  int unproven_count_ = 0;
  std::thread reaper_;
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_API_HELLO_GUARD_H_
