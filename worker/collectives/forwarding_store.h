// ForwardingStore: a c10d Store that passes every call to the store it
// wraps. The stores that change one thing about another store (SignedStore:
// values carry a signature; AbortableStore: blocking reads give up) derive
// from it and override only that.
//
// Safe to use from one thread at a time, like the store it wraps.
#ifndef TRAINYARD_WORKER_COLLECTIVES_FORWARDING_STORE_H_
#define TRAINYARD_WORKER_COLLECTIVES_FORWARDING_STORE_H_

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <string>
#include <vector>

namespace trainyard {

class ForwardingStore : public c10d::Store {
 public:
  explicit ForwardingStore(c10::intrusive_ptr<c10d::Store> inner)
      : c10d::Store(inner->getTimeout()), inner_(std::move(inner)) {}

  void set(const std::string& key, const std::vector<uint8_t>& value) override { inner_->set(key, value); }
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                  const std::vector<uint8_t>& desired) override {
    return inner_->compareSet(key, expected, desired);
  }
  std::vector<uint8_t> get(const std::string& key) override { return inner_->get(key); }
  int64_t add(const std::string& key, int64_t value) override { return inner_->add(key, value); }
  bool deleteKey(const std::string& key) override { return inner_->deleteKey(key); }
  bool check(const std::vector<std::string>& keys) override { return inner_->check(keys); }
  int64_t getNumKeys() override { return inner_->getNumKeys(); }
  void wait(const std::vector<std::string>& keys) override { inner_->wait(keys); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    inner_->wait(keys, timeout);
  }

 protected:
  const c10::intrusive_ptr<c10d::Store>& inner() const { return inner_; }

 private:
  c10::intrusive_ptr<c10d::Store> inner_;
};

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_COLLECTIVES_FORWARDING_STORE_H_
