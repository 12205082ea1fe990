// AutocastGuard: autocast on one device type for the guard's lifetime
// (torch.autocast). CPU autocast takes bf16 only; CUDA takes fp16 and bf16.
// Leaving clears the cast cache, as PyTorch does, so the next step casts the
// updated weights.
#ifndef TRAINYARD_WORKER_MODELS_AUTOCAST_H_
#define TRAINYARD_WORKER_MODELS_AUTOCAST_H_

#include <ATen/autocast_mode.h>

namespace trainyard {

class AutocastGuard {
 public:
  AutocastGuard(c10::DeviceType device, at::ScalarType dtype, bool enabled) : device_(device), enabled_(enabled) {
    if (!enabled_) return;
    previous_dtype_ = at::autocast::get_autocast_dtype(device_);
    previous_enabled_ = at::autocast::is_autocast_enabled(device_);
    at::autocast::set_autocast_dtype(device_, dtype);
    at::autocast::set_autocast_enabled(device_, true);
  }
  ~AutocastGuard() {
    if (!enabled_) return;
    at::autocast::set_autocast_enabled(device_, previous_enabled_);
    at::autocast::set_autocast_dtype(device_, previous_dtype_);
    at::autocast::clear_cache();
  }
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  c10::DeviceType device_;
  bool enabled_;
  at::ScalarType previous_dtype_ = at::kFloat;
  bool previous_enabled_ = false;
};

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_MODELS_AUTOCAST_H_
