// The flight recorder: its ring, what RecordingBackend records from real
// Gloo groups (ranks as threads), and the hang diagnosis the coordinator
// makes of those records when one rank stalls.
#include "worker/base/flight_recorder.h"

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <atomic>
#include <chrono>
#include <vector>

#include "common/clock.h"
#include "server/health/hang_diagnosis.h"
#include "tests/test_util.h"
#include "tests/worker/dist_test_util.h"
#include "worker/collectives/collectives.h"
#include "worker/collectives/process_group.h"

namespace trainyard {
namespace {

TEST(FlightRecorder, TheRingKeepsTheNewestCollectivesOldestFirst) {
  FlightRecorder rec(3, /*capacity=*/4);
  std::vector<uint64_t> handles;
  for (int i = 0; i < 5; ++i) handles.push_back(rec.Begin("world", "allreduce", 8 * i));
  const uint64_t other = rec.Begin("shm", "broadcast", 1);
  rec.End(handles[0]);  // left the ring: ignored
  rec.End(handles[4]);
  rec.SetPhase("backward", 12);
  FlightRecord r = rec.Capture();
  EXPECT_EQ(r.rank, 3);
  EXPECT_EQ(r.step, 12);
  EXPECT_EQ(r.phase, "backward");
  ASSERT_EQ(r.collectives.size(), 4u);
  EXPECT_EQ(r.collectives[0].seq, 3);  // world #3, #4, #5, then shm #1
  EXPECT_EQ(r.collectives[2].seq, 5);
  EXPECT_EQ(r.collectives[2].bytes, 32);
  EXPECT_NE(r.collectives[2].end_unix_micros, 0);
  EXPECT_EQ(r.collectives[1].end_unix_micros, 0);
  EXPECT_EQ(r.collectives[3].group, "shm");
  EXPECT_EQ(r.collectives[3].seq, 1);
  rec.End(other);
  EXPECT_NE(rec.Capture().collectives[3].end_unix_micros, 0);
}

// A phase that spans the steps (a script job's "script") counts its time
// from the latest step, not from its start: a healthy script is not "in
// script after step 88 for 8.8 s" when its steps come ten a second.
TEST(FlightRecorder, APhaseThatSpansStepsCountsFromTheLatestStep) {
  FlightRecorder rec(0);
  rec.SetPhase("script", 0);
  const int64_t started = rec.Capture().phase_since_unix_micros;
  const auto later = [&] { return NowMicros() > started + 1000; };
  WaitFor(later, std::chrono::seconds(5));
  rec.SetPhase("script", 1);
  const FlightRecord at_step_1 = rec.Capture();
  EXPECT_EQ(at_step_1.step, 1);
  EXPECT_GT(at_step_1.phase_since_unix_micros, started + 1000);
  const int64_t since = at_step_1.phase_since_unix_micros;
  WaitFor([&] { return NowMicros() > since + 1000; }, std::chrono::seconds(5));
  rec.SetPhase("script", 1);  // the same step again: the same start
  EXPECT_EQ(rec.Capture().phase_since_unix_micros, since);
  // And the coordinator's verdict counts from there.
  const HangDiagnosis d = DiagnoseHang(1, {{0, rec.Capture()}}, since + 2'500'000);
  EXPECT_NE(d.verdict.find("rank 0 in script after step 1 for 2.5 s"), std::string::npos) << d.verdict;
}

TEST(RecordingBackend, RecordsEveryCollectiveAlikeOnEveryRank) {
  constexpr int kWorld = 2;
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::unique_ptr<FlightRecorder>> recs;
  for (int r = 0; r < kWorld; ++r) recs.push_back(std::make_unique<FlightRecorder>(r));
  RunThreads(kWorld, [&](int r) {
    auto pg = MakeProcessGroup(Backend::kGloo, store, r, kWorld, "127.0.0.1", std::chrono::seconds(30), recs[r].get());
    std::unique_ptr<Collectives> c = MakeCollectives(pg);
    at::Tensor t = torch::ones({1024});
    c->AllreduceSum(t);
    at::Tensor full = torch::zeros({8}), shard = torch::full({4}, static_cast<float>(r));
    c->AllGatherInto(full, shard);
    c->ReduceScatterSum(shard, full);  // Gloo: an all-to-all, then a local sum
    c->Broadcast(t, 0);
    pg->barrier()->wait();
    EXPECT_TRUE(torch::equal(t, torch::full({1024}, 2.0f)));
  });
  std::vector<std::string> want = {"allreduce", "allgather", "alltoall", "broadcast", "barrier"};
  for (int r = 0; r < kWorld; ++r) {
    // Each collective's future completes on a Gloo thread.
    ASSERT_TRUE(WaitFor(
        [&] {
          for (const CollectiveRecord& c : recs[r]->Capture().collectives) {
            if (c.end_unix_micros == 0) return false;
          }
          return true;
        },
        std::chrono::seconds(5)));
    FlightRecord rec = recs[r]->Capture();
    ASSERT_EQ(rec.collectives.size(), want.size()) << "rank " << r;
    for (size_t i = 0; i < want.size(); ++i) {
      const CollectiveRecord& c = rec.collectives[i];
      EXPECT_EQ(c.op, want[i]) << "rank " << r;
      EXPECT_EQ(c.seq, static_cast<int64_t>(i) + 1);
      EXPECT_EQ(c.group, "world");
      EXPECT_GE(c.end_unix_micros, c.start_unix_micros);
    }
    EXPECT_EQ(rec.collectives[0].bytes, 4096);  // 1024 floats
    EXPECT_EQ(rec.collectives[1].bytes, 16);    // this rank's shard
    EXPECT_EQ(rec.collectives[2].bytes, 32);    // the full tensor it scatters
  }
}

TEST(RecordingBackend, AStalledRankIsFoundBehindAtTheCollectiveItHasNotStarted) {
  constexpr int kWorld = 2;
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::unique_ptr<FlightRecorder>> recs;
  for (int r = 0; r < kWorld; ++r) recs.push_back(std::make_unique<FlightRecorder>(r));
  std::atomic<bool> rank0_started{false}, diagnosed{false};
  HangDiagnosis stuck, after;
  RunThreads(kWorld, [&](int r) {
    auto pg = MakeProcessGroup(Backend::kGloo, store, r, kWorld, "127.0.0.1", std::chrono::seconds(30), recs[r].get());
    std::vector<at::Tensor> t = {torch::ones({1024})};
    for (int i = 0; i < 2; ++i) pg->allreduce(t)->wait();
    recs[r]->SetPhase("forward", 7);
    if (r == 0) {
      auto work = pg->allreduce(t);  // #3: rank 1 is not there yet
      rank0_started = true;
      work->wait();
    } else {
      // Rank 1 stalls (in its data loader, say) until the diagnosis is made.
      recs[1]->SetPhase("data", 7);
      ASSERT_TRUE(WaitFor([&] { return rank0_started.load(); }, std::chrono::seconds(10)));
      std::map<int32_t, FlightRecord> answers = {{0, recs[0]->Capture()}, {1, recs[1]->Capture()}};
      stuck = DiagnoseHang(kWorld, answers, NowMicros(), /*stuck_after_micros=*/0);
      diagnosed = true;
      pg->allreduce(t)->wait();
    }
    pg->barrier()->wait();
  });
  ASSERT_TRUE(diagnosed);
  EXPECT_EQ(stuck.behind_ranks, std::vector<int32_t>{1});
  EXPECT_NE(stuck.verdict.find(
                "rank 1 is behind: it has not started collective #3 of group world (allreduce, 4.0 kB), which rank 0 "
                "started"),
            std::string::npos)
      << stuck.verdict;
  EXPECT_NE(stuck.verdict.find("rank 1 is in data after step 7"), std::string::npos) << stuck.verdict;
  // Once rank 1 caught up, nobody is behind and nothing is in flight.
  ASSERT_TRUE(WaitFor(
      [&] {
        after = DiagnoseHang(kWorld, {{0, recs[0]->Capture()}, {1, recs[1]->Capture()}}, NowMicros(), 0);
        return after.verdict.rfind("no rank is in a collective", 0) == 0;
      },
      std::chrono::seconds(5)))
      << after.verdict;
  EXPECT_TRUE(after.behind_ranks.empty());
}

}  // namespace
}  // namespace trainyard
