// PickVictims: the lowest priority that frees enough, then the fewest jobs.
#include "server/scheduling/victims.h"

#include <gtest/gtest.h>

namespace trainyard {
namespace {

using std::chrono::seconds;
const std::chrono::steady_clock::time_point kT0{seconds(1000)};

std::vector<std::string> Ids(const std::vector<VictimCandidate>& v) {
  std::vector<std::string> out;
  for (const auto& c : v) out.push_back(c.id);
  return out;
}

TEST(VictimsTest, TheLowestPriorityThatFreesEnoughGoesFirst) {
  const std::vector<VictimCandidate> c = {{"low-1", 1, 0, kT0}, {"low-2", 1, 0, kT0}, {"mid", 4, 10, kT0}};
  EXPECT_EQ(Ids(PickVictims(c, 2)), (std::vector<std::string>{"low-1", "low-2"}));
  // Not enough at priority 0: the level above is needed; then the fewest.
  EXPECT_EQ(Ids(PickVictims(c, 3)), (std::vector<std::string>{"mid"}));
}

TEST(VictimsTest, TheFewestLargestThenTheLatestStarted) {
  const std::vector<VictimCandidate> c = {
      {"small", 1, 0, kT0}, {"big-old", 3, 0, kT0}, {"big-new", 3, 0, kT0 + seconds(5)}};
  EXPECT_EQ(Ids(PickVictims(c, 3)), (std::vector<std::string>{"big-new"}));
  EXPECT_EQ(Ids(PickVictims(c, 4)), (std::vector<std::string>{"big-new", "big-old"}));
}

TEST(VictimsTest, NoneWhenAllOfThemFreeTooLittle) {
  EXPECT_TRUE(PickVictims({{"a", 1, 0, kT0}, {"b", 1, 5, kT0}}, 3).empty());
  EXPECT_TRUE(PickVictims({}, 1).empty());
  auto picked = PickVictims({{"a", 2, 0, kT0, /*reclaim=*/true}}, 1);
  ASSERT_EQ(picked.size(), 1u);
  EXPECT_TRUE(picked[0].reclaim);  // what the scheduler says of it stays
}

}  // namespace
}  // namespace trainyard
