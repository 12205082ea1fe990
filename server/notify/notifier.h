// Notifier: delivers webhook notifications (the spec's `notify:`) off the
// coordinator's threads. Enqueue returns at once; a few threads of its own
// POST each delivery (WebhookPost), signed with HMAC-SHA256 of the body
// under the server's secret (header X-Trainyard-Signature-256:
// sha256=<hex>, as GitHub signs its webhooks), and try again with doubling
// back-off on no answer, a 5xx or a 429, up to max_attempts. A receiver that
// hangs holds one delivery thread for at most `timeout` per attempt; it
// never holds an RPC or the job manager's lock. Each delivery's outcome is
// handed to `record` (the job's events).
//
// Thread-safe.
#ifndef TRAINYARD_SERVER_NOTIFY_NOTIFIER_H_
#define TRAINYARD_SERVER_NOTIFY_NOTIFIER_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace trainyard {

struct NotifierOptions {
  std::string secret;                             // HMAC key; "": requests go unsigned
  std::vector<std::string> allowed_hosts;         // empty: any (--notify-allowed-host)
  int max_attempts = 5;                           // first try included
  std::chrono::milliseconds first_backoff{1000};  // doubles after each failed try
  std::chrono::milliseconds timeout{5000};        // per try
  size_t max_pending = 1000;                      // more are dropped, and recorded so
  int threads = 2;
};

struct WebhookDelivery {
  std::string job_id;  // whose events record the outcome ("" for none)
  std::string url;
  std::string event;  // SUCCEEDED, FAILED, ...: the X-Trainyard-Event header
  std::string id;     // unique: the X-Trainyard-Delivery header
  std::string body;   // JSON
};

class Notifier {
 public:
  using Record = std::function<void(const std::string& job_id, const std::string& text)>;

  Notifier(NotifierOptions options, Record record);
  ~Notifier();  // Stop

  void Start();
  // Pending deliveries are dropped (each recorded as such).
  void Stop();
  // False (and recorded) when max_pending are waiting already.
  bool Enqueue(WebhookDelivery d);
  const NotifierOptions& options() const { return options_; }

 private:
  struct Pending {
    WebhookDelivery d;
    int attempt = 0;
    std::chrono::steady_clock::time_point due;
  };
  void Run();
  void Deliver(Pending p);

  const NotifierOptions options_;
  const Record record_;
  absl::Mutex mu_;
  std::deque<Pending> pending_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_NOTIFY_NOTIFIER_H_
