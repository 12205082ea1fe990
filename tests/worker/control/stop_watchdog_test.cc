// StopWatchdog: a rank told to stop leaves at once while it waits for its
// peers, and within the grace once training, naming its phase and step; a
// preemption while training (which saves first) and a rank that keeps
// running without a stop are left alone.
#include "worker/control/stop_watchdog.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>

#include "worker/base/flight_recorder.h"
#include "worker/control/control.h"

namespace trainyard {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// What the watchdog's `leave` was called with, awaited.
struct Left {
  std::mutex mu;
  std::condition_variable cv;
  std::string line;
  Clock::time_point at;
  std::function<void(const std::string&)> Callback() {
    return [this](const std::string& l) {
      std::lock_guard<std::mutex> lock(mu);
      line = l;
      at = Clock::now();
      cv.notify_all();
    };
  }
  bool Await(std::chrono::milliseconds within) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, within, [this] { return !line.empty(); });
  }
};

TEST(StopWatchdogTest, WaitingLeavesAtOnceOnAStopOrAPreemption) {
  for (const bool preempt : {false, true}) {
    TrainerControl control;
    FlightRecorder recorder(3);
    Left left;
    StopWatchdog w(3, &control, &recorder, "waiting in the rendezvous for the other 7 ranks", 10s, left.Callback());
    w.Waiting("restoring the job's state with the other ranks");
    const Clock::time_point asked = Clock::now();
    preempt ? control.RequestPreemption() : control.RequestStop();
    ASSERT_TRUE(left.Await(5s));
    EXPECT_LT(left.at - asked, 1s);
    EXPECT_EQ(left.line,
              "rank 3: stopped while restoring the job's state with the other ranks; no step has run, "
              "nothing to save");
  }
}

TEST(StopWatchdogTest, TrainingLeavesAfterTheGraceNamingThePhase) {
  TrainerControl control;
  FlightRecorder recorder(1);
  Left left;
  StopWatchdog w(1, &control, &recorder, "waiting", 400ms, left.Callback());
  w.Training();
  recorder.SetPhase("heal", 42);
  const Clock::time_point asked = Clock::now();
  control.RequestStop();
  ASSERT_TRUE(left.Await(5s));
  EXPECT_GE(left.at - asked, 400ms);
  EXPECT_LT(left.at - asked, 1500ms);
  EXPECT_EQ(left.line, "rank 1: stopped, but still in heal after step 42 0.4 s later; leaving without finishing it");
}

TEST(StopWatchdogTest, TrainingWithoutAStopOrWithAPreemptionStays) {
  TrainerControl control;
  FlightRecorder recorder(0);
  Left left;
  {
    StopWatchdog w(0, &control, &recorder, "waiting", 100ms, left.Callback());
    w.Training();
    control.RequestPreemption();  // saves first: bounded by whoever sent it
    EXPECT_FALSE(left.Await(600ms)) << left.line;
  }
  EXPECT_EQ(left.line, "");
}

}  // namespace
}  // namespace trainyard
