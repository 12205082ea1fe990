// StopWatchdog: a rank leaves soon after it is told to stop, whatever it is
// doing. While it waits for its peers (the rendezvous, the first restore, a
// replica job's first membership) no loop of its own checks for a stop: the
// wait is inside c10d, for as long as its timeout. Once training, the loop
// hears a stop at each step boundary, but a step, heal or save blocked in a
// collective (a peer gone) would hold the rank until the collective's
// timeout. The watchdog's thread checks the TrainerControl every 50 ms:
//   - waiting: a stop or a preemption leaves at once (nothing trained yet,
//     nothing to save);
//   - training: a stop (SIGINT, the coordinator's) leaves `grace` after it
//     came if the rank is still running, naming the phase and step of its
//     FlightRecorder. A preemption (SIGTERM) saves a checkpoint first and is
//     bounded by whoever sent it (Slurm's, kubelet's grace period), not here.
// Leaving calls `leave` with the line to log (in the worker: log it, exit
// with the stopped code; it must not return there).
#ifndef TRAINYARD_WORKER_CONTROL_STOP_WATCHDOG_H_
#define TRAINYARD_WORKER_CONTROL_STOP_WATCHDOG_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace trainyard {

class FlightRecorder;
class TrainerControl;

class StopWatchdog {
 public:
  // `control` and `recorder` must outlive it; it starts waiting, at `where`.
  StopWatchdog(int32_t rank, const TrainerControl* control, const FlightRecorder* recorder, std::string where,
               std::chrono::milliseconds grace, std::function<void(const std::string&)> leave);
  ~StopWatchdog();
  StopWatchdog(const StopWatchdog&) = delete;
  StopWatchdog& operator=(const StopWatchdog&) = delete;

  // Still waiting, now at `where` ("restoring the job's state ...").
  void Waiting(std::string where);
  // Training from now on: a stop leaves after the grace.
  void Training();

 private:
  void Watch();

  const int32_t rank_;
  const TrainerControl* const control_;
  const FlightRecorder* const recorder_;
  const std::chrono::milliseconds grace_;
  const std::function<void(const std::string&)> leave_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::string where_;
  bool training_ = false;
  bool done_ = false;
  std::thread thread_;
};

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_CONTROL_STOP_WATCHDOG_H_
