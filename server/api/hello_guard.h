// HelloGuard: what a caller of WorkerService.Connect holds before it has
// said who it is. Each stream takes the server's memory at once, and its
// first message (the hello, with the job's token) may never come: a stranger
// could hold a stream open for as long as it likes. Here each stream waiting
// for its hello is counted per peer host (at most `per_host` at once: more
// are refused at once, RESOURCE_EXHAUSTED) and cancelled after `timeout`
// (its Read returns false), by one reaper thread.
//
// Thread-safe.
#ifndef TRAINYARD_SERVER_API_HELLO_GUARD_H_
#define TRAINYARD_SERVER_API_HELLO_GUARD_H_

#include <grpcpp/server_context.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>

namespace trainyard {

class HelloGuard {
 public:
  HelloGuard(int per_host, std::chrono::milliseconds timeout);
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

  // A stream of `ctx` starts waiting for its hello; false when its host has
  // `per_host` streams waiting already (refuse it).
  bool Start(grpc::ServerContextBase* ctx);
  // The host part of a gRPC peer string ("ipv4:10.0.0.7:5123" -> "ipv4:10.0.0.7").
  static std::string HostOf(const std::string& peer);

 private:
  struct Entry {
    std::string host;
    std::chrono::steady_clock::time_point deadline;
  };
  void Done(grpc::ServerContextBase* ctx);
  void Reap();

  const int per_host_;
  const std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::map<grpc::ServerContextBase*, Entry> waiting_;
  std::map<std::string, int> per_host_count_;
  std::thread reaper_;
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_API_HELLO_GUARD_H_
