// SignedStore: a c10d Store whose values carry an HMAC of their key and
// value under the attempt's secret (common/secrets.h RendezvousSecret).
// The rendezvous store (rank 0's TCPStore) listens where anyone on the
// network can reach it; whoever writes its keys decides where the ranks
// connect (Gloo's addresses) and what they agree on. Through this store a
// rank reads only values written by a holder of the secret: any other
// value (written, or changed, by someone else) fails its read with an
// error naming the key. Counters (add) are not signed: a stranger can
// disturb a rendezvous through them, not steer it.
//
// Safe to use from one thread at a time, like the store it wraps.
#ifndef TRAINYARD_WORKER_COLLECTIVES_SIGNED_STORE_H_
#define TRAINYARD_WORKER_COLLECTIVES_SIGNED_STORE_H_

#include <stdexcept>
#include <string>
#include <vector>

#include "worker/collectives/forwarding_store.h"

namespace trainyard {

// What a read throws for a value that does not carry the secret's HMAC.
class ForgedStoreValue : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class SignedStore : public ForwardingStore {
 public:
  SignedStore(c10::intrusive_ptr<c10d::Store> inner, std::string secret);

  c10::intrusive_ptr<c10d::Store> clone() override;
  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                  const std::vector<uint8_t>& desired) override;
  std::vector<uint8_t> get(const std::string& key) override;

 private:
  std::vector<uint8_t> Signed(const std::string& key, const std::vector<uint8_t>& value) const;
  std::vector<uint8_t> Verified(const std::string& key, const std::vector<uint8_t>& stored) const;

  std::string secret_;
};

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_COLLECTIVES_SIGNED_STORE_H_
