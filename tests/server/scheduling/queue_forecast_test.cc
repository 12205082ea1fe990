// QueueForecast: the head's shadow time and estimated starts from one
// timeline of what comes free.
#include "server/scheduling/queue_forecast.h"

#include <gtest/gtest.h>

namespace trainyard {
namespace {

using std::chrono::seconds;
using Ends = QueueForecast::Ends;

const QueueForecast::Time kNow{seconds(1000)};

TEST(QueueForecastTest, ShadowIsWhenEnoughHasEndedAndWhatIsSpareThen) {
  // 1 free now; jobs of 2 and 3 end in 10 s and 20 s.
  const std::vector<QueueForecast::Holder> running = {{3, kNow + seconds(20)}, {2, kNow + seconds(10)}};
  QueueForecast f(kNow, 1, running, Ends::kEarliest);
  EXPECT_EQ(f.Shadow(1), std::make_pair(kNow, 0));                // free now
  EXPECT_EQ(f.Shadow(2), std::make_pair(kNow + seconds(10), 1));  // 1 + 2, one spare
  EXPECT_EQ(f.Shadow(5), std::make_pair(kNow + seconds(20), 1));
  EXPECT_EQ(f.Shadow(9).second, -3);  // never enough: what there is
}

TEST(QueueForecastTest, UnknownEndsAndPreemptionsComeAtOnceForTheShadow) {
  const std::vector<QueueForecast::Holder> running = {{2, std::nullopt}, {2, kNow + seconds(50), true}};
  QueueForecast f(kNow, 0, running, Ends::kEarliest);
  EXPECT_EQ(f.Shadow(4), std::make_pair(kNow, 0));
}

TEST(QueueForecastTest, EstimatedStartsFollowTheQueueOrder) {
  // 2 free; a job of 2 ends in 10 s.
  QueueForecast f(kNow, 2, {{2, kNow + seconds(10)}}, Ends::kKnown);
  EXPECT_EQ(f.Place(2, {}, seconds(30)), kNow);                 // takes the 2 free for 30 s
  EXPECT_EQ(f.Place(2, {}, std::nullopt), kNow + seconds(10));  // when the running job ends; holds them
  EXPECT_EQ(f.Place(2, {}, seconds(5)), kNow + seconds(30));    // when the first one's run ends
  // Backing off until +20: the first time after it with one free.
  EXPECT_EQ(f.Place(1, kNow + seconds(20), seconds(5)), kNow + seconds(35));
}

TEST(QueueForecastTest, NoEstimateAfterAJobThatNeverGetsEnough) {
  // A job whose end nobody knows gives nothing back to the estimates.
  QueueForecast f(kNow, 1, {{3, std::nullopt}}, Ends::kKnown);
  EXPECT_EQ(f.Place(2, {}, seconds(1)), std::nullopt);
  EXPECT_EQ(f.Place(1, {}, seconds(1)), std::nullopt);  // behind it: unknown too
}

}  // namespace
}  // namespace trainyard
