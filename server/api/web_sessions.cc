#include "server/api/web_sessions.h"

#include <sys/random.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>

namespace trainyard {

std::string RandomHex32() {
  unsigned char bytes[32];
  size_t got = 0;
  while (got < sizeof bytes) {
    const ssize_t n = getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0) throw std::runtime_error("getrandom failed");  // only without a kernel RNG: nothing to do then
    got += static_cast<size_t>(n);
  }
  std::string out(64, '0');
  static constexpr char kHex[] = "0123456789abcdef";
  for (size_t i = 0; i < sizeof bytes; ++i) {
    out[2 * i] = kHex[bytes[i] >> 4];
    out[2 * i + 1] = kHex[bytes[i] & 15];
  }
  return out;
}

WebSessions::WebSessions(std::chrono::seconds ttl, const TimeSource* clock) : ttl_(ttl), clock_(clock) {}

WebSessions::Session WebSessions::Open(const std::string& token) {
  Session s{RandomHex32(), RandomHex32(), token, clock_->SteadyNow() + ttl_};
  absl::MutexLock lock(&mu_);
  const auto now = clock_->SteadyNow();
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    it = it->second.expires <= now ? sessions_.erase(it) : std::next(it);
  }
  while (sessions_.size() >= kMaxSessions) {
    auto oldest = sessions_.begin();
    for (auto it = sessions_.begin(); it != sessions_.end(); ++it) {
      if (it->second.expires < oldest->second.expires) oldest = it;
    }
    sessions_.erase(oldest);
  }
  sessions_[s.id] = s;
  return s;
}

std::optional<WebSessions::Session> WebSessions::Find(const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return std::nullopt;
  if (it->second.expires <= clock_->SteadyNow()) {
    sessions_.erase(it);
    return std::nullopt;
  }
  return it->second;
}

void WebSessions::Close(const std::string& id) {
  absl::MutexLock lock(&mu_);
  sessions_.erase(id);
}

void WebSessions::ForgetOldFailures(TimeSource::Steady now) {
  auto old = [&](TimeSource::Steady t) { return now - t >= std::chrono::minutes(1); };
  for (auto it = failures_.begin(); it != failures_.end();) {
    std::vector<TimeSource::Steady>& times = it->second;
    std::erase_if(times, old);
    it = times.empty() ? failures_.erase(it) : std::next(it);
  }
  while (!all_failures_.empty() && old(all_failures_.front())) all_failures_.pop_front();
}

WebSessions::SignInFailure WebSessions::FailedSignIn(const std::string& address) {
  absl::MutexLock lock(&mu_);
  const TimeSource::Steady now = clock_->SteadyNow();
  ForgetOldFailures(now);
  auto until_a_minute_after = [&](TimeSource::Steady t) {
    return std::max(std::chrono::seconds(1),
                    std::chrono::ceil<std::chrono::seconds>(t + std::chrono::minutes(1) - now));
  };
  SignInFailure out;
  auto it = failures_.find(address);
  out.from_address = it == failures_.end() ? 0 : static_cast<int>(it->second.size());
  if (out.from_address >= kMaxFailedSignIns) out.wait = until_a_minute_after(it->second.front());
  if (static_cast<int>(all_failures_.size()) >= kMaxFailedSignInsAll) {
    const std::chrono::seconds everyone = until_a_minute_after(all_failures_.front());
    if (everyone > out.wait) {
      out.wait = everyone;
      out.everyone = true;
    }
  }
  if (out.wait.count() > 0) return out;
  failures_[address].push_back(now);
  all_failures_.push_back(now);
  ++out.from_address;
  return out;
}

bool WebSessions::CsrfMatches(const Session& s, const std::string& given) {
  if (given.size() != s.csrf.size() || s.csrf.empty()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < given.size(); ++i) diff |= static_cast<unsigned char>(given[i] ^ s.csrf[i]);
  return diff == 0;
}

}  // namespace trainyard
