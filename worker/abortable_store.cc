#include "worker/abortable_store.h"

#include <chrono>
#include <thread>

namespace trainyard {

AbortableStore::AbortableStore(c10::intrusive_ptr<c10d::Store> inner, std::function<bool()> abandoned, std::string what)
    : c10d::Store(inner->getTimeout()),
      inner_(std::move(inner)),
      abandoned_(std::move(abandoned)),
      what_(std::move(what)) {}

c10::intrusive_ptr<c10d::Store> AbortableStore::clone() {
  return c10::make_intrusive<AbortableStore>(inner_->clone(), abandoned_, what_);
}

void AbortableStore::set(const std::string& key, const std::vector<uint8_t>& value) { inner_->set(key, value); }

std::vector<uint8_t> AbortableStore::compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                                const std::vector<uint8_t>& desired) {
  return inner_->compareSet(key, expected, desired);
}

std::vector<uint8_t> AbortableStore::get(const std::string& key) {
  Poll({key}, timeout_);
  return inner_->get(key);
}

int64_t AbortableStore::add(const std::string& key, int64_t value) { return inner_->add(key, value); }

bool AbortableStore::deleteKey(const std::string& key) { return inner_->deleteKey(key); }

bool AbortableStore::check(const std::vector<std::string>& keys) { return inner_->check(keys); }

int64_t AbortableStore::getNumKeys() { return inner_->getNumKeys(); }

void AbortableStore::wait(const std::vector<std::string>& keys) { Poll(keys, timeout_); }

void AbortableStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  Poll(keys, timeout);
}

void AbortableStore::Poll(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!inner_->check(keys)) {
    if (abandoned_()) throw GroupSuperseded(what_);
    if (timeout.count() > 0 && std::chrono::steady_clock::now() > deadline) {
      throw std::runtime_error("store keys timed out after " + std::to_string(timeout.count()) + " ms");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // the next poll of the store
  }
}

}  // namespace trainyard
