#include "worker/collectives/signed_store.h"

#include <cstring>

#include "common/secrets.h"

namespace trainyard {
namespace {

constexpr size_t kTag = 32;  // HMAC-SHA256

std::string TagOf(const std::string& secret, const std::string& key, const uint8_t* value, size_t size) {
  std::string data = key;
  data.push_back('\0');  // the key ends here: ("ab", "c") and ("a", "bc") differ
  data.append(reinterpret_cast<const char*>(value), size);
  return HmacSha256(secret, data);
}

}  // namespace

SignedStore::SignedStore(c10::intrusive_ptr<c10d::Store> inner, std::string secret)
    : ForwardingStore(std::move(inner)), secret_(std::move(secret)) {}

c10::intrusive_ptr<c10d::Store> SignedStore::clone() {
  return c10::make_intrusive<SignedStore>(inner()->clone(), secret_);
}

std::vector<uint8_t> SignedStore::Signed(const std::string& key, const std::vector<uint8_t>& value) const {
  std::vector<uint8_t> out = value;
  const std::string tag = TagOf(secret_, key, value.data(), value.size());
  out.insert(out.end(), tag.begin(), tag.end());
  return out;
}

std::vector<uint8_t> SignedStore::Verified(const std::string& key, const std::vector<uint8_t>& stored) const {
  const std::string forged = "the rendezvous store's value of '" + key +
                             "' was not written by a rank of this attempt (it lacks the attempt's signature): "
                             "someone else wrote to the job's store";
  if (stored.size() < kTag) throw ForgedStoreValue(forged);
  const size_t size = stored.size() - kTag;
  const std::string want = TagOf(secret_, key, stored.data(), size);
  unsigned char diff = 0;
  for (size_t i = 0; i < kTag; ++i) diff |= static_cast<unsigned char>(want[i]) ^ stored[size + i];
  if (diff != 0) throw ForgedStoreValue(forged);
  return std::vector<uint8_t>(stored.begin(), stored.begin() + static_cast<std::ptrdiff_t>(size));
}

void SignedStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  inner()->set(key, Signed(key, value));
}

std::vector<uint8_t> SignedStore::compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                             const std::vector<uint8_t>& desired) {
  // An empty `expected` means "not set yet" to the store: it stays empty.
  const std::vector<uint8_t> now =
      inner()->compareSet(key, expected.empty() ? expected : Signed(key, expected), Signed(key, desired));
  return now.empty() ? now : Verified(key, now);
}

std::vector<uint8_t> SignedStore::get(const std::string& key) { return Verified(key, inner()->get(key)); }

}  // namespace trainyard
