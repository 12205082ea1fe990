// BlockingQueue: FIFO order, the bound that drops only what may be dropped,
// and closing (nothing new in, what is there still out).
#include "server/jobs/blocking_queue.h"

#include <gtest/gtest.h>

#include <thread>

namespace trainyard {
namespace {

using std::chrono::milliseconds;

TEST(BlockingQueue, FullDropsOnlyTheDroppable) {
  // Negative numbers may be dropped (as metrics samples), others not (as
  // a job's state changes).
  BlockingQueue<int> q(2, [](const int& v) { return v < 0; });
  for (int v : {1, -2, -3, 4, -5, 6}) q.Push(v);
  std::vector<int> out;
  int v = 0;
  while (q.Pop(&v, milliseconds(0))) out.push_back(v);
  EXPECT_EQ(out, (std::vector<int>{1, -2, 4, 6}));
}

TEST(BlockingQueue, ClosedTakesNothingNewAndDrains) {
  BlockingQueue<int> q;
  q.Push(1);
  q.Close();
  q.Push(2);
  EXPECT_TRUE(q.closed());
  EXPECT_FALSE(q.closed_and_drained());
  int v = 0;
  ASSERT_TRUE(q.Pop(&v, milliseconds(0)));
  EXPECT_EQ(v, 1);
  EXPECT_FALSE(q.Pop(&v, milliseconds(0)));
  EXPECT_TRUE(q.closed_and_drained());
}

TEST(BlockingQueue, PopWaitsForAPushFromAnotherThread) {
  BlockingQueue<int> q;
  std::thread producer([&] { q.Push(7); });
  int v = 0;
  EXPECT_TRUE(q.Pop(&v, milliseconds(10000)));
  EXPECT_EQ(v, 7);
  producer.join();
  // And a close wakes a waiting reader at once.
  std::thread closer([&] { q.Close(); });
  EXPECT_FALSE(q.Pop(&v, milliseconds(10000)));
  closer.join();
}

}  // namespace
}  // namespace trainyard
