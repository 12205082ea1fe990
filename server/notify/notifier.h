// Notifier: delivers webhook notifications (the spec's `notify:`, a
// sweep's, the policy file's) off the coordinator's threads. Enqueue returns
// at once; a few threads of its own POST each delivery (WebhookPost), signed
// with HMAC-SHA256 of the body under the server's secret (header
// X-Trainyard-Signature-256: sha256=<hex>, as GitHub signs its webhooks),
// and try again with doubling back-off on no answer, a 5xx or a 429, up to
// max_attempts. A receiver that hangs holds one delivery thread for at most
// `timeout` per attempt; it never holds an RPC or the job manager's lock.
//
// The local network is not called unless the operator lists the host
// (--notify-allowed-host; common/webhook_url.h): each delivery resolves its
// host on its thread, refuses it when any address is local, and connects to
// the address it checked (no second lookup a DNS answer could change). The
// policy file's URLs are the operator's own: the allow-list applies to
// them, the local network does not.
//
// Fair between owners: each owner (the job's or sweep's user) has a queue
// of its own, of at most max_pending_per_owner deliveries (more are dropped,
// recorded on that owner's job); the threads take deliveries round-robin
// across the queues, at most one of an owner in flight at once, so one
// user's silent receivers hold one thread, and delay nobody else's. The
// policy file's webhooks (the operator's) have a queue per user whose jobs
// they announce, rate-limited: at most policy_burst at once, then one per
// policy_refill (more are dropped and counted in the server log), so one
// user's bulk cancel sends the operator a few posts, not one per job.
//
// What a user is shown of a delivery (`record`: the job's or sweep's
// events) names the URL as scheme://host[:port] only, and the answer as its
// HTTP status class or "no answer": never the receiver's or libcurl's words
// (those go to the server log). The policy's deliveries go to the server log
// only.
//
// Thread-safe.
#ifndef TRAINYARD_SERVER_NOTIFY_NOTIFIER_H_
#define TRAINYARD_SERVER_NOTIFY_NOTIFIER_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace trainyard {

struct NotifierOptions {
  std::string secret;  // HMAC key; "": requests go unsigned
  // --notify-allowed-host: empty, any host not on the local network; else
  // these only, on the local network or not.
  std::vector<std::string> allowed_hosts;
  int max_attempts = 5;                           // first try included
  std::chrono::milliseconds first_backoff{1000};  // doubles after each failed try
  std::chrono::milliseconds timeout{5000};        // per try
  size_t max_pending_per_owner = 100;             // more of that owner's are dropped, and recorded so
  size_t max_pending = 10000;                     // all owners' together
  int policy_burst = 10;                          // the policy's deliveries per user: at most this many at once,
  std::chrono::milliseconds policy_refill{6000};  // then one more per this
  int threads = 4;
};

struct WebhookDelivery {
  std::string job_id;  // whose events record the outcome ("" for none)
  std::string url;
  std::string event;         // SUCCEEDED, FAILED, ...: the X-Trainyard-Event header
  std::string id;            // unique: the X-Trainyard-Delivery header
  std::string body;          // JSON
  bool from_policy = false;  // the operator's: its outcome goes to the server log only
};

class Notifier {
 public:
  using Record = std::function<void(const std::string& job_id, const std::string& text)>;

  Notifier(NotifierOptions options, Record record);
  ~Notifier();  // Stop

  void Start();
  // Pending deliveries are dropped (each recorded as such).
  void Stop();
  // Queues `d` for `owner` (the user whose job or sweep it announces).
  // False (and recorded) when that owner's queue is full, all queues are,
  // or (the policy's) its rate is spent.
  bool Enqueue(const std::string& owner, WebhookDelivery d);
  const NotifierOptions& options() const { return options_; }

 private:
  struct Pending {
    WebhookDelivery d;
    int attempt = 0;
    std::chrono::steady_clock::time_point due;
  };
  struct Queue {
    std::string owner;
    bool policy = false;
    std::deque<Pending> pending;
    bool in_flight = false;
    double tokens = 0;  // the policy's rate limit
    std::chrono::steady_clock::time_point refilled;
    int64_t limited = 0;  // dropped by it since the last log line
  };
  void Run();
  // Delivers `p` of queue `key`; false when it is to be tried again.
  bool Deliver(Pending& p);
  void Report(const WebhookDelivery& d, const std::string& text);

  const NotifierOptions options_;
  const Record record_;
  absl::Mutex mu_;
  std::map<std::string, Queue> queues_ ABSL_GUARDED_BY(mu_);  // by key: "u:" or "p:", then the owner
  std::string last_served_ ABSL_GUARDED_BY(mu_);              // the key served last: round-robin
  size_t total_pending_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t changes_ ABSL_GUARDED_BY(mu_) = 0;  // a delivery queued or one in flight done
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_NOTIFY_NOTIFIER_H_
