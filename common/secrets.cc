#include "common/secrets.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <cctype>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/paths.h"

namespace trainyard {

std::string RandomHex(size_t bytes) {
  static thread_local std::random_device rd;
  static const char* kHex = "0123456789abcdef";
  std::string out;
  out.reserve(2 * bytes);
  for (size_t i = 0; i < bytes; ++i) {
    unsigned v = rd() & 0xff;
    out.push_back(kHex[v >> 4]);
    out.push_back(kHex[v & 15]);
  }
  return out;
}

std::string NewWorkerToken() { return RandomHex(16); }

bool ConstantTimeEquals(const std::string& a, const std::string& b) {
  const size_t n = a.size() > b.size() ? a.size() : b.size();
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path, const std::string& flag) {
  std::string token;
  if (!ReadFileToString(path, &token)) {
    return absl::FailedPreconditionError(absl::StrCat(flag, " ", path, ": cannot read it"));
  }
  while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) token.pop_back();
  if (token.size() < 16) {
    return absl::FailedPreconditionError(absl::StrCat(flag, " ", path, ": the token must have at least 16 characters"));
  }
  return token;
}

std::string HmacSha256(const std::string& key, const std::string& data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(data.data()),
       data.size(), out, &n);
  return std::string(reinterpret_cast<const char*>(out), n);
}

std::string RendezvousSecret(const std::string& token, const std::string& job_id, int32_t attempt) {
  return HmacSha256(token, absl::StrCat("trainyard-rendezvous/", job_id, "/", attempt));
}

}  // namespace trainyard
