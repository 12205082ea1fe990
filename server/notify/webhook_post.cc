#include "server/notify/webhook_post.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <cstring>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "common/webhook_url.h"

namespace trainyard {
namespace {

size_t Discard(char*, size_t size, size_t n, void*) { return size * n; }

// The one address libcurl may open a socket to (CURLOPT_OPENSOCKETFUNCTION):
// what CURLOPT_CONNECT_TO named, checked again where the socket is made.
struct Pin {
  const sockaddr* address;
  bool refused = false;
};

bool SameAddress(const sockaddr* a, const sockaddr* b) {
  if (a->sa_family != b->sa_family) return false;
  if (a->sa_family == AF_INET) {
    const auto* x = reinterpret_cast<const sockaddr_in*>(a);
    const auto* y = reinterpret_cast<const sockaddr_in*>(b);
    return x->sin_addr.s_addr == y->sin_addr.s_addr && x->sin_port == y->sin_port;
  }
  if (a->sa_family == AF_INET6) {
    const auto* x = reinterpret_cast<const sockaddr_in6*>(a);
    const auto* y = reinterpret_cast<const sockaddr_in6*>(b);
    return std::memcmp(&x->sin6_addr, &y->sin6_addr, sizeof(in6_addr)) == 0 && x->sin6_port == y->sin6_port;
  }
  return false;
}

curl_socket_t OpenPinned(void* clientp, curlsocktype purpose, curl_sockaddr* address) {
  Pin* pin = static_cast<Pin*>(clientp);
  if (purpose != CURLSOCKTYPE_IPCXN || !SameAddress(&address->addr, pin->address)) {
    pin->refused = true;
    return CURL_SOCKET_BAD;
  }
  return socket(address->family, address->socktype, address->protocol);
}

int PortOf(const sockaddr* a) {
  return ntohs(a->sa_family == AF_INET ? reinterpret_cast<const sockaddr_in*>(a)->sin_port
                                       : reinterpret_cast<const sockaddr_in6*>(a)->sin6_port);
}

void InitCurlOnce() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

}  // namespace

PostResult WebhookPost(const std::string& url, const std::string& body, const std::vector<std::string>& headers,
                       std::chrono::milliseconds timeout, const sockaddr* connect_to) {
  InitCurlOnce();
  PostResult out;
  CURL* curl = curl_easy_init();
  if (curl == nullptr) {
    out.error = "cannot make a libcurl handle";
    return out;
  }
  curl_slist* list = nullptr;
  for (const std::string& h : headers) list = curl_slist_append(list, h.c_str());
  char error[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(curl, CURLOPT_POST, 1L);
  curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.data());
  curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, list);
  curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(curl, CURLOPT_PROXY, "");  // not the environment's
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, static_cast<long>(timeout.count()));
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(timeout.count()));
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, Discard);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(curl, CURLOPT_USERAGENT, "trainyard-webhook/1");
  // Any host and port of this URL connects to `connect_to`: "::HOST:PORT".
  curl_slist* connect = nullptr;
  Pin pin{connect_to};
  if (connect_to != nullptr) {
    const std::string ip = AddressText(connect_to);
    const std::string entry = absl::StrCat("::", connect_to->sa_family == AF_INET6 ? absl::StrCat("[", ip, "]") : ip,
                                           ":", PortOf(connect_to));
    connect = curl_slist_append(connect, entry.c_str());
    curl_easy_setopt(curl, CURLOPT_CONNECT_TO, connect);
    curl_easy_setopt(curl, CURLOPT_OPENSOCKETFUNCTION, OpenPinned);
    curl_easy_setopt(curl, CURLOPT_OPENSOCKETDATA, &pin);
  }
  const CURLcode rc = curl_easy_perform(curl);
  if (rc == CURLE_OK) {
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &out.http_status);
  } else {
    out.error = error[0] != '\0' ? error : curl_easy_strerror(rc);
    if (pin.refused)
      out.error = absl::StrCat("refused to connect elsewhere than ", AddressText(connect_to), ": ", out.error);
  }
  curl_slist_free_all(connect);
  curl_slist_free_all(list);
  curl_easy_cleanup(curl);
  return out;
}

std::string HmacSha256Hex(const std::string& key, const std::string& body) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(body.data()),
       body.size(), mac, &len);
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out.push_back(kHex[mac[i] >> 4]);
    out.push_back(kHex[mac[i] & 15]);
  }
  return out;
}

}  // namespace trainyard
