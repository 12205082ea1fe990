// AbortableStore: a c10d Store whose blocking reads (get, wait) give up as
// soon as `abandoned()` says so, instead of waiting out the store's timeout.
// A replica job forms an epoch's groups through it: when a member dies
// before it has published its address, the others would otherwise wait for
// that key until the timeout; they give up once the coordinator has offered
// a newer membership (GroupSuperseded). Blocking reads poll the inner store
// (check) every 2 ms. Safe to use from one thread at a time, like the store
// it wraps.
#ifndef TRAINYARD_WORKER_COLLECTIVES_ABORTABLE_STORE_H_
#define TRAINYARD_WORKER_COLLECTIVES_ABORTABLE_STORE_H_

#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "worker/collectives/forwarding_store.h"

namespace trainyard {

// What a blocking read of an AbortableStore throws once it was abandoned.
class GroupSuperseded : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class AbortableStore : public ForwardingStore {
 public:
  // `abandoned` is called between polls; `what` names the reason in the
  // GroupSuperseded it throws ("membership epoch 3 was superseded").
  AbortableStore(c10::intrusive_ptr<c10d::Store> inner, std::function<bool()> abandoned, std::string what);

  c10::intrusive_ptr<c10d::Store> clone() override;
  std::vector<uint8_t> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

 private:
  // Returns once every key exists; throws GroupSuperseded when abandoned,
  // std::runtime_error ("timed out") after `timeout`.
  void Poll(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);

  std::function<bool()> abandoned_;
  std::string what_;
};

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_COLLECTIVES_ABORTABLE_STORE_H_
