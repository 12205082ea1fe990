// Ranks as threads over real Gloo process groups sharing a HashStore.
#ifndef TRAINYARD_TESTS_WORKER_DIST_TEST_UTIL_H_
#define TRAINYARD_TESTS_WORKER_DIST_TEST_UTIL_H_

#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "worker/collectives/process_group.h"
#include "worker/collectives/shm_collectives.h"

namespace trainyard {

// Runs fn(rank) on `ranks` threads and joins them. True when no rank threw;
// each rank's exception fails the test with that rank's message.
inline bool RunThreads(int ranks, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  std::vector<std::string> errors(ranks);
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  bool ok = true;
  for (int r = 0; r < ranks; ++r) {
    EXPECT_EQ(errors[r], "") << "rank " << r;
    ok = ok && errors[r].empty();
  }
  return ok;
}

// Runs fn(rank, pg) on `world` threads; with `shm`, also creates
// shared-memory collectives per rank into *shm_out. Exceptions in a rank
// fail the test with that rank's message.
inline void RunRanks(int world, const std::function<void(int, c10::intrusive_ptr<c10d::ProcessGroup>)>& fn,
                     bool shm = false, std::vector<std::unique_ptr<ShmCollectives>>* shm_out = nullptr) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  if (shm_out) shm_out->resize(world);
  RunThreads(world, [&](int r) {
    auto pg = MakeProcessGroup(Backend::kGloo, store, r, world, "127.0.0.1", std::chrono::seconds(60));
    if (shm) (*shm_out)[r] = ShmCollectives::Create(store, r, world, "test");
    fn(r, pg);
  });
}

}  // namespace trainyard

#endif  // TRAINYARD_TESTS_WORKER_DIST_TEST_UTIL_H_
