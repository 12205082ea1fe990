#include "worker/collectives/abortable_store.h"

#include <chrono>
#include <thread>

namespace trainyard {

AbortableStore::AbortableStore(c10::intrusive_ptr<c10d::Store> inner, std::function<bool()> abandoned, std::string what)
    : ForwardingStore(std::move(inner)), abandoned_(std::move(abandoned)), what_(std::move(what)) {}

c10::intrusive_ptr<c10d::Store> AbortableStore::clone() {
  return c10::make_intrusive<AbortableStore>(inner()->clone(), abandoned_, what_);
}

std::vector<uint8_t> AbortableStore::get(const std::string& key) {
  Poll({key}, timeout_);
  return inner()->get(key);
}

void AbortableStore::wait(const std::vector<std::string>& keys) { Poll(keys, timeout_); }

void AbortableStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  Poll(keys, timeout);
}

void AbortableStore::Poll(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!inner()->check(keys)) {
    if (abandoned_()) throw GroupSuperseded(what_);
    if (timeout.count() > 0 && std::chrono::steady_clock::now() > deadline) {
      throw std::runtime_error("store keys timed out after " + std::to_string(timeout.count()) + " ms");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // the next poll of the store
  }
}

}  // namespace trainyard
