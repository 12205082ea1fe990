// WebSessions: who is signed in to the web UI. Signing in with a token opens
// a session: a random id the browser keeps in an HttpOnly cookie, and a
// CSRF token the page sends back in a header with every request. The token
// itself stays here and is checked again at every request (a token the
// policy revoked stops working at once). Sessions end after `ttl`, when
// signed out, and — past kMaxSessions — oldest first.
//
// Thread-safe. Torch- and gRPC-free.
#ifndef TRAINYARD_SERVER_API_WEB_SESSIONS_H_
#define TRAINYARD_SERVER_API_WEB_SESSIONS_H_

#include <chrono>
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

  // Failed sign-ins, per client address: after kMaxFailedSignIns within a
  // minute, that address may not try again until the oldest is a minute
  // old. How long it must wait (zero: it may try now).
  static constexpr int kMaxFailedSignIns = 10;
  std::chrono::seconds SignInWait(const std::string& address);
  // Counts a failed sign-in from `address`; returns how many it made in the
  // last minute.
  int FailedSignIn(const std::string& address);

 private:
  const std::chrono::seconds ttl_;
  const TimeSource* const clock_;
  absl::Mutex mu_;
  std::map<std::string, Session> sessions_ ABSL_GUARDED_BY(mu_);
  // Per address, when its failed sign-ins of the last minute were.
  std::map<std::string, std::vector<TimeSource::Steady>> failures_ ABSL_GUARDED_BY(mu_);
  void ForgetOldFailures(TimeSource::Steady now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
};

// 32 random bytes from the kernel, as 64 hex digits.
std::string RandomHex32();

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_API_WEB_SESSIONS_H_
