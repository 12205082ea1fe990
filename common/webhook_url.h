// WebhookUrl: a URL the coordinator may POST a job's notifications to
// (the spec's `notify.urls`). Only http and https; no credentials in the
// URL (a secret belongs in the server's signing key, not in a spec others
// can read); a host; no whitespace or control characters.
#ifndef TRAINYARD_COMMON_WEBHOOK_URL_H_
#define TRAINYARD_COMMON_WEBHOOK_URL_H_

#include <string>
#include <vector>

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
// also allows its subdomains). Empty `allowed`: every host.
bool WebhookHostAllowed(const std::string& host, const std::vector<std::string>& allowed);

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_WEBHOOK_URL_H_
