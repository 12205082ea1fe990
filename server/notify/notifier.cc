#include "server/notify/notifier.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/webhook_url.h"
#include "server/notify/webhook_post.h"
#include "spdlog/spdlog.h"

namespace trainyard {
namespace {

// How a delivery is named in a job's events: the URL without its query
// (which may carry a receiver's token).
std::string Shown(const std::string& url) { return url.substr(0, url.find('?')); }

}  // namespace

Notifier::Notifier(NotifierOptions options, Record record) : options_(std::move(options)), record_(std::move(record)) {}

Notifier::~Notifier() { Stop(); }

void Notifier::Start() {
  for (int i = 0; i < std::max(1, options_.threads); ++i) threads_.emplace_back([this] { Run(); });
}

void Notifier::Stop() {
  std::deque<Pending> dropped;
  {
    absl::MutexLock lock(&mu_);
    if (stop_) return;
    stop_ = true;
    dropped.swap(pending_);
  }
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  for (const Pending& p : dropped) {
    record_(p.d.job_id, absl::StrCat("webhook ", Shown(p.d.url), " (", p.d.event,
                                     "): not delivered, the server stopped before it could"));
  }
}

bool Notifier::Enqueue(WebhookDelivery d) {
  {
    absl::MutexLock lock(&mu_);
    if (!stop_ && pending_.size() < options_.max_pending) {
      pending_.push_back({std::move(d), 0, std::chrono::steady_clock::now()});
      return true;
    }
  }
  record_(d.job_id, absl::StrCat("webhook ", Shown(d.url), " (", d.event, "): dropped, ", options_.max_pending,
                                 " deliveries are waiting already"));
  return false;
}

void Notifier::Run() {
  for (;;) {
    Pending p;
    {
      absl::MutexLock lock(&mu_);
      for (;;) {
        if (stop_) return;
        auto due = std::min_element(pending_.begin(), pending_.end(),
                                    [](const Pending& a, const Pending& b) { return a.due < b.due; });
        const auto now = std::chrono::steady_clock::now();
        if (due != pending_.end() && due->due <= now) {
          p = std::move(*due);
          pending_.erase(due);
          break;
        }
        // Until the next one is due, a new one comes, or Stop.
        const size_t n = pending_.size();
        auto changed = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || pending_.size() > n; };
        const absl::Duration wait = due == pending_.end() ? absl::Seconds(1) : absl::FromChrono(due->due - now);
        mu_.AwaitWithTimeout(absl::Condition(&changed), wait);
      }
    }
    Deliver(std::move(p));
  }
}

void Notifier::Deliver(Pending p) {
  const WebhookDelivery& d = p.d;
  auto url = ParseWebhookUrl(d.url);
  if (!url.ok() || !WebhookHostAllowed(url->host, options_.allowed_hosts)) {
    record_(d.job_id, absl::StrCat("webhook ", Shown(d.url), " (", d.event, "): refused, ",
                                   url.ok() ? "its host is not in the server's --notify-allowed-host"
                                            : std::string(url.status().message())));
    return;
  }
  std::vector<std::string> headers = {"Content-Type: application/json", "X-Trainyard-Event: " + d.event,
                                      "X-Trainyard-Delivery: " + d.id};
  if (!options_.secret.empty()) {
    headers.push_back("X-Trainyard-Signature-256: sha256=" + HmacSha256Hex(options_.secret, d.body));
  }
  ++p.attempt;
  const PostResult r = WebhookPost(d.url, d.body, headers, options_.timeout);
  const std::string answer = r.http_status > 0 ? absl::StrCat("HTTP ", r.http_status) : r.error;
  if (r.ok()) {
    record_(d.job_id, absl::StrCat("webhook ", Shown(d.url), " (", d.event, "): delivered, ", answer,
                                   p.attempt > 1 ? absl::StrCat(" at try ", p.attempt) : ""));
    return;
  }
  if (!r.retryable() || p.attempt >= options_.max_attempts) {
    record_(d.job_id, absl::StrCat("webhook ", Shown(d.url), " (", d.event, "): not delivered after ", p.attempt,
                                   p.attempt == 1 ? " try" : " tries", ", last answer: ", answer));
    return;
  }
  const auto backoff = options_.first_backoff * (1 << std::min(p.attempt - 1, 10));
  spdlog::info("webhook {} ({}) for job {}: {}; trying again in {} ms", Shown(d.url), d.event, d.job_id, answer,
               backoff.count());
  absl::MutexLock lock(&mu_);
  if (stop_) return;
  p.due = std::chrono::steady_clock::now() + backoff;
  pending_.push_back(std::move(p));
}

}  // namespace trainyard
