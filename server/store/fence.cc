#include "server/store/fence.h"

#include <utility>

namespace trainyard {

Fence::Fence(int64_t term) : term_(term) {}

int64_t Fence::term() const {
  absl::MutexLock lock(&mu_);
  return term_;
}

void Fence::set_term(int64_t term) {
  absl::MutexLock lock(&mu_);
  term_ = term;
  lost_ = false;
}

void Fence::OnLost(std::function<void(int64_t db_term)> callback) {
  absl::MutexLock lock(&mu_);
  on_lost_ = std::move(callback);
}

void Fence::Lost(int64_t db_term) {
  std::function<void(int64_t)> callback;
  {
    absl::MutexLock lock(&mu_);
    if (lost_) return;
    lost_ = true;
    callback = on_lost_;
  }
  if (callback) callback(db_term);
}

bool Fence::lost() const {
  absl::MutexLock lock(&mu_);
  return lost_;
}

}  // namespace trainyard
