// DiagnoseHang on flight records built by hand: each way a group can be
// stuck, and the healthy case.
#include "server/health/hang_diagnosis.h"

#include <gtest/gtest.h>

namespace trainyard {
namespace {

constexpr int64_t kNow = 1'000'000'000'000'000;  // unix micros
constexpr int64_t kSecond = 1'000'000;

struct C {
  int64_t seq;
  const char* group;
  const char* op;
  double started_ago;  // seconds
  bool ended;
};

FlightRecord Rank(int32_t rank, const char* phase, double phase_for, std::vector<C> collectives, int64_t step = 41) {
  FlightRecord r;
  r.rank = rank;
  r.step = step;
  r.phase = phase;
  r.phase_since_unix_micros = kNow - static_cast<int64_t>(phase_for * kSecond);
  r.captured_unix_micros = kNow;
  for (const C& c : collectives) {
    const int64_t start = kNow - static_cast<int64_t>(c.started_ago * kSecond);
    r.collectives.push_back({c.seq, c.group, c.op, 4 << 20, start, c.ended ? start + 2000 : 0});
  }
  return r;
}

bool Has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(HangDiagnosis, ARankThatHasNotStartedTheCollectiveOthersWaitInIsBehind) {
  std::map<int32_t, FlightRecord> answers = {
      {0, Rank(0, "backward", 30, {{56, "world", "allreduce", 31, true}, {57, "world", "allreduce", 30, false}})},
      {1, Rank(1, "forward", 30.5, {{56, "world", "allreduce", 31, true}})},
      {2, Rank(2, "backward", 30, {{56, "world", "allreduce", 31, true}, {57, "world", "allreduce", 30, false}})},
  };
  HangDiagnosis d = DiagnoseHang(3, answers, kNow);
  EXPECT_EQ(d.behind_ranks, std::vector<int32_t>{1});
  EXPECT_TRUE(d.silent_ranks.empty());
  EXPECT_TRUE(Has(d.verdict,
                  "rank 1 is behind: it has not started collective #57 of group world (allreduce, 4.0 MB), which "
                  "ranks 0, 2 started 30.0 s ago; rank 1 is in forward after step 41 for 30.5 s, its last collective "
                  "there #56 (allreduce) ended 31.0 s ago"))
      << d.verdict;
}

TEST(HangDiagnosis, ASilentRankIsNamedWithTheCollectiveTheOthersWaitIn) {
  std::map<int32_t, FlightRecord> answers = {
      {0, Rank(0, "backward", 12, {{9, "shm", "allreduce_max", 13, true}, {10, "shm", "allreduce", 12, false}})},
  };
  HangDiagnosis d = DiagnoseHang(2, answers, kNow);
  EXPECT_EQ(d.silent_ranks, std::vector<int32_t>{1});
  EXPECT_EQ(d.behind_ranks, std::vector<int32_t>{1});
  EXPECT_TRUE(Has(d.verdict,
                  "rank 1 did not answer (stopped, or the whole process is stuck); rank 0 waits in "
                  "collective #10 of group shm (allreduce, 4.0 MB), started 12.0 s ago"))
      << d.verdict;
}

TEST(HangDiagnosis, HybridGroupsAreComparedOnlyAmongTheirOwnRanks) {
  // shard/0 = ranks 0, 1 (in step); shard/1 = ranks 2, 3, where rank 3 lags.
  std::map<int32_t, FlightRecord> answers;
  for (int32_t r : {0, 1}) {
    answers[r] = Rank(r, "forward", 9, {{1, "world", "broadcast", 60, true}, {20, "shard/0", "allgather", 9, false}});
  }
  answers[2] = Rank(2, "forward", 9, {{1, "world", "broadcast", 60, true}, {21, "shard/1", "allgather", 9, false}});
  answers[3] = Rank(3, "data", 9.5, {{1, "world", "broadcast", 60, true}, {20, "shard/1", "allgather", 10, true}});
  HangDiagnosis d = DiagnoseHang(4, answers, kNow);
  EXPECT_EQ(d.behind_ranks, std::vector<int32_t>{3});
  EXPECT_TRUE(Has(d.verdict, "rank 3 is behind: it has not started collective #21 of group shard/1 (allgather"))
      << d.verdict;
  EXPECT_TRUE(Has(d.verdict, "which rank 2 started 9.0 s ago")) << d.verdict;
}

TEST(HangDiagnosis, EveryRankInTheSameCollectiveBlamesNoRank) {
  std::map<int32_t, FlightRecord> answers;
  for (int32_t r : {0, 1}) answers[r] = Rank(r, "backward", 20, {{5, "world", "allreduce", 20, false}});
  HangDiagnosis d = DiagnoseHang(2, answers, kNow);
  EXPECT_TRUE(d.behind_ranks.empty());
  EXPECT_TRUE(Has(d.verdict, "no rank is behind: ranks 0, 1 wait in collective #5 of group world")) << d.verdict;
  EXPECT_TRUE(Has(d.verdict, "the transport is stuck")) << d.verdict;
}

TEST(HangDiagnosis, NoCollectiveInFlightReportsEachRanksPhase) {
  std::map<int32_t, FlightRecord> answers = {
      {0, Rank(0, "data", 40, {{5, "world", "allreduce", 41, true}})},
      {1, Rank(1, "data", 40, {{5, "world", "allreduce", 41, true}})},
  };
  HangDiagnosis d = DiagnoseHang(2, answers, kNow);
  EXPECT_TRUE(d.behind_ranks.empty());
  EXPECT_EQ(d.verdict,
            "no rank is in a collective: rank 0 in data after step 41 for 40.0 s, rank 1 in data after step 41 for "
            "40.0 s");
}

// A script rank whose step nobody reports (script.progress reads rank 0's
// output only) is not said to be after step 0.
TEST(HangDiagnosis, AStepNotKnownIsShownAsADash) {
  std::map<int32_t, FlightRecord> answers = {
      {0, Rank(0, "script", 40, {}, 12)},
      {1, Rank(1, "script", 40, {}, kStepUnknown)},
  };
  HangDiagnosis d = DiagnoseHang(2, answers, kNow);
  EXPECT_EQ(d.verdict,
            "no rank is in a collective: rank 0 in script after step 12 for 40.0 s, rank 1 in script after step - for "
            "40.0 s");
}

TEST(HangDiagnosis, RanksMomentsApartAreNotBehind) {
  // A healthy group: rank 0 started #8 a millisecond ago, rank 1 is about to.
  std::map<int32_t, FlightRecord> answers = {
      {0, Rank(0, "backward", 0.002, {{7, "world", "allreduce", 0.01, true}, {8, "world", "allreduce", 0.001, false}})},
      {1, Rank(1, "backward", 0.003, {{7, "world", "allreduce", 0.01, true}})},
  };
  HangDiagnosis d = DiagnoseHang(2, answers, kNow);
  EXPECT_TRUE(d.behind_ranks.empty()) << d.verdict;
  EXPECT_TRUE(Has(d.verdict, "no rank is behind: the ranks are moving")) << d.verdict;
  // The same records, looked at as stuck after no time at all: rank 1 is behind.
  EXPECT_EQ(DiagnoseHang(2, answers, kNow, 0).behind_ranks, std::vector<int32_t>{1});
}

// A skipped collective: rank 1 left out allreduce #5, so its #5 is the
// broadcast the others issue next. Every rank has "reached" #5; the odd one
// is blamed, as fr_trace classifies it.
TEST(HangDiagnosis, ASkippedCollectiveIsAKindMismatchAndTheOddRankIsBlamed) {
  std::map<int32_t, FlightRecord> answers = {
      {0, Rank(0, "backward", 20, {{4, "world", "allreduce", 21, true}, {5, "world", "allreduce", 20, false}})},
      {1, Rank(1, "backward", 20, {{4, "world", "allreduce", 21, true}, {5, "world", "broadcast", 20, false}})},
      {2, Rank(2, "backward", 20, {{4, "world", "allreduce", 21, true}, {5, "world", "allreduce", 20, false}})},
  };
  HangDiagnosis d = DiagnoseHang(3, answers, kNow);
  EXPECT_EQ(d.behind_ranks, std::vector<int32_t>{1});
  EXPECT_EQ(d.mismatch,
            "collective #5 of group world: allreduce (4.0 MB) on ranks 0, 2, broadcast (4.0 MB) on rank 1 (kind "
            "mismatch: a collective skipped or issued out of order)");
  EXPECT_TRUE(Has(d.verdict, "the ranks' collectives do not match: collective #5")) << d.verdict;
  // Two ranks that disagree: no majority, nobody blamed, still classified.
  answers.erase(2);
  d = DiagnoseHang(2, answers, kNow);
  EXPECT_TRUE(d.behind_ranks.empty());
  EXPECT_FALSE(d.mismatch.empty());
}

TEST(HangDiagnosis, DifferentSizesOfOneCollectiveAreASizeMismatch) {
  std::map<int32_t, FlightRecord> answers = {
      {0, Rank(0, "backward", 20, {{5, "world", "allreduce", 20, false}})},
      {1, Rank(1, "backward", 20, {{5, "world", "allreduce", 20, false}})},
      {2, Rank(2, "backward", 20, {{5, "world", "allreduce", 20, false}})},
  };
  answers[2].collectives[0].bytes = 1024;
  HangDiagnosis d = DiagnoseHang(3, answers, kNow);
  EXPECT_EQ(d.behind_ranks, std::vector<int32_t>{2});
  EXPECT_EQ(d.mismatch,
            "collective #5 of group world: allreduce (1.0 kB) on rank 2, allreduce (4.0 MB) on ranks 0, 1 (size "
            "mismatch)");
  // All-to-alls may differ in size: only their kind is compared.
  for (auto& [rank, r] : answers) r.collectives[0].op = "alltoall";
  EXPECT_TRUE(DiagnoseHang(3, answers, kNow).mismatch.empty());
}

}  // namespace
}  // namespace trainyard
