#include "worker/control/stop_watchdog.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "worker/base/flight_recorder.h"
#include "worker/control/control.h"

namespace trainyard {

StopWatchdog::StopWatchdog(int32_t rank, const TrainerControl* control, const FlightRecorder* recorder,
                           std::string where, std::chrono::milliseconds grace,
                           std::function<void(const std::string&)> leave)
    : rank_(rank),
      control_(control),
      recorder_(recorder),
      grace_(grace),
      leave_(std::move(leave)),
      where_(std::move(where)) {
  thread_ = std::thread([this] { Watch(); });
}

StopWatchdog::~StopWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void StopWatchdog::Waiting(std::string where) {
  std::lock_guard<std::mutex> lock(mu_);
  where_ = std::move(where);
}

void StopWatchdog::Training() {
  std::lock_guard<std::mutex> lock(mu_);
  training_ = true;
}

void StopWatchdog::Watch() {
  std::optional<std::chrono::steady_clock::time_point> stop_seen;
  std::unique_lock<std::mutex> lock(mu_);
  while (!done_) {
    if (!training_ && (control_->stop_requested() || control_->preemption_requested())) {
      leave_(absl::StrCat("rank ", rank_, ": stopped while ", where_, "; no step has run, nothing to save"));
      return;
    }
    if (training_ && control_->stop_requested()) {
      const auto now = std::chrono::steady_clock::now();
      if (!stop_seen) stop_seen = now;
      if (now - *stop_seen >= grace_) {
        const int64_t seconds = std::chrono::duration_cast<std::chrono::milliseconds>(grace_).count();
        leave_(absl::StrCat("rank ", rank_, ": stopped, but still in ",
                            recorder_ != nullptr ? recorder_->phase() : "training", " after step ",
                            recorder_ != nullptr ? recorder_->step() : 0, " ", seconds / 1000.0,
                            " s later; leaving without finishing it"));
        return;
      }
    }
    cv_.wait_for(lock, std::chrono::milliseconds(50));
  }
}

}  // namespace trainyard
