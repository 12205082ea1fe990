#include "common/placement.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>

namespace trainyard {

std::string FirstSlurmHost(const std::string& hostlist) {
  std::string out;
  size_t i = 0;
  while (i < hostlist.size() && hostlist[i] != ',' && hostlist[i] != '[') out += hostlist[i++];
  if (i < hostlist.size() && hostlist[i] == '[') {
    ++i;
    while (i < hostlist.size() && hostlist[i] != '-' && hostlist[i] != ',' && hostlist[i] != ']') out += hostlist[i++];
    // A suffix after the bracket ("n[1-2]-ib") belongs to every host.
    const size_t close = hostlist.find(']', i);
    if (close != std::string::npos) {
      for (size_t j = close + 1; j < hostlist.size() && hostlist[j] != ','; ++j) out += hostlist[j];
    }
  }
  return out;
}

namespace {

std::optional<int> IntFromEnv(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (*end != '\0' || n < 0 || n > (1 << 20)) return std::nullopt;
  return static_cast<int>(n);
}

}  // namespace

std::optional<int> RankFromEnvironment(std::string* source) {
  for (const char* name : {"TRAINYARD_RANK", "SLURM_PROCID", "RANK", "JOB_COMPLETION_INDEX"}) {
    if (auto v = IntFromEnv(name)) {
      if (source) *source = name;
      return v;
    }
  }
  return std::nullopt;
}

int LocalRankFromEnvironment() {
  for (const char* name : {"LOCAL_RANK", "SLURM_LOCALID"}) {
    if (auto v = IntFromEnv(name)) return *v;
  }
  return 0;
}

std::string RendezvousHostFromEnvironment() {
  for (const char* name : {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"}) {
    const char* v = std::getenv(name);
    if (v != nullptr && *v != '\0') return FirstSlurmHost(v);
  }
  const char* m = std::getenv("MASTER_ADDR");
  return m == nullptr ? "" : m;
}

std::string NodeName() {
  if (const char* slurm = std::getenv("SLURMD_NODENAME"); slurm != nullptr && *slurm != '\0') return slurm;
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) return "";
  return host;
}

std::string LocalAddressToward(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), "9", &hints, &res) != 0 || res == nullptr) return "";
  std::string out;
  for (addrinfo* a = res; a != nullptr && out.empty(); a = a->ai_next) {
    const int fd = socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      char buf[INET6_ADDRSTRLEN] = {0};
      const void* src = local.ss_family == AF_INET
                            ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr)
                            : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr);
      if (inet_ntop(local.ss_family, src, buf, sizeof(buf)) != nullptr) out = buf;
    }
    close(fd);
  }
  freeaddrinfo(res);
  return out;
}

std::string HostPart(const std::string& host_port) {
  if (!host_port.empty() && host_port[0] == '[') {
    const size_t close = host_port.find(']');
    return close == std::string::npos ? host_port : host_port.substr(1, close - 1);
  }
  const size_t colon = host_port.rfind(':');
  if (colon == std::string::npos || host_port.find(':') != colon) return host_port;  // no port, or bare IPv6
  return host_port.substr(0, colon);
}

bool IsLoopback(const std::string& host) { return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1"; }

PortRange EphemeralPortRange() {
  PortRange r{32768, 60999};
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0, high = 0;
  if (in >> low >> high && low > 0 && high >= low && high <= 65535) r = {low, high};
  return r;
}

PortRange ListeningPortRange(PortRange ephemeral) {
  constexpr int kLowest = 10000;
  const PortRange below{kLowest, ephemeral.low - 1};
  const PortRange above{std::max(kLowest, ephemeral.high + 1), 65535};
  const auto size = [](const PortRange& r) { return r.high < r.low ? 0 : r.high - r.low + 1; };
  return size(below) >= size(above) ? below : above;
}

namespace {

// Binds `port` (0: the kernel picks) on `bind_addr` without SO_REUSEADDR, so
// that a port in TIME_WAIT counts as taken; the port bound, or 0.
int TryBind(const std::string& bind_addr, int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, bind_addr.c_str(), &a.sin_addr) != 1) a.sin_addr.s_addr = htonl(INADDR_ANY);
  int bound = 0;
  socklen_t len = sizeof(a);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    bound = ntohs(a.sin_port);
  }
  close(fd);
  return bound;
}

}  // namespace

int PickFreePortOn(const std::string& bind_addr, const std::set<int>& avoid) {
  const PortRange range = ListeningPortRange(EphemeralPortRange());
  if (range.high >= range.low) {
    thread_local std::mt19937 draw{std::random_device{}()};
    std::uniform_int_distribution<int> port(range.low, range.high);
    for (int tries = 0; tries < 64; ++tries) {
      const int p = port(draw);
      if (avoid.count(p) == 0 && TryBind(bind_addr, p) > 0) return p;
    }
  }
  for (int tries = 0; tries < 64; ++tries) {
    if (const int p = TryBind(bind_addr, 0); p > 0 && avoid.count(p) == 0) return p;
  }
  return 0;
}

}  // namespace trainyard
