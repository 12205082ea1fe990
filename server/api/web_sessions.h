// WebSessions: who is signed in to the web UI. Signing in with a token opens
// a session: a random id the browser keeps in an HttpOnly cookie, and a
// CSRF token the page sends back in a header with every request. The token
// itself stays here and is checked again at every request (a token the
// policy revoked stops working at once). Sessions end after `ttl`, when
// signed out, and — past kMaxSessions — oldest first.
//
// Failed sign-ins are counted to slow guessing: the caller checks a token
// first, and only a wrong one is counted here and, past a limit, refused.
// A right token is never refused for what others got wrong — from the same
// address (a shared host, the TLS proxy in front of the UI) or from any.
//
// Thread-safe. Torch- and gRPC-free.
#ifndef TRAINYARD_SERVER_API_WEB_SESSIONS_H_
#define TRAINYARD_SERVER_API_WEB_SESSIONS_H_

#include <chrono>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"

namespace trainyard {

class WebSessions {
 public:
  static constexpr size_t kMaxSessions = 10000;

  struct Session {
    std::string id;     // the cookie's value: 256 random bits, hex
    std::string csrf;   // the header's: 256 random bits, hex
    std::string token;  // what the user signed in with
    TimeSource::Steady expires{};
  };

  // `clock` must outlive this.
  explicit WebSessions(std::chrono::seconds ttl, const TimeSource* clock = TimeSource::Real());

  Session Open(const std::string& token);
  // The session of cookie value `id`, if it has not ended.
  std::optional<Session> Find(const std::string& id);
  void Close(const std::string& id);

  // Whether `given` is the session's CSRF token (in constant time).
  static bool CsrfMatches(const Session& s, const std::string& given);

  // Wrong tokens counted a minute: per client address, and from all
  // addresses together (many addresses do not get many allowances; and
  // with at most that many counted, no address's count is ever dropped to
  // make room for another's).
  static constexpr int kMaxFailedSignIns = 10;
  static constexpr int kMaxFailedSignInsAll = 100;

  struct SignInFailure {
    // Zero: the failure was counted (answer 401). Else it was not: the
    // address, or everyone (`everyone`), reached its limit in the last
    // minute, and may be counted again after this long (answer 429).
    std::chrono::seconds wait{0};
    bool everyone = false;
    int from_address = 0;  // the address's failures in the last minute
  };
  // A wrong token from `address`.
  SignInFailure FailedSignIn(const std::string& address);

 private:
  const std::chrono::seconds ttl_;
  const TimeSource* const clock_;
  absl::Mutex mu_;
  std::map<std::string, Session> sessions_ ABSL_GUARDED_BY(mu_);
  // Per address, when its failed sign-ins of the last minute were; and
  // everyone's (at most kMaxFailedSignInsAll in all).
  std::map<std::string, std::vector<TimeSource::Steady>> failures_ ABSL_GUARDED_BY(mu_);
  std::deque<TimeSource::Steady> all_failures_ ABSL_GUARDED_BY(mu_);
  void ForgetOldFailures(TimeSource::Steady now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
};

// 32 random bytes from the kernel, as 64 hex digits.
std::string RandomHex32();

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_API_WEB_SESSIONS_H_
