#include "server/notify/notifier.h"

#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/webhook_url.h"
#include "server/notify/webhook_post.h"
#include "spdlog/spdlog.h"

namespace trainyard {
namespace {

// What users are told of an answer: its class, or none. The details (which
// could tell a scanner what listens where) go to the server's log.
std::string Answer(const PostResult& r) {
  return r.http_status > 0 ? absl::StrCat("HTTP ", r.http_status / 100, "xx") : "no answer";
}

std::string Detail(const PostResult& r) { return r.http_status > 0 ? absl::StrCat("HTTP ", r.http_status) : r.error; }

// The addresses `host` resolves to, for `port`; an error says why none.
absl::StatusOr<std::vector<sockaddr_storage>> Resolve(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &list); rc != 0) {
    return absl::UnavailableError(absl::StrCat("cannot resolve ", host, ": ", gai_strerror(rc)));
  }
  std::vector<sockaddr_storage> out;
  for (addrinfo* a = list; a != nullptr; a = a->ai_next) {
    if (a->ai_addrlen > sizeof(sockaddr_storage)) continue;
    sockaddr_storage s{};
    std::memcpy(&s, a->ai_addr, a->ai_addrlen);
    out.push_back(s);
  }
  freeaddrinfo(list);
  if (out.empty()) return absl::UnavailableError(absl::StrCat("cannot resolve ", host, ": no address"));
  return out;
}

const sockaddr* Sa(const sockaddr_storage& s) { return reinterpret_cast<const sockaddr*>(&s); }

}  // namespace

Notifier::Notifier(NotifierOptions options, Record record) : options_(std::move(options)), record_(std::move(record)) {}

Notifier::~Notifier() { Stop(); }

void Notifier::Start() {
  for (int i = 0; i < std::max(1, options_.threads); ++i) threads_.emplace_back([this] { Run(); });
}

void Notifier::Stop() {
  std::vector<Pending> dropped;
  {
    absl::MutexLock lock(&mu_);
    if (stop_) return;
    stop_ = true;
    for (auto& [key, q] : queues_) {
      for (Pending& p : q.pending) dropped.push_back(std::move(p));
      q.pending.clear();
      if (q.limited > 0) {
        spdlog::warn("policy webhooks of {}'s jobs: {} more dropped, past the rate limit", q.owner, q.limited);
      }
    }
    total_pending_ = 0;
  }
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  for (const Pending& p : dropped) Report(p.d, "not delivered, the server stopped before it could");
}

void Notifier::Report(const WebhookDelivery& d, const std::string& text) {
  const std::string shown = ShownWebhookUrl(d.url);
  if (d.from_policy) {
    // The operator's URL (its path may hold a secret) and its outcome are
    // no user's business.
    spdlog::info("policy webhook {} ({}) for {}: {}", shown, d.event, d.job_id, text);
    return;
  }
  record_(d.job_id, absl::StrCat("webhook ", shown, " (", d.event, "): ", text));
}

bool Notifier::Enqueue(const std::string& owner, WebhookDelivery d) {
  std::string dropped;
  {
    absl::MutexLock lock(&mu_);
    const std::string key = absl::StrCat(d.from_policy ? "p:" : "u:", owner);
    auto [it, added] = queues_.try_emplace(key);
    Queue& q = it->second;
    const auto now = std::chrono::steady_clock::now();
    if (added) {
      q.owner = owner;
      q.policy = d.from_policy;
      q.tokens = options_.policy_burst;
      q.refilled = now;
    }
    if (stop_) {
      dropped = "dropped, the server is stopping";
    } else if (q.pending.size() >= options_.max_pending_per_owner) {
      dropped = absl::StrCat("dropped, ", q.pending.size(), " deliveries of ", owner.empty() ? "this user" : owner,
                             "'s are waiting already");
    } else if (total_pending_ >= options_.max_pending) {
      dropped = absl::StrCat("dropped, ", total_pending_, " deliveries are waiting already");
    } else if (q.policy) {
      const double refill = std::max<int64_t>(1, options_.policy_refill.count());
      q.tokens =
          std::min<double>(options_.policy_burst,
                           q.tokens + std::chrono::duration<double, std::milli>(now - q.refilled).count() / refill);
      q.refilled = now;
      if (q.tokens < 1) {
        // One line when a burst starts being dropped, one with its count
        // when deliveries go through again.
        if (q.limited++ == 0) {
          spdlog::warn("policy webhooks of {}'s jobs: more than {} at once (then one per {} ms); dropping the rest",
                       owner, options_.policy_burst, options_.policy_refill.count());
        }
        return false;
      }
      q.tokens -= 1;
      if (q.limited > 0) {
        spdlog::warn("policy webhooks of {}'s jobs: {} dropped, past the rate limit", owner, q.limited);
        q.limited = 0;
      }
    }
    if (dropped.empty()) {
      q.pending.push_back({std::move(d), 0, now});
      ++total_pending_;
      ++changes_;
      return true;
    }
  }
  Report(d, dropped);
  return false;
}

void Notifier::Run() {
  for (;;) {
    Pending p;
    std::string key;
    {
      absl::MutexLock lock(&mu_);
      for (;;) {
        if (stop_) return;
        // Round-robin: the first queue after the one served last with a
        // delivery due and none in flight.
        const auto now = std::chrono::steady_clock::now();
        auto next = now + std::chrono::seconds(1);
        auto it = queues_.upper_bound(last_served_);
        for (size_t n = 0; n < queues_.size(); ++n, ++it) {
          if (it == queues_.end()) it = queues_.begin();
          Queue& q = it->second;
          if (q.in_flight || q.pending.empty()) continue;
          auto due = std::min_element(q.pending.begin(), q.pending.end(),
                                      [](const Pending& a, const Pending& b) { return a.due < b.due; });
          if (due->due <= now) {
            p = std::move(*due);
            q.pending.erase(due);
            q.in_flight = true;
            --total_pending_;
            key = last_served_ = it->first;
            break;
          }
          next = std::min(next, due->due);
        }
        if (!key.empty()) break;
        // Until the next one is due, one is queued or done, or Stop.
        const uint64_t seen = changes_;
        auto changed = [this, seen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || changes_ != seen; };
        mu_.AwaitWithTimeout(absl::Condition(&changed), absl::FromChrono(next - now));
      }
    }
    const bool again = !Deliver(p);
    absl::MutexLock lock(&mu_);
    Queue& q = queues_.at(key);
    q.in_flight = false;
    ++changes_;
    if (again && !stop_) {
      const auto backoff = options_.first_backoff * (1 << std::min(p.attempt - 1, 10));
      p.due = std::chrono::steady_clock::now() + backoff;
      q.pending.push_back(std::move(p));
      ++total_pending_;
    }
  }
}

bool Notifier::Deliver(Pending& p) {
  const WebhookDelivery& d = p.d;
  const std::string shown = ShownWebhookUrl(d.url);
  auto url = ParseWebhookUrl(d.url);
  if (!url.ok()) {
    Report(d, "refused, not a URL this server calls");
    return true;
  }
  // The policy's URLs are the operator's, who may call the local network
  // (as GitLab's system hooks may): the allow-list alone applies.
  const bool listed = d.from_policy || WebhookHostListed(url->host, options_.allowed_hosts);
  if (absl::Status s = CheckWebhookHost(url->host, options_.allowed_hosts);
      !s.ok() && !(d.from_policy && options_.allowed_hosts.empty())) {
    spdlog::info("webhook {} ({}) for {}: refused, {}", shown, d.event, d.job_id, std::string(s.message()));
    Report(d, options_.allowed_hosts.empty() ? "refused, its host is an address of the local network"
                                             : "refused, its host is not in the server's --notify-allowed-host");
    return true;
  }
  ++p.attempt;
  // Resolved here, checked, and that address is the one connected to.
  const int port = url->port != 0 ? url->port : (url->scheme == "https" ? 443 : 80);
  auto addresses = Resolve(url->host, port);
  PostResult r;
  if (!addresses.ok()) {
    r.error = std::string(addresses.status().message());
  } else {
    if (!listed) {
      for (const sockaddr_storage& a : *addresses) {
        if (const std::string kind = LocalAddressKind(Sa(a)); !kind.empty()) {
          spdlog::info("webhook {} ({}) for {}: refused, {} resolves to {}, a {} address", shown, d.event, d.job_id,
                       url->host, AddressText(Sa(a)), kind);
          Report(d, "refused, its host resolves to an address of the local network");
          return true;
        }
      }
    }
    std::vector<std::string> headers = {"Content-Type: application/json", "X-Trainyard-Event: " + d.event,
                                        "X-Trainyard-Delivery: " + d.id};
    if (!options_.secret.empty()) {
      headers.push_back("X-Trainyard-Signature-256: sha256=" + HmacSha256Hex(options_.secret, d.body));
    }
    r = WebhookPost(d.url, d.body, headers, options_.timeout, Sa(addresses->front()));
  }
  const std::string tries = p.attempt > 1 ? absl::StrCat(" at try ", p.attempt) : "";
  if (r.ok()) {
    Report(d, absl::StrCat("delivered, ", Answer(r), tries));
    return true;
  }
  if (!r.retryable() || p.attempt >= options_.max_attempts) {
    spdlog::info("webhook {} ({}) for {}: not delivered after {} {}, last answer: {}", shown, d.event, d.job_id,
                 p.attempt, p.attempt == 1 ? "try" : "tries", Detail(r));
    Report(d, absl::StrCat("not delivered after ", p.attempt, p.attempt == 1 ? " try" : " tries",
                           ", last answer: ", Answer(r)));
    return true;
  }
  spdlog::info("webhook {} ({}) for {}: {}; trying again", shown, d.event, d.job_id, Detail(r));
  return false;
}

}  // namespace trainyard
