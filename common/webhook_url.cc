#include "common/webhook_url.h"

#include <cctype>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace trainyard {

absl::StatusOr<WebhookUrl> ParseWebhookUrl(const std::string& url) {
  if (url.size() > 2048) return absl::InvalidArgumentError("longer than 2048 characters");
  for (unsigned char c : url) {
    if (c <= 0x20 || c == 0x7f) return absl::InvalidArgumentError("has whitespace or a control character");
  }
  WebhookUrl out;
  const size_t colon = url.find("://");
  if (colon == std::string::npos) return absl::InvalidArgumentError("must start with http:// or https://");
  out.scheme = absl::AsciiStrToLower(url.substr(0, colon));
  if (out.scheme != "http" && out.scheme != "https") {
    return absl::InvalidArgumentError(absl::StrCat("scheme ", out.scheme, ": only http and https"));
  }
  const size_t start = colon + 3;
  size_t end = url.find_first_of("/?#", start);
  if (end == std::string::npos) end = url.size();
  std::string authority = url.substr(start, end - start);
  if (authority.find('@') != std::string::npos) {
    return absl::InvalidArgumentError("must not hold credentials (user:password@): the server signs its requests");
  }
  std::string port;
  if (absl::StartsWith(authority, "[")) {
    const size_t close = authority.find(']');
    if (close == std::string::npos) return absl::InvalidArgumentError("an IPv6 host without its ']'");
    out.host = authority.substr(1, close - 1);
    if (close + 1 < authority.size()) {
      if (authority[close + 1] != ':') return absl::InvalidArgumentError("junk after the IPv6 host");
      port = authority.substr(close + 2);
    }
  } else {
    const size_t c = authority.rfind(':');
    out.host = authority.substr(0, c);
    if (c != std::string::npos) port = authority.substr(c + 1);
  }
  out.host = absl::AsciiStrToLower(out.host);
  if (out.host.empty()) return absl::InvalidArgumentError("has no host");
  for (char ch : out.host) {
    if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '.' || ch == '-' || ch == ':' || ch == '_')) {
      return absl::InvalidArgumentError(absl::StrCat("host ", out.host, ": not a host name or address"));
    }
  }
  if (!port.empty() && (!absl::SimpleAtoi(port, &out.port) || out.port < 1 || out.port > 65535)) {
    return absl::InvalidArgumentError(absl::StrCat("port ", port, ": must be 1 … 65535"));
  }
  out.path = end < url.size() ? url.substr(end) : "/";
  if (const size_t hash = out.path.find('#'); hash != std::string::npos) out.path.resize(hash);
  if (out.path.empty() || out.path[0] != '/') out.path = "/" + out.path;
  return out;
}

bool WebhookHostAllowed(const std::string& host, const std::vector<std::string>& allowed) {
  if (allowed.empty()) return true;
  const std::string h = absl::AsciiStrToLower(host);
  for (const std::string& a : allowed) {
    const std::string pattern = absl::AsciiStrToLower(a);
    if (h == pattern) return true;
    if (absl::StartsWith(pattern, "*.") && absl::EndsWith(h, pattern.substr(1))) return true;
  }
  return false;
}

}  // namespace trainyard
