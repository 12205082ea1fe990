// WebhookUrl: a URL the coordinator may POST a job's notifications to
// (the spec's `notify.urls`). Only http and https; no credentials in the
// URL (a secret belongs in the server's signing key, not in a spec others
// can read); a host; no whitespace or control characters.
//
// And the hosts a webhook may call. The local network is refused unless the
// operator names the host (--notify-allowed-host): loopback, link-local,
// private (RFC 1918), CGNAT (100.64/10), unique-local (fc00::/7), the
// unspecified, multicast and reserved addresses, the IPv4-mapped,
// -compatible, NAT64 and 6to4 forms of those, and the coordinator's own
// interface addresses. At submit, without DNS, an IP literal in any
// spelling inet_aton takes (127.1, 2130706433, 0x7f000001, 0177.0.0.1) and
// "localhost" / "*.localhost"; at delivery, every address the host
// resolves to (server/notify/notifier.h).
#ifndef TRAINYARD_COMMON_WEBHOOK_URL_H_
#define TRAINYARD_COMMON_WEBHOOK_URL_H_

#include <string>
#include <vector>

#include <sys/socket.h>

#include "absl/status/statusor.h"

namespace trainyard {

struct WebhookUrl {
  std::string scheme;  // http or https
  std::string host;    // lower case; an IPv6 address without its brackets
  int port = 0;        // 0: the scheme's
  std::string path;    // from the first '/', with the query ("/" when none)
};

// InvalidArgument saying what is wrong with `url` (without repeating a
// credential it may hold).
absl::StatusOr<WebhookUrl> ParseWebhookUrl(const std::string& url);

// Whether `host` is one of `allowed` (case-insensitive; "*.example.com"
// also allows its subdomains). Empty `allowed`: none.
bool WebhookHostListed(const std::string& host, const std::vector<std::string>& allowed);

// Whether a spec may name `host`, decided without DNS: OK when `allowed`
// lists it (a listed host may be on the local network: the operator said
// so); else InvalidArgument when `allowed` is not empty, or when `host` is
// a local-network address (LocalHostKind). The message starts "host <host>
// ...".
absl::Status CheckWebhookHost(const std::string& host, const std::vector<std::string>& allowed);

// CheckWebhookHost(...).ok().
bool WebhookHostAllowed(const std::string& host, const std::vector<std::string>& allowed);

// What kind of local-network address `host` (a URL's host, lower case, an
// IPv6 address without brackets) is without DNS — "loopback", "private",
// "link-local", ... — or "" when it is not one (a name other than
// localhost, or a public address). A trailing dot is ignored.
std::string LocalHostKind(const std::string& host);

// The same for a resolved address (AF_INET or AF_INET6; another family is
// "not IP"), the coordinator's own interface addresses included.
std::string LocalAddressKind(const sockaddr* address);

// The address of `address` as text (1.2.3.4, ::1).
std::string AddressText(const sockaddr* address);

// `url` as it may be shown to others: scheme://host[:port], nothing of its
// path or query (where receivers keep their tokens); "(a URL that does
// not parse)" when it does not.
std::string ShownWebhookUrl(const std::string& url);

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_WEBHOOK_URL_H_
