// WebhookPost: one HTTP(S) POST of a notification, with libcurl: the JSON
// body, its headers, a deadline; no redirect is followed and no proxy from
// the environment is used (the operator's allow-list names the hosts that
// are called, not where they point). https verifies the peer against the
// system's CAs. Given an address, it connects there and nowhere else (the
// host's name still in the Host header and TLS), whatever the host
// resolves to meanwhile. Thread-safe (each call its own handle).
#ifndef TRAINYARD_SERVER_NOTIFY_WEBHOOK_POST_H_
#define TRAINYARD_SERVER_NOTIFY_WEBHOOK_POST_H_

#include <sys/socket.h>

#include <chrono>
#include <string>
#include <vector>

namespace trainyard {

struct PostResult {
  long http_status = 0;  // 0: no answer (error says why: for the server's log, not its users)
  std::string error;
  bool ok() const { return http_status >= 200 && http_status < 300; }
  // Worth another try: no answer, a server error, or 429.
  bool retryable() const { return http_status == 0 || http_status >= 500 || http_status == 429; }
};

// `connect_to` (AF_INET or AF_INET6, its port set): the address to connect
// to; null: the URL's host, as libcurl resolves it.
PostResult WebhookPost(const std::string& url, const std::string& body, const std::vector<std::string>& headers,
                       std::chrono::milliseconds timeout, const sockaddr* connect_to = nullptr);

// HMAC-SHA256 of `body` under `key`, as lower-case hex (GitHub's
// X-Hub-Signature-256 without its "sha256=").
std::string HmacSha256Hex(const std::string& key, const std::string& body);

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_NOTIFY_WEBHOOK_POST_H_
