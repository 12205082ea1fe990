// Membership: the replicas of a fault_tolerance.mode replica attempt and the
// coordinator's decisions on who trains together, on a fake clock.
#include "server/replicas/membership.h"

#include <gtest/gtest.h>

#include <chrono>

namespace trainyard {
namespace {

using State = Membership::State;
using Ranks = std::vector<int32_t>;

class MembershipTest : public ::testing::Test {
 protected:
  // Every rank of `m` says hello (rank r's store at 10.0.0.<r>:<29500 + r>);
  // returns the last decision.
  Membership::Decision HelloAll(Membership& m) {
    Membership::Decision d;
    for (int32_t r = 0; r < m.world_size(); ++r) d = m.OnHello(r, "10.0.0." + std::to_string(r), 29500 + r);
    return d;
  }
  FakeClock clock_;
};

TEST_F(MembershipTest, TheFirstMembershipIsEveryRankOnceAllHaveConnected) {
  Membership m(3, 1, &clock_);
  EXPECT_FALSE(m.OnHello(0, "10.0.0.0", 29500).send);
  EXPECT_FALSE(m.OnHello(2, "10.0.0.2", 29502).send);
  EXPECT_FALSE(m.formed());
  EXPECT_EQ(m.state(1), State::kLaunched);
  Membership::Decision d = m.OnHello(1, "10.0.0.1", 29501);
  ASSERT_TRUE(d.send);
  EXPECT_EQ(d.send->epoch, 1);
  EXPECT_EQ(d.send->ranks, (Ranks{0, 1, 2}));
  EXPECT_EQ(d.to, (Ranks{0, 1, 2}));
  EXPECT_EQ(d.send->store_addr, "10.0.0.0");  // the first member's own store
  EXPECT_EQ(d.send->store_port, 29500);
  EXPECT_EQ(d.event, "membership 1: ranks 0-2 (all 3 ranks connected)");
  EXPECT_FALSE(d.delta) << "nobody holds a membership yet";
  EXPECT_EQ(m.live(), 3);
  EXPECT_EQ(m.healing(), 0);
  EXPECT_EQ(m.lead(), 0);
}

TEST_F(MembershipTest, ALostMemberLeavesTheOthersTrainingAndIsReplacedOnceItsProcessEnded) {
  Membership m(3, 1, &clock_);
  HelloAll(m);
  Membership::Decision d = m.OnExit(1, "killed by signal 9");
  ASSERT_TRUE(d.send);
  EXPECT_FALSE(d.fail);
  EXPECT_EQ(d.send->epoch, 2);
  EXPECT_EQ(d.send->ranks, (Ranks{0, 2}));
  EXPECT_EQ(d.to, (Ranks{0, 2}));  // the lost rank is told nothing
  EXPECT_EQ(d.event, "membership 2: ranks 0,2 (rank 1 lost: killed by signal 9)");
  EXPECT_EQ(d.launch, Ranks{1});
  EXPECT_EQ(m.state(1), State::kHealing);
  EXPECT_EQ(m.live(), 2);
  EXPECT_EQ(m.healing(), 1);

  // The replacement connects: it joins at the end of the group.
  clock_.Advance(std::chrono::milliseconds(700));
  d = m.OnHello(1, "10.0.0.1", 29600);
  ASSERT_TRUE(d.send);
  EXPECT_EQ(d.send->epoch, 3);
  EXPECT_EQ(d.send->ranks, (Ranks{0, 2, 1}));
  EXPECT_EQ(d.to, (Ranks{0, 2, 1}));
  EXPECT_EQ(d.event, "membership 3: ranks 0,2,1 (rank 1 joined: its replacement connected)");
  EXPECT_EQ(m.healing(), 0);

  // Its first commit in epoch 3 ends the heal: loss to commit.
  clock_.Advance(std::chrono::milliseconds(500));
  ReplicaReport committed{ReplicaReport::Kind::kCommitted, 3, 41, "", 0.4, true, 4100000};
  EXPECT_EQ(m.OnReport(0, committed).healed_rank, -1);  // a survivor has nothing to heal
  d = m.OnReport(1, committed);
  EXPECT_EQ(d.healed_rank, 1);
  EXPECT_DOUBLE_EQ(d.heal_seconds, 1.2);
  EXPECT_EQ(d.event, "rank 1 healed in 1.2 s (4.1 MB from a peer)");
  EXPECT_EQ(m.OnReport(1, committed).healed_rank, -1);  // once
}

TEST_F(MembershipTest, TheLeadIsTheFirstLiveMember) {
  Membership m(3, 1, &clock_);
  HelloAll(m);
  Membership::Decision d = m.OnExit(0, "exited with code 1");
  EXPECT_EQ(m.lead(), 1);
  ASSERT_TRUE(d.send);
  EXPECT_EQ(d.send->store_addr, "10.0.0.1");  // the groups meet at rank 1's store now
  EXPECT_EQ(d.send->store_port, 29501);
}

TEST_F(MembershipTest, BelowMinReplicasTheAttemptFails) {
  Membership m(3, 2, &clock_);
  HelloAll(m);
  EXPECT_FALSE(m.OnExit(2, "killed by signal 9").fail);
  Membership::Decision d = m.OnExit(0, "killed by signal 9");
  EXPECT_TRUE(d.fail);
  EXPECT_FALSE(d.send);
  EXPECT_TRUE(d.launch.empty());
  EXPECT_EQ(d.failure,
            "rank 0 lost: killed by signal 9; 1 live replica left, fewer than fault_tolerance.min_replicas (2)");
}

TEST_F(MembershipTest, AnEvictedRankIsReplacedOnlyOnceItsProcessEnded) {
  Membership m(2, 1, &clock_);
  HelloAll(m);
  Membership::Decision d = m.OnLost(1, "evicted: no step progress");
  ASSERT_TRUE(d.send);
  EXPECT_EQ(d.send->ranks, (Ranks{0}));
  EXPECT_TRUE(d.launch.empty());
  EXPECT_EQ(m.state(1), State::kLost);
  // The old process reconnecting is not taken back.
  EXPECT_FALSE(m.OnHello(1, "10.0.0.1", 29501).send);
  EXPECT_FALSE(m.OnLost(1, "stream lost").send);  // lost once
  d = m.OnExit(1, "killed by signal 9");
  EXPECT_FALSE(d.send);  // the membership changed already
  EXPECT_EQ(d.launch, Ranks{1});
  EXPECT_EQ(m.epoch(), 2);
}

TEST_F(MembershipTest, AStreamLostLongerThanTheGraceIsNamed) {
  Membership m(3, 1, &clock_);
  HelloAll(m);
  m.OnStreamLost(1);
  m.OnStreamLost(2);
  clock_.Advance(std::chrono::milliseconds(900));
  EXPECT_TRUE(m.StreamsLost().empty());
  m.OnHello(2, "10.0.0.2", 29502);  // back in time
  clock_.Advance(std::chrono::milliseconds(200));
  EXPECT_EQ(m.StreamsLost(), (Ranks{1}));
  m.OnLost(1, "lost its stream without a result");
  EXPECT_TRUE(m.StreamsLost().empty());
}

TEST_F(MembershipTest, ReplacementsThatKeepFailingFailTheAttempt) {
  Membership m(2, 1, &clock_);
  HelloAll(m);
  EXPECT_EQ(m.OnExit(1, "killed by signal 9").launch, Ranks{1});
  EXPECT_EQ(m.OnExit(1, "exited with code 1").launch, Ranks{1});  // before its hello: 1 failed
  m.OnHello(1, "10.0.0.1", 29501);
  EXPECT_EQ(m.OnExit(1, "exited with code 1").launch, Ranks{1});  // joined, never committed: 2 failed
  Membership::Decision d = m.OnExit(1, "exited with code 1");
  EXPECT_TRUE(d.fail);
  EXPECT_EQ(d.failure,
            "rank 1: 3 replacements in a row ended before they committed a step (the last: exited with code 1)");
}

TEST_F(MembershipTest, ACommitResetsTheCountOfFailedReplacements) {
  Membership m(2, 1, &clock_);
  HelloAll(m);
  for (int round = 0; round < 5; ++round) {
    EXPECT_EQ(m.OnExit(1, "killed by signal 9").launch, Ranks{1});
    EXPECT_EQ(m.OnExit(1, "exited with code 1").launch, Ranks{1});
    m.OnHello(1, "10.0.0.1", 29501);
    EXPECT_EQ(m.OnReport(1, {ReplicaReport::Kind::kCommitted, m.epoch(), 10}).healed_rank, 1);
  }
}

TEST_F(MembershipTest, BeforeTheGroupFormedNothingIsDecided) {
  Membership m(2, 1, &clock_);
  m.OnHello(0, "10.0.0.0", 29500);
  Membership::Decision d = m.OnExit(1, "exited with code 1");
  EXPECT_FALSE(d.send);
  EXPECT_FALSE(d.fail);  // the attempt's own rules decide (a whole-group failure)
  EXPECT_TRUE(d.launch.empty());
  EXPECT_FALSE(m.OnLost(0, "stream lost").send);
}

TEST_F(MembershipTest, AMemberThatMissedAMembershipGetsItAgain) {
  Membership m(3, 1, &clock_);
  HelloAll(m);
  m.OnExit(2, "killed by signal 9");
  Membership::Decision d = m.OnReport(0, {ReplicaReport::Kind::kGroupBroken, 1, 5, "connection closed"});
  ASSERT_TRUE(d.send);
  EXPECT_EQ(d.send->epoch, 2);
  EXPECT_EQ(d.to, (Ranks{0}));
  // A report of the current epoch waits for the death that broke it.
  EXPECT_FALSE(m.OnReport(0, {ReplicaReport::Kind::kGroupBroken, 2, 5, "connection closed"}).send);
  // A member's reconnection gets the current membership, unchanged.
  d = m.OnHello(1, "10.0.0.1", 29501);
  ASSERT_TRUE(d.send);
  EXPECT_EQ(d.send->epoch, 2);
  EXPECT_EQ(d.to, (Ranks{1}));
  EXPECT_EQ(m.epoch(), 2);
}

// Elastic: a job started with 2 of its 3 ranks grows by launching rank 2,
// which joins as a replacement does (it is not counted as healing), and
// shrinks from the top: members left out are told and end, then are parked.
TEST_F(MembershipTest, AnElasticJobStartsSmallGrowsAndShrinksFromTheTop) {
  Membership m(3, 1, &clock_, /*started=*/2);
  EXPECT_EQ(m.state(2), State::kParked);
  EXPECT_FALSE(m.OnHello(0, "10.0.0.0", 29500).send);
  Membership::Decision d = m.OnHello(1, "10.0.0.1", 29501);
  ASSERT_TRUE(d.send);
  EXPECT_EQ(d.send->ranks, (Ranks{0, 1}));
  EXPECT_EQ(d.event, "membership 1: ranks 0,1 (2 of 3 ranks connected)");
  EXPECT_EQ(m.size(), 2);
  EXPECT_EQ(m.OnExit(2, "exited with code 1").launch, Ranks{}) << "a parked rank is not replaced";

  d = m.Resize(3, "slots came free");
  EXPECT_EQ(d.launch, Ranks{2});
  EXPECT_FALSE(d.send) << "it joins once it connected";
  EXPECT_EQ(d.event, "growing to 3 ranks (slots came free): launching rank 2");
  EXPECT_EQ(m.healing(), 0);
  EXPECT_EQ(m.size(), 3);
  d = m.OnHello(2, "10.0.0.2", 29502);
  ASSERT_TRUE(d.send);
  EXPECT_EQ(d.send->ranks, (Ranks{0, 1, 2}));
  EXPECT_EQ(d.event, "membership 2: ranks 0-2 (rank 2 joined: the job grows)");
  EXPECT_EQ(m.OnReport(2, {ReplicaReport::Kind::kCommitted, 2, 9, "", 0.1, true, 100}).healed_rank, -1);

  d = m.Resize(1, "trainctl scale");
  ASSERT_TRUE(d.send);
  EXPECT_EQ(d.send->ranks, (Ranks{0}));
  EXPECT_EQ(d.to, (Ranks{0, 1, 2})) << "the ranks leaving are told too: they end";
  EXPECT_EQ(d.event, "membership 3: ranks 0 (ranks 1,2 leave: trainctl scale)");
  EXPECT_TRUE(d.launch.empty() && d.kill.empty());
  EXPECT_EQ(m.state(1), State::kLeaving);
  EXPECT_EQ(m.size(), 1);
  EXPECT_EQ(m.running(), 3);
  EXPECT_FALSE(m.OnLost(1, "stream lost").send) << "a rank leaving is not lost";
  d = m.OnExit(1, "exited with code 0");
  EXPECT_EQ(d.parked, 1);
  EXPECT_TRUE(d.launch.empty());
  EXPECT_EQ(d.event, "rank 1 left (exited with code 0)");
  EXPECT_EQ(m.OnExit(2, "exited with code 0").parked, 2);
  EXPECT_EQ(m.running(), 1);
  EXPECT_EQ(m.state(2), State::kParked);
}

TEST_F(MembershipTest, ShrinkingEndsAReplacementNotJoinedYetAndALostRankIsNotReplaced) {
  Membership m(4, 1, &clock_);
  HelloAll(m);
  EXPECT_EQ(m.OnExit(3, "killed by signal 9").launch, Ranks{3});
  m.OnLost(2, "evicted as hung");  // its process still ends
  Membership::Decision d = m.Resize(2, "shrunk for job j2");
  EXPECT_EQ(d.kill, Ranks{3});
  EXPECT_FALSE(d.send) << "no member leaves";
  EXPECT_EQ(m.healing(), 0);
  d = m.OnExit(2, "killed by signal 9");
  EXPECT_EQ(d.parked, 2);
  EXPECT_TRUE(d.launch.empty());
  EXPECT_EQ(m.OnExit(3, "killed by signal 9").parked, 3);
  EXPECT_EQ(m.running(), 2);
  EXPECT_EQ(m.view().ranks, (Ranks{0, 1}));
}

TEST_F(MembershipTest, ShrinkingBeforeTheGroupFormedFormsItWithTheRanksLeft) {
  Membership m(3, 1, &clock_);
  m.OnHello(0, "10.0.0.0", 29500);
  m.OnHello(1, "10.0.0.1", 29501);
  Membership::Decision d = m.Resize(2, "trainctl scale");
  EXPECT_EQ(d.kill, Ranks{2});
  ASSERT_TRUE(d.send);
  EXPECT_EQ(d.send->ranks, (Ranks{0, 1}));
  EXPECT_EQ(m.OnExit(2, "killed by signal 15").parked, 2);
}

MembershipView Held(int64_t epoch, Ranks ranks) {
  MembershipView v;
  v.epoch = epoch;
  v.ranks = std::move(ranks);
  v.store_addr = "10.0.0." + std::to_string(v.ranks.front());
  v.store_port = 29500 + v.ranks.front();
  return v;
}

// After a coordinator restart: the group is taken on from the newest
// membership its ranks hold; a rank that died meanwhile is replaced.
TEST_F(MembershipTest, AnAdoptedGroupIsTakenOnFromTheNewestMembershipItsRanksHold) {
  Membership m = Membership::Adopting(3, 1, &clock_);
  EXPECT_TRUE(m.adopting());
  EXPECT_FALSE(m.OnReattach(0, "10.0.0.0", 29500, Held(5, {0, 1, 2})).send);
  EXPECT_FALSE(m.OnGone(1).send);
  Membership::Decision d = m.OnReattach(2, "10.0.0.2", 29502, Held(4, {0, 1, 2}));
  EXPECT_FALSE(m.adopting());
  ASSERT_TRUE(d.send);
  EXPECT_EQ(d.send->epoch, 6) << "above every epoch a rank holds";
  EXPECT_EQ(d.send->ranks, (Ranks{0, 2}));
  EXPECT_EQ(d.send->store_addr, "10.0.0.0");
  EXPECT_EQ(d.event, "membership 6: ranks 0,2 (the coordinator restarted; rank 1 ended while it was away)");
  EXPECT_EQ(d.launch, Ranks{1});
  EXPECT_EQ(m.healing(), 1);
  clock_.Advance(std::chrono::seconds(2));
  d = m.OnHello(1, "10.0.0.1", 29601);
  ASSERT_TRUE(d.send);
  EXPECT_EQ(d.send->ranks, (Ranks{0, 2, 1}));
  EXPECT_EQ(m.OnReport(1, {ReplicaReport::Kind::kCommitted, 7, 9, "", 0.1, true, 100}).healed_rank, 1);
}

TEST_F(MembershipTest, AnAdoptedGroupAsItWasGetsItsMembershipAgainAndAWaitingReplacementJoins) {
  Membership same = Membership::Adopting(2, 1, &clock_);
  same.OnReattach(1, "10.0.0.1", 29501, Held(3, {0, 1}));
  Membership::Decision d = same.OnReattach(0, "10.0.0.0", 29500, Held(3, {0, 1}));
  ASSERT_TRUE(d.send);
  EXPECT_EQ(d.send->epoch, 3);
  EXPECT_EQ(d.to, (Ranks{0, 1}));
  EXPECT_TRUE(d.launch.empty());
  EXPECT_EQ(d.event, "the coordinator restarted: membership 3: ranks 0,1 (" + Held(3, {0, 1}).reason + ") taken on");

  Membership waiting = Membership::Adopting(3, 1, &clock_);
  waiting.OnReattach(0, "10.0.0.0", 29500, Held(4, {0, 2}));
  waiting.OnReattach(1, "10.0.0.1", 29501, MembershipView{});  // a replacement that had not joined
  d = waiting.OnReattach(2, "10.0.0.2", 29502, Held(4, {0, 2}));
  ASSERT_TRUE(d.send);
  EXPECT_EQ(d.send->epoch, 5);
  EXPECT_EQ(d.send->ranks, (Ranks{0, 2, 1}));
}

TEST_F(MembershipTest, AnAdoptedGroupBelowMinReplicasOrNotFormedFails) {
  Membership few = Membership::Adopting(3, 2, &clock_);
  few.OnGone(0);
  few.OnGone(1);
  Membership::Decision d = few.OnReattach(2, "10.0.0.2", 29502, Held(2, {0, 1, 2}));
  EXPECT_TRUE(d.fail);
  EXPECT_NE(d.failure.find("1 live replica of membership 2 reattached, fewer than fault_tolerance.min_replicas (2)"),
            std::string::npos)
      << d.failure;

  Membership unformed = Membership::Adopting(2, 1, &clock_);
  unformed.OnReattach(0, "10.0.0.0", 29500, MembershipView{});
  d = unformed.OnReattach(1, "10.0.0.1", 29501, MembershipView{});
  ASSERT_TRUE(d.send) << "nobody lost: the first membership forms as at a start";
  EXPECT_EQ(d.send->epoch, 1);
  Membership lost = Membership::Adopting(2, 1, &clock_);
  lost.OnReattach(0, "10.0.0.0", 29500, MembershipView{});
  EXPECT_TRUE(lost.OnGone(1).fail);
}

// FSDP HYBRID: a shard group (2 ranks here) is one replica. A lost rank
// takes its shard group out (the other rank is told and ends), both are
// replaced, and they join together.
TEST_F(MembershipTest, AShardGroupLeavesAndComesBackAsOneReplica) {
  Membership m(4, 1, &clock_, 0, 2);
  ASSERT_EQ(HelloAll(m).send->ranks, (Ranks{0, 1, 2, 3}));
  Membership::Decision d = m.OnExit(1, "killed by signal 9");
  ASSERT_TRUE(d.send);
  EXPECT_EQ(d.send->epoch, 2);
  EXPECT_EQ(d.send->ranks, (Ranks{2, 3}));
  EXPECT_EQ(d.send->store_addr, "10.0.0.2");
  EXPECT_EQ(d.to, (Ranks{2, 3, 0})) << "rank 0 is told it is left out";
  EXPECT_EQ(d.event,
            "membership 2: ranks 2,3 (rank 1 lost: killed by signal 9; rank 0 of its shard group leaves with it)");
  EXPECT_EQ(d.launch, Ranks{1});
  EXPECT_EQ(m.state(0), State::kLost);
  EXPECT_EQ(m.live_replicas(), 1);
  EXPECT_EQ(m.healing_replicas(), 1);
  EXPECT_EQ(m.healing(), 2);

  // Rank 0 leaves; its end launches its replacement.
  d = m.OnExit(0, "stopped: left");
  EXPECT_FALSE(d.send);
  EXPECT_FALSE(d.fail);
  EXPECT_EQ(d.launch, Ranks{0});
  // A replica joins once all its ranks said hello, in launch-rank order.
  EXPECT_FALSE(m.OnHello(1, "10.0.0.1", 29601).send);
  EXPECT_EQ(m.state(1), State::kHealing);
  clock_.Advance(std::chrono::seconds(1));
  d = m.OnHello(0, "10.0.0.0", 29600);
  ASSERT_TRUE(d.send);
  EXPECT_EQ(d.send->epoch, 3);
  EXPECT_EQ(d.send->ranks, (Ranks{2, 3, 0, 1}));
  EXPECT_EQ(d.to, (Ranks{2, 3, 0, 1}));
  EXPECT_EQ(d.event, "membership 3: ranks 2,3,0,1 (ranks 0,1 joined: their replacements connected)");
  EXPECT_EQ(m.live_replicas(), 2);
  EXPECT_EQ(m.healing_replicas(), 0);
  clock_.Advance(std::chrono::milliseconds(500));
  EXPECT_DOUBLE_EQ(m.OnReport(0, {ReplicaReport::Kind::kCommitted, 3, 8, "", 0.2, true, 10}).heal_seconds, 1.5);

  // A replacement that ends before its shard-mate said hello is launched
  // again; the replica joins with the new one.
  m.OnExit(3, "killed by signal 9");
  m.OnExit(2, "stopped: left");
  m.OnHello(2, "10.0.0.2", 29700);
  d = m.OnExit(2, "exit 1");
  EXPECT_EQ(d.launch, Ranks{2});
  EXPECT_FALSE(m.OnHello(3, "10.0.0.3", 29703).send) << "rank 2's new process has not said hello";
  d = m.OnHello(2, "10.0.0.2", 29702);
  ASSERT_TRUE(d.send);
  EXPECT_EQ(d.send->ranks, (Ranks{0, 1, 2, 3}));
}

TEST_F(MembershipTest, MinReplicasCountsShardGroups) {
  Membership m(4, 2, &clock_, 0, 2);
  HelloAll(m);
  const Membership::Decision d = m.OnLost(3, "evicted: slow");
  EXPECT_TRUE(d.fail);
  EXPECT_NE(d.failure.find("1 live replica left, fewer than fault_tolerance.min_replicas (2)"), std::string::npos)
      << d.failure;
  EXPECT_THROW(Membership(5, 1, &clock_, 0, 2), std::invalid_argument);
}

TEST_F(MembershipTest, AnElasticJobOfShardGroupsResizesByWholeGroups) {
  Membership m(6, 1, &clock_, 2, 2);
  EXPECT_EQ(m.state(2), State::kParked);
  m.OnHello(0, "10.0.0.0", 29500);
  ASSERT_EQ(m.OnHello(1, "10.0.0.1", 29501).send->ranks, (Ranks{0, 1}));
  Membership::Decision d = m.Resize(5, "scaled to 5");
  EXPECT_EQ(d.launch, (Ranks{2, 3})) << "5 ranks round down to 2 shard groups";
  EXPECT_FALSE(m.OnHello(2, "10.0.0.2", 29502).send);
  d = m.OnHello(3, "10.0.0.3", 29503);
  ASSERT_TRUE(d.send);
  EXPECT_EQ(d.send->ranks, (Ranks{0, 1, 2, 3}));
  EXPECT_EQ(d.event, "membership 2: ranks 0-3 (ranks 2,3 joined: the job grows)");
  d = m.Resize(1, "shrunk");
  ASSERT_TRUE(d.send);
  EXPECT_EQ(d.send->ranks, (Ranks{0, 1})) << "at least one shard group";
  EXPECT_EQ(d.to, (Ranks{0, 1, 2, 3}));
  EXPECT_EQ(m.size(), 2);
}

TEST_F(MembershipTest, AnAdoptedShardGroupThatLostARankLeavesAndComesBack) {
  Membership m = Membership::Adopting(4, 1, &clock_, 2);
  m.OnReattach(0, "10.0.0.0", 29500, Held(3, {0, 1, 2, 3}));
  m.OnGone(1);
  m.OnReattach(2, "10.0.0.2", 29502, Held(3, {0, 1, 2, 3}));
  Membership::Decision d = m.OnReattach(3, "10.0.0.3", 29503, Held(3, {0, 1, 2, 3}));
  ASSERT_TRUE(d.send);
  EXPECT_EQ(d.send->epoch, 4);
  EXPECT_EQ(d.send->ranks, (Ranks{2, 3}));
  EXPECT_EQ(d.to, (Ranks{2, 3, 0})) << "rank 0 is told it is left out";
  EXPECT_EQ(d.launch, Ranks{1});
  EXPECT_EQ(m.state(0), State::kLost);
  EXPECT_EQ(m.OnExit(0, "stopped: left").launch, Ranks{0});
  m.OnHello(0, "10.0.0.0", 29600);
  d = m.OnHello(1, "10.0.0.1", 29601);
  ASSERT_TRUE(d.send);
  EXPECT_EQ(d.send->ranks, (Ranks{2, 3, 0, 1}));

  // A replacement that had not joined waits for its shard-mate gone meanwhile.
  Membership w = Membership::Adopting(4, 1, &clock_, 2);
  w.OnReattach(0, "10.0.0.0", 29500, Held(5, {0, 1}));
  w.OnReattach(1, "10.0.0.1", 29501, Held(5, {0, 1}));
  w.OnReattach(2, "10.0.0.2", 29502, MembershipView{});
  d = w.OnGone(3);
  ASSERT_TRUE(d.send);
  EXPECT_EQ(d.send->ranks, (Ranks{0, 1}));
  EXPECT_EQ(d.launch, Ranks{3});
  EXPECT_EQ(w.state(2), State::kHealing);
  d = w.OnHello(3, "10.0.0.3", 29603);
  ASSERT_TRUE(d.send);
  EXPECT_EQ(d.send->ranks, (Ranks{0, 1, 2, 3}));
}

TEST_F(MembershipTest, LossesInOneBatchAreOneEpochNamedByRanges) {
  Membership m(16, 1, &clock_);
  HelloAll(m);
  m.BeginBatch();
  for (int32_t r = 3; r <= 12; ++r) {
    const Membership::Decision d = m.OnLost(r, "lost its stream without a result");
    EXPECT_FALSE(d.send) << "rank " << r << ": the batch sends once";
    EXPECT_FALSE(d.fail);
  }
  Membership::Decision d = m.OnExit(14, "killed by signal 9");
  EXPECT_FALSE(d.send);
  EXPECT_EQ(d.launch, Ranks{14}) << "a replacement starts at once, batch or not";
  EXPECT_EQ(m.epoch(), 1);
  d = m.EndBatch();
  ASSERT_TRUE(d.send);
  EXPECT_EQ(d.send->epoch, 2) << "eleven losses, one epoch";
  EXPECT_EQ(d.send->ranks, (Ranks{0, 1, 2, 13, 15}));
  EXPECT_EQ(d.to, (Ranks{0, 1, 2, 13, 15}));
  EXPECT_EQ(d.event,
            "membership 2: ranks 0-2,13,15 (ranks 3-12 lost: lost its stream without a result; rank 14 lost: killed "
            "by signal 9)");
  ASSERT_TRUE(d.delta) << "the survivors hold epoch 1: they get the change";
  EXPECT_EQ(d.delta->base_epoch, 1);
  EXPECT_EQ(d.delta->removed, (Ranks{3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 14}));
  EXPECT_TRUE(d.delta->added.empty());
  EXPECT_EQ(d.delta->digest, MembershipDigest({0, 1, 2, 13, 15}));
  EXPECT_FALSE(m.EndBatch().send) << "the batch is closed";
  m.BeginBatch();
  EXPECT_FALSE(m.EndBatch().send) << "a batch that changed nothing sends nothing";
  EXPECT_EQ(m.epoch(), 2);
}

TEST_F(MembershipTest, ABatchTellsTheShardMatesAndFailsBelowMinReplicasNamingEveryLoss) {
  Membership m(8, 1, &clock_, 0, 2);
  HelloAll(m);
  m.BeginBatch();
  m.OnLost(1, "evicted as hung");
  m.OnLost(2, "evicted as hung");
  Membership::Decision d = m.EndBatch();
  ASSERT_TRUE(d.send);
  EXPECT_EQ(d.send->ranks, (Ranks{4, 5, 6, 7}));
  EXPECT_EQ(d.to, (Ranks{4, 5, 6, 7, 0, 3})) << "the shard-mates are told they leave";
  EXPECT_EQ(d.send->reason, "ranks 1,2 lost: evicted as hung; ranks 0,3 of their shard groups leave with them");

  m.BeginBatch();
  EXPECT_FALSE(m.OnLost(4, "killed by signal 9").fail);
  d = m.OnLost(7, "killed by signal 9");
  EXPECT_TRUE(d.fail);
  EXPECT_EQ(d.failure,
            "ranks 4,7 lost: killed by signal 9; ranks 5,6 of their shard groups leave with them; 0 live replicas "
            "left, fewer than fault_tolerance.min_replicas (1)");
  EXPECT_FALSE(m.EndBatch().send) << "a failed attempt gets no membership";
}

TEST_F(MembershipTest, ReplacementsJoinTogetherOrAfterTheWait) {
  Membership m(4, 1, &clock_);
  HelloAll(m);
  m.BeginBatch();
  m.OnExit(1, "killed by signal 9");
  m.OnExit(2, "killed by signal 9");
  ASSERT_EQ(m.EndBatch().send->epoch, 2);
  EXPECT_FALSE(m.OnHello(1, "10.0.0.1", 29601).send) << "rank 2's replacement is on its way";
  clock_.Advance(std::chrono::milliseconds(500));
  EXPECT_FALSE(m.OnPass().send) << "within kJoinWait";
  Membership::Decision d = m.OnHello(2, "10.0.0.2", 29602);
  ASSERT_TRUE(d.send);
  EXPECT_EQ(d.send->epoch, 3) << "two replacements, one epoch";
  EXPECT_EQ(d.send->ranks, (Ranks{0, 3, 1, 2}));
  EXPECT_EQ(d.send->reason, "ranks 1,2 joined: their replacements connected");
  ASSERT_TRUE(d.delta);
  EXPECT_EQ(d.delta->base_epoch, 2);
  EXPECT_TRUE(d.delta->removed.empty());
  EXPECT_EQ(d.delta->added, (Ranks{1, 2}));
  EXPECT_FALSE(m.OnPass().send);

  // One that waits too long for the other: the first joins at the pass
  // after kJoinWait, the other when it comes.
  m.OnExit(1, "killed by signal 9");
  m.OnExit(2, "killed by signal 9");
  ASSERT_EQ(m.epoch(), 5);
  EXPECT_FALSE(m.OnHello(2, "10.0.0.2", 29702).send);
  clock_.Advance(Membership::kJoinWait);
  d = m.OnPass();
  ASSERT_TRUE(d.send);
  EXPECT_EQ(d.send->ranks, (Ranks{0, 3, 2}));
  d = m.OnHello(1, "10.0.0.1", 29701);
  ASSERT_TRUE(d.send);
  EXPECT_EQ(d.send->ranks, (Ranks{0, 3, 2, 1}));
  EXPECT_EQ(d.send->epoch, 7);
}

}  // namespace
}  // namespace trainyard
