#include "common/webhook_url.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <cctype>
#include <cstdint>
#include <cstring>

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

bool WebhookHostListed(const std::string& host, const std::vector<std::string>& allowed) {
  const std::string h = absl::AsciiStrToLower(host);
  for (const std::string& a : allowed) {
    const std::string pattern = absl::AsciiStrToLower(a);
    if (h == pattern) return true;
    if (absl::StartsWith(pattern, "*.") && absl::EndsWith(h, pattern.substr(1))) return true;
  }
  return false;
}

absl::Status CheckWebhookHost(const std::string& host, const std::vector<std::string>& allowed) {
  if (WebhookHostListed(host, allowed)) return absl::OkStatus();
  if (!allowed.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("host ", host, " is not one this server calls (its --notify-allowed-host)"));
  }
  if (const std::string kind = LocalHostKind(host); !kind.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("host ", host, " is a ", kind,
                                                   " address of the local network, which this server does not call "
                                                   "(unless its --notify-allowed-host names the host)"));
  }
  return absl::OkStatus();
}

bool WebhookHostAllowed(const std::string& host, const std::vector<std::string>& allowed) {
  return CheckWebhookHost(host, allowed).ok();
}

namespace {

bool In4(uint32_t a, uint32_t net, int bits) { return bits == 0 || (a >> (32 - bits)) == (net >> (32 - bits)); }

// `a` in host order.
std::string Ipv4Kind(uint32_t a) {
  if (In4(a, 0x7f000000, 8)) return "loopback";
  if (In4(a, 0x00000000, 8)) return "unspecified";  // 0.0.0.0/8, "this network"
  if (In4(a, 0x0a000000, 8) || In4(a, 0xac100000, 12) || In4(a, 0xc0a80000, 16)) return "private";
  if (In4(a, 0x64400000, 10)) return "shared (CGNAT)";
  if (In4(a, 0xa9fe0000, 16)) return "link-local";
  if (In4(a, 0xc0000000, 24)) return "reserved";  // IETF protocol assignments
  if (In4(a, 0xe0000000, 4)) return "multicast";
  if (In4(a, 0xf0000000, 4)) return "reserved";  // and 255.255.255.255
  return "";
}

uint32_t V4At(const uint8_t* b) {
  return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | uint32_t{b[3]};
}

std::string Ipv6Kind(const uint8_t (&b)[16]) {
  static const uint8_t kZero[16] = {0};
  auto prefix = [&b](std::initializer_list<uint8_t> p) { return std::memcmp(b, p.begin(), p.size()) == 0; };
  if (std::memcmp(b, kZero, 16) == 0) return "unspecified";
  if (std::memcmp(b, kZero, 15) == 0 && b[15] == 1) return "loopback";
  if (std::memcmp(b, kZero, 10) == 0 && b[10] == 0xff && b[11] == 0xff) {  // ::ffff:a.b.c.d, mapped
    return Ipv4Kind(V4At(b + 12));
  }
  if (std::memcmp(b, kZero, 12) == 0) return Ipv4Kind(V4At(b + 12));  // ::a.b.c.d, compatible
  if (std::memcmp(b, kZero, 8) == 0 && b[8] == 0xff && b[9] == 0xff && b[10] == 0 && b[11] == 0) {
    return Ipv4Kind(V4At(b + 12));  // ::ffff:0:a.b.c.d, translated
  }
  if (prefix({0x00, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0})) return Ipv4Kind(V4At(b + 12));  // NAT64
  if (prefix({0x20, 0x02})) return Ipv4Kind(V4At(b + 2));                                       // 6to4
  if ((b[0] & 0xfe) == 0xfc) return "unique-local";
  if (b[0] == 0xfe && (b[1] & 0xc0) == 0x80) return "link-local";
  if (b[0] == 0xfe && (b[1] & 0xc0) == 0xc0) return "site-local";
  if (b[0] == 0xff) return "multicast";
  return "";
}

// Whether `address` is one of this machine's interfaces'.
bool OwnAddress(const sockaddr* address) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return false;
  bool own = false;
  for (ifaddrs* i = list; i != nullptr && !own; i = i->ifa_next) {
    const sockaddr* a = i->ifa_addr;
    if (a == nullptr || a->sa_family != address->sa_family) continue;
    if (a->sa_family == AF_INET) {
      own = reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr ==
            reinterpret_cast<const sockaddr_in*>(address)->sin_addr.s_addr;
    } else if (a->sa_family == AF_INET6) {
      own = std::memcmp(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr,
                        &reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr, sizeof(in6_addr)) == 0;
    }
  }
  freeifaddrs(list);
  return own;
}

}  // namespace

std::string LocalAddressKind(const sockaddr* address) {
  std::string kind;
  if (address->sa_family == AF_INET) {
    kind = Ipv4Kind(ntohl(reinterpret_cast<const sockaddr_in*>(address)->sin_addr.s_addr));
  } else if (address->sa_family == AF_INET6) {
    uint8_t b[16];
    std::memcpy(b, &reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr, 16);
    kind = Ipv6Kind(b);
  } else {
    return "not IP";
  }
  if (kind.empty() && OwnAddress(address)) kind = "this server's own";
  return kind;
}

std::string LocalHostKind(const std::string& host) {
  std::string h = absl::AsciiStrToLower(host);
  if (!h.empty() && h.back() == '.') h.pop_back();
  if (h == "localhost" || absl::EndsWith(h, ".localhost")) return "loopback";
  sockaddr_in v4{};
  v4.sin_family = AF_INET;
  // inet_aton: every spelling getaddrinfo takes (127.1, 2130706433,
  // 0x7f000001, 0177.0.0.1).
  if (inet_aton(h.c_str(), &v4.sin_addr) != 0) return LocalAddressKind(reinterpret_cast<const sockaddr*>(&v4));
  sockaddr_in6 v6{};
  v6.sin6_family = AF_INET6;
  if (inet_pton(AF_INET6, h.c_str(), &v6.sin6_addr) == 1) {
    return LocalAddressKind(reinterpret_cast<const sockaddr*>(&v6));
  }
  return "";
}

std::string AddressText(const sockaddr* address) {
  char text[INET6_ADDRSTRLEN] = {0};
  if (address->sa_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(address)->sin_addr, text, sizeof(text));
  } else if (address->sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr, text, sizeof(text));
  }
  return text;
}

std::string ShownWebhookUrl(const std::string& url) {
  auto u = ParseWebhookUrl(url);
  if (!u.ok()) return "(a URL that does not parse)";
  const std::string host = u->host.find(':') != std::string::npos ? absl::StrCat("[", u->host, "]") : u->host;
  return absl::StrCat(u->scheme, "://", host, u->port != 0 ? absl::StrCat(":", u->port) : "");
}

}  // namespace trainyard
