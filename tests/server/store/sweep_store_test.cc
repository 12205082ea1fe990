// The sweep store on a real SQLite file and a real PostgreSQL: a sweep, its trials and its
// searcher's decisions read back as written, across a reopen (what a
// restarted coordinator sees); and an ASHA searcher resumed from them
// decides as the one that made them would have.
#include "server/store/sweep_store.h"

#include <gtest/gtest.h>

#include <cmath>

#include "server/store/stores.h"
#include "server/sweeps/searcher.h"
#include "server/sweeps/sweep_manager.h"
#include "tests/server/store/pg_test_server.h"
#include "tests/test_util.h"

namespace trainyard {
namespace {

// Each test on a fresh store of each backend, opened as a coordinator
// opens it (OpenStores), again for a reopen.
class SweepStoreTest : public testing::TestWithParam<test::StoreBackend> {
 protected:
  void SetUp() override {
    auto url = test::StoreUrl(GetParam(), dir_.path());
    ASSERT_TRUE(url.ok()) << url.status();
    url_ = *url;
  }
  absl::StatusOr<std::unique_ptr<SweepStore>> Open() {
    auto stores = OpenStores(url_, "");
    if (!stores.ok()) return stores.status();
    return std::move(stores->sweeps);
  }

  TempDir dir_;
  std::string url_;
};

INSTANTIATE_TEST_SUITE_P(Backends, SweepStoreTest,
                         testing::Values(test::StoreBackend::kSqlite, test::StoreBackend::kPostgres),
                         [](const auto& info) { return test::BackendName(info.param); });

TEST_P(SweepStoreTest, ASweepItsTrialsAndDecisionsSurviveAReopen) {
  SweepRecord w;
  w.id = "sweep-1";
  w.name = "lr";
  w.owner = "alice";
  w.spec_text = "name: lr\nsweep: {}\n";
  Caller alice{"alice", {"ml"}, false, {"/data/alice"}, "alice"};
  w.caller = EncodeCaller(alice);
  w.created_unix_millis = 1000;
  SweepTrialRecord t0{0, "job-a", {"0.001", "[64, 32]"}, JobState::kRunning, false, 1, 0.25, 300, 12.5, ""};
  SweepTrialRecord t1{1, "", {"0.1", "[64]"}, JobState::kFailed, false, 0, std::nullopt, 0, 0, "refused: bad"};
  {
    auto store = Open();
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->Insert(w).ok());
    EXPECT_FALSE((*store)->Insert(w).ok()) << "the same id twice";
    ASSERT_TRUE((*store)->SaveTrial(w.id, t0).ok());
    ASSERT_TRUE((*store)->SaveTrial(w.id, t1).ok());
    t0.state = JobState::kCancelled;
    t0.early_stopped = true;
    ASSERT_TRUE((*store)->SaveTrial(w.id, t0).ok()) << "a trial saved again replaces its row";
    ASSERT_TRUE((*store)->AddRungResult(w.id, {0, 100, 0.5}).ok());
    ASSERT_TRUE((*store)->AddRungResult(w.id, {1, 120, 0.25}).ok());
    w.state = JobState::kSucceeded;
    w.ended_unix_millis = 2000;
    ASSERT_TRUE((*store)->Update(w).ok());
    SweepRecord missing = w;
    missing.id = "sweep-none";
    EXPECT_EQ((*store)->Update(missing).code(), absl::StatusCode::kNotFound);
  }
  auto store = Open();
  ASSERT_TRUE(store.ok());
  auto all = (*store)->List();
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 1u);
  const SweepRecord& got = all->front();
  EXPECT_EQ(got.id, "sweep-1");
  EXPECT_EQ(got.owner, "alice");
  EXPECT_EQ(got.state, JobState::kSucceeded);
  EXPECT_EQ(got.spec_text, w.spec_text);
  EXPECT_EQ(got.ended_unix_millis, 2000);
  ASSERT_EQ(got.trials.size(), 2u);
  EXPECT_EQ(got.trials[0], t0);
  EXPECT_EQ(got.trials[1], t1);
  const Caller back = DecodeCaller(got.caller);
  EXPECT_EQ(back.user, "alice");
  EXPECT_EQ(back.groups, alice.groups);
  EXPECT_EQ(back.roots, alice.roots);
  EXPECT_EQ(back.unix_user, "alice");
  auto results = (*store)->RungResults("sweep-1");
  ASSERT_TRUE(results.ok());
  EXPECT_EQ(*results, (std::vector<RungResult>{{0, 100, 0.5}, {1, 120, 0.25}}));
}

TEST_P(SweepStoreTest, ASweepsEventsSurviveAReopenAndOnlyTheNewestAreKept) {
  SweepRecord w;
  w.id = "sweep-ev";
  w.spec_text = "sweep: {}\n";
  SweepRecord other = w;
  other.id = "sweep-other";
  {
    auto store = Open();
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->Insert(w).ok());
    ASSERT_TRUE((*store)->Insert(other).ok());
    for (int i = 0; i < SweepStore::kMaxEvents + 5; ++i) {
      ASSERT_TRUE((*store)->AddEvent(w.id, JobEvent{1000 + i, JobState::kRunning, "event " + std::to_string(i)}).ok());
    }
    ASSERT_TRUE((*store)->AddEvent(other.id, JobEvent{7, JobState::kSucceeded, "the other's"}).ok());
  }
  auto store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  auto events = (*store)->Events(w.id);
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), static_cast<size_t>(SweepStore::kMaxEvents));
  EXPECT_EQ(events->front().reason, "event 5");  // the 5 oldest went
  EXPECT_EQ(events->back().reason, "event " + std::to_string(SweepStore::kMaxEvents + 4));
  EXPECT_EQ(events->back().unix_millis, 1000 + SweepStore::kMaxEvents + 4);
  auto theirs = (*store)->Events(other.id);
  ASSERT_TRUE(theirs.ok());
  ASSERT_EQ(theirs->size(), 1u);
  EXPECT_EQ(theirs->front().state, JobState::kSucceeded);
  EXPECT_EQ(theirs->front().reason, "the other's");
}

// Rung results keep their values exactly (17 digits, infinities) and their
// order; another sweep's are its own; a trial of no sweep is refused.
TEST_P(SweepStoreTest, RungResultsKeepExactValuesInOrder) {
  auto store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  SweepRecord w;
  w.id = "sweep-r";
  SweepRecord other = w;
  other.id = "sweep-o";
  ASSERT_TRUE((*store)->Insert(w).ok());
  ASSERT_TRUE((*store)->Insert(other).ok());
  const std::vector<RungResult> mine = {
      {3, 100, 0.1 + 0.2}, {1, 100, -1e-310}, {2, 300, HUGE_VAL}, {0, 900, -HUGE_VAL}};
  for (const RungResult& r : mine) ASSERT_TRUE((*store)->AddRungResult(w.id, r).ok());
  ASSERT_TRUE((*store)->AddRungResult(other.id, {0, 1, 2}).ok());
  EXPECT_EQ(*(*store)->RungResults(w.id), mine);
  EXPECT_EQ((*store)->RungResults(other.id)->size(), 1u);
  EXPECT_TRUE((*store)->RungResults("sweep-none")->empty());
  EXPECT_FALSE((*store)->SaveTrial("sweep-none", SweepTrialRecord{}).ok());
  auto all = (*store)->List();
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].id, "sweep-r") << "oldest first";
  EXPECT_EQ((*all)[1].id, "sweep-o");
}

TEST(SweepStore, AnAshaSearcherResumedFromItsDecisionsDecidesAsTheOriginal) {
  SweepSpec spec;
  spec.max_steps = 900;
  spec.searcher.kind = SweepSearcher::Kind::kAsha;
  spec.searcher.reduction_factor = 3;
  spec.searcher.min_steps = 100;
  spec.max_trials = 12;
  spec.seed = 3;
  spec.parameters = {{"optimizer.lr", SweepParameter::Kind::kLogUniform, {}, 1e-5, 1e-1}};
  auto original = MakeSearcher(spec);
  std::vector<RungResult> decided;
  // Seven trials reach the first rung, in this order, with these losses.
  const double losses[] = {0.9, 0.5, 0.7, 0.2, 0.8, 0.4, 0.6};
  for (int n = 0; n < 7; ++n) {
    ASSERT_TRUE(original->Next().has_value());
    if (original->OnMetric(n, 100, losses[n]) != Searcher::Verdict::kContinue) decided.push_back({n, 100, losses[n]});
  }
  auto resumed = MakeSearcher(spec);
  resumed->Resume(original->started());
  for (const RungResult& r : decided) resumed->OnMetric(r.trial, r.step, r.value);
  // The next trial drawn and every next decision are the same.
  auto a = original->Next(), b = resumed->Next();
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->number, 7);
  EXPECT_EQ(a->number, b->number);
  EXPECT_EQ(a->values, b->values);
  for (double loss : {0.3, 0.55, 0.95, 0.1}) {
    EXPECT_EQ(original->OnMetric(7, 100, loss), resumed->OnMetric(7, 100, loss));
    EXPECT_EQ(original->OnMetric(1, 300, loss), resumed->OnMetric(1, 300, loss));
  }
  // Without the replay the resumed searcher would promote what the original stops.
  auto forgetful = MakeSearcher(spec);
  forgetful->Resume(8);
  EXPECT_EQ(forgetful->OnMetric(8, 100, 0.85), Searcher::Verdict::kPromote);
  EXPECT_EQ(original->OnMetric(8, 100, 0.85), Searcher::Verdict::kStop);
}

}  // namespace
}  // namespace trainyard
