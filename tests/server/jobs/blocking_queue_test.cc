// BlockingQueue: FIFO order, the bound that drops only what may be dropped,
// closing (nothing new in, what is there still out), and listeners called
// at once or, within a DeferredNotifications (ManagerLock), after it, once
// per queue and only for queues that still exist.
#include "server/jobs/blocking_queue.h"

#include <gtest/gtest.h>

#include <memory>
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

TEST(BlockingQueue, ListenersWaitForTheEndOfDeferredNotifications) {
  auto a = std::make_shared<BlockingQueue<int>>();
  auto b = std::make_shared<BlockingQueue<int>>();
  auto c = std::make_shared<BlockingQueue<int>>();
  auto gone = std::make_shared<BlockingQueue<int>>();
  BlockingQueue<int> unshared;  // not owned by a shared_ptr: notified at once
  int calls_a = 0, calls_b = 0, calls_c = 0, calls_gone = 0, calls_unshared = 0;
  a->SetListener([&] { ++calls_a; });
  b->SetListener([&] { ++calls_b; });
  c->SetListener([&] { ++calls_c; });
  gone->SetListener([&] { ++calls_gone; });
  unshared.SetListener([&] { ++calls_unshared; });
  a->Push(1);
  EXPECT_EQ(calls_a, 1);  // no scope: at once
  {
    DeferredNotifications outer;
    a->Push(2);
    a->Push(3);
    b->Close();
    gone->Push(1);
    unshared.Push(1);
    {
      DeferredNotifications inner;  // its own queues, at its own end
      c->Push(4);
    }
    EXPECT_EQ(calls_c, 1);
    EXPECT_EQ(calls_b, 0);
    gone.reset();  // destroyed before the scope ends: nothing to notify
    EXPECT_EQ(calls_a, 1);
    EXPECT_EQ(calls_unshared, 1);
    int v = 0;
    EXPECT_TRUE(a->TryPop(&v));  // the items are there already
    EXPECT_EQ(v, 1);
  }
  EXPECT_EQ(calls_a, 2);  // once for both pushes
  EXPECT_EQ(calls_b, 1);  // the close
  EXPECT_EQ(calls_c, 1);
  EXPECT_EQ(calls_gone, 0);
}

}  // namespace
}  // namespace trainyard
