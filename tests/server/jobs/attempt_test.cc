// Attempt alone: how its ranks' ends are read — exits, reported results,
// adopted ranks' unknown exits, external ranks' streams — the first failure
// as the root cause, stops the coordinator asked for, and the AttemptEnd
// the restart policy gets.
#include "server/jobs/attempt.h"

#include <gtest/gtest.h>

namespace trainyard {
namespace {

using std::chrono::seconds;
const SteadyTime kT0 = SteadyTime{} + seconds(1000);

TEST(Attempt, EveryRankSucceeding) {
  Attempt a(1, 2, /*external=*/false);
  EXPECT_FALSE(a.OnExit(RankExit::Exited("j", 1, 0, 0), false).ended);
  EXPECT_FALSE(a.OnExit(RankExit::Exited("j", 1, 0, 0), false).ended) << "an end is counted once";
  Attempt::Update u = a.OnExit(RankExit::Exited("j", 1, 1, 0), false);
  EXPECT_TRUE(u.ended);
  EXPECT_FALSE(u.failed_now);
  const AttemptEnd end = a.End();
  EXPECT_TRUE(end.all_succeeded);
  EXPECT_FALSE(end.failed);
  EXPECT_EQ(end.num_processes, 2);
}

TEST(Attempt, TheFirstFailureIsTheRootCause) {
  Attempt a(3, 2, false);
  Attempt::Update first = a.OnExit(RankExit::Exited("j", 3, 1, 1), false);
  EXPECT_TRUE(first.failed_now);
  EXPECT_EQ(a.failure().rank, 1);
  EXPECT_EQ(a.failure().reason, "rank 1 exited with code 1");
  // Rank 0 is killed by the stop that followed: no second failure.
  Attempt::Update second = a.OnExit(RankExit::Killed("j", 3, 0, 9), false);
  EXPECT_FALSE(second.failed_now);
  EXPECT_TRUE(second.ended);
  const AttemptEnd end = a.End();
  EXPECT_TRUE(end.failed);
  EXPECT_FALSE(end.all_succeeded);
  EXPECT_EQ(end.failure, "rank 1 exited with code 1");
}

// Rank 0 reports first that its peer went away; rank 1's own death (the
// cause) comes a moment later and is the one named.
TEST(Attempt, APeerLostIsNotTheRootCauseOfThePeersDeath) {
  Attempt a(1, 2, false);
  Attempt::Update first =
      a.OnResult(0, WorkerOutcome::kFailed, "RuntimeError: [pair.cc:561] Connection closed by peer [127.0.0.1]:17623");
  EXPECT_TRUE(first.failed_now);
  EXPECT_EQ(a.failure().rank, 0);
  Attempt::Update second = a.OnExit(RankExit::Killed("j", 1, 1, 9), false);
  EXPECT_FALSE(second.failed_now) << "one failure: the group is stopped once";
  EXPECT_EQ(a.failure().rank, 1);
  EXPECT_NE(a.failure().reason.find("killed by signal 9"), std::string::npos) << a.failure().reason;
  // A third, itself a symptom, changes nothing.
  a.OnResult(1, WorkerOutcome::kFailed, "Connection reset by peer");
  EXPECT_EQ(a.failure().rank, 1);
}

TEST(Attempt, AReportedErrorFailsBeforeTheExitDoes) {
  Attempt a(1, 2, false);
  EXPECT_TRUE(a.OnResult(0, WorkerOutcome::kFailed, "CUDA out of memory").failed_now);
  EXPECT_EQ(a.failure().reason, "rank 0: CUDA out of memory");
  EXPECT_FALSE(a.OnExit(RankExit::Exited("j", 1, 0, 1), false).failed_now);
  EXPECT_EQ(a.failure().reason, "rank 0: CUDA out of memory");
}

TEST(Attempt, PreemptionIsNoFailure) {
  Attempt a(1, 2, false);
  EXPECT_EQ(a.OnResult(0, WorkerOutcome::kPreempted, "SIGTERM").event, "preempted: SIGTERM");
  EXPECT_EQ(a.OnResult(1, WorkerOutcome::kPreempted, "SIGTERM").event, "") << "said once";
  a.OnExit(RankExit::Exited("j", 1, 0, kExitPreempted), false);
  EXPECT_TRUE(a.OnExit(RankExit::Exited("j", 1, 1, kExitPreempted), false).ended);
  const AttemptEnd end = a.End();
  EXPECT_TRUE(end.preempted);
  EXPECT_FALSE(end.failed);
  EXPECT_FALSE(end.all_succeeded);
}

TEST(Attempt, EndsOfAStopWeAskedForAreNoFailure) {
  Attempt a(1, 2, false);
  a.RequestStop(Attempt::Stop::kCancel);
  EXPECT_FALSE(a.OnExit(RankExit::Killed("j", 1, 0, 2), false).failed_now);
  EXPECT_FALSE(a.OnResult(1, WorkerOutcome::kStopped, "stopped").failed_now);
  EXPECT_TRUE(a.OnExit(RankExit::Exited("j", 1, 1, kExitStopped), false).ended);
  EXPECT_TRUE(a.End().cancel_requested);
  EXPECT_FALSE(a.End().failed);

  Attempt b(1, 1, false);
  b.RequestStop(Attempt::Stop::kForRestart);
  b.OnExit(RankExit::Exited("j", 1, 0, kExitStopped), false);
  EXPECT_TRUE(b.End().stopped_for_restart);
  EXPECT_FALSE(b.End().cancel_requested);
}

TEST(Attempt, AStoppedExitNobodyAskedForIsAFailure) {
  Attempt a(1, 1, false);
  EXPECT_TRUE(a.OnExit(RankExit::Exited("j", 1, 0, kExitStopped), false).failed_now);
}

TEST(Attempt, AnAdoptedRanksEndIsWhatItReported) {
  Attempt a(2, 2, false);
  a.OnResult(0, WorkerOutcome::kSucceeded, "");
  a.OnResult(1, WorkerOutcome::kSucceeded, "");
  EXPECT_FALSE(a.OnExit(RankExit::Unknown("j", 2, 0), /*recovering=*/false).failed_now);
  EXPECT_TRUE(a.OnExit(RankExit::Unknown("j", 2, 1), false).ended);
  EXPECT_TRUE(a.End().all_succeeded);
}

TEST(Attempt, AnAdoptedRankGoneWithoutAWordWhileRecoveringIsTheCoordinatorsLoss) {
  Attempt a(2, 2, false);
  Attempt::Update u = a.OnExit(RankExit::Unknown("j", 2, 1), /*recovering=*/true);
  EXPECT_TRUE(u.failed_now);
  a.OnExit(RankExit::Unknown("j", 2, 0), true);
  const AttemptEnd end = a.End();
  EXPECT_TRUE(end.failed);
  EXPECT_TRUE(end.reattach_failed);
}

TEST(Attempt, UsageErrorsAreMarked) {
  Attempt a(1, 1, false);
  a.OnExit(RankExit::Exited("j", 1, 0, kExitUsage), false);
  EXPECT_TRUE(a.End().usage_error);
  EXPECT_TRUE(a.End().failed);
}

TEST(Attempt, WhoMayAttach) {
  Attempt a(1, 2, /*external=*/true);
  EXPECT_EQ(a.CheckAttach("j", 2).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(a.CheckAttach("j", -1).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(a.CheckAttach("j", 0).ok());
  a.Attach(0, std::make_shared<WorkerChannel>());
  EXPECT_EQ(a.CheckAttach("j", 0).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_FALSE(a.all_attached());
  a.Fail(-1, "hung");
  EXPECT_EQ(a.CheckAttach("j", 1).code(), absl::StatusCode::kFailedPrecondition) << "stopping: join the next one";
}

TEST(Attempt, ExternalRanksJoinAfterRankZeroSaysWhereTheRendezvousIs) {
  Attempt a(1, 2, true);
  std::string event;
  EXPECT_EQ(a.Join("j", 1, "", 0, &event).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(a.Join("j", 0, "", 0, &event).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(a.Join("j", 0, "10.0.0.1", 70000, &event).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(a.Join("j", 0, "10.0.0.1", 29500, &event).ok());
  EXPECT_EQ(event, "rank 0 joined; rendezvous at 10.0.0.1:29500");
  EXPECT_EQ(a.place().master_addr, "10.0.0.1");
  EXPECT_EQ(a.place().master_port, 29500);
  event.clear();
  EXPECT_TRUE(a.Join("j", 1, "", 0, &event).ok());
  EXPECT_EQ(event, "");
}

TEST(Attempt, AnExternalRankThatReportedAndLeftHasEnded) {
  Attempt a(1, 1, true);
  auto ch = std::make_shared<WorkerChannel>();
  a.Attach(0, ch);
  a.OnResult(0, WorkerOutcome::kSucceeded, "");
  // Another channel of the same rank (an old stream) is ignored.
  EXPECT_FALSE(a.Detach("j", 0, std::make_shared<WorkerChannel>(), kT0));
  const std::optional<RankExit> end = a.Detach("j", 0, ch, kT0);
  ASSERT_TRUE(end);
  EXPECT_EQ(end->outcome, WorkerOutcome::kSucceeded);
  EXPECT_TRUE(a.OnExit(*end, false).ended);
  EXPECT_TRUE(a.End().all_succeeded);
}

TEST(Attempt, AnExternalRankLostWithoutAResultHasTheReattachTimeToComeBack) {
  Attempt a(1, 2, true);
  auto ch0 = std::make_shared<WorkerChannel>(), ch1 = std::make_shared<WorkerChannel>();
  a.Attach(0, ch0);
  a.Attach(1, ch1);
  EXPECT_FALSE(a.Detach("j", 1, ch1, kT0));
  EXPECT_TRUE(a.LostRanks("j", kT0 + seconds(5), seconds(10)).empty());
  // It came back in time: nothing is lost.
  a.Attach(1, std::make_shared<WorkerChannel>());
  EXPECT_TRUE(a.LostRanks("j", kT0 + seconds(60), seconds(10)).empty());
  a.Detach("j", 1, ch0, kT0 + seconds(60));  // not rank 1's channel: ignored
  // Lost for good this time.
  auto ch1b = std::make_shared<WorkerChannel>();
  Attempt b(1, 2, true);
  b.Attach(0, ch0);
  b.Attach(1, ch1b);
  b.Detach("j", 1, ch1b, kT0);
  const std::vector<RankExit> lost = b.LostRanks("j", kT0 + seconds(11), seconds(10));
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].rank, 1);
  EXPECT_EQ(lost[0].outcome, WorkerOutcome::kFailed);
  EXPECT_NE(lost[0].description.find("did not reconnect within 10 s"), std::string::npos) << lost[0].description;
  EXPECT_TRUE(b.OnExit(lost[0], false).failed_now);
}

TEST(Attempt, ExternalRanksNotConnectedWhenItStopsHaveEnded) {
  Attempt a(4, 3, true);
  a.Attach(0, std::make_shared<WorkerChannel>());
  a.OnResult(0, WorkerOutcome::kPreempted, "SIGTERM");
  const std::vector<RankExit> gone = a.LostRanks("j", kT0, seconds(600));
  ASSERT_EQ(gone.size(), 2u);  // ranks 1 and 2; rank 0 is still connected
  for (const RankExit& e : gone) EXPECT_EQ(e.outcome, WorkerOutcome::kPreempted) << e.description;
  Attempt launched(1, 2, /*external=*/false);
  launched.Fail(-1, "hung");
  EXPECT_TRUE(launched.LostRanks("j", kT0, seconds(0)).empty()) << "a launcher reports its own ranks";
}

TEST(Attempt, ALaunchedRankOnAnotherHostLostWithoutAnEndIsEndedAfterTheGraceItsNodePresumedLost) {
  Attempt a(1, 3, /*external=*/false);
  a.WatchForLostNodes(seconds(5));
  std::vector<std::shared_ptr<WorkerChannel>> ch;
  for (int32_t r = 0; r < 3; ++r) {
    ch.push_back(std::make_shared<WorkerChannel>());
    a.Attach(r, ch[r]);
    a.place().nodes[r] = r < 2 ? "n1" : "n2";
  }
  // Rank 0 reported its end before its stream closed: the launcher's exit
  // is awaited as usual. Rank 2's stream ended without a word.
  a.OnResult(0, WorkerOutcome::kSucceeded, "");
  EXPECT_FALSE(a.Detach("j", 0, ch[0], kT0));
  EXPECT_FALSE(a.Detach("j", 2, ch[2], kT0));
  EXPECT_TRUE(a.RanksOnLostNodes("j", kT0 + seconds(4)).empty()) << "within the grace";
  const std::vector<RankExit> lost = a.RanksOnLostNodes("j", kT0 + seconds(6));
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].rank, 2);
  EXPECT_EQ(lost[0].outcome, WorkerOutcome::kFailed);
  EXPECT_NE(lost[0].description.find("rank 2 on node n2 lost its stream without a result"), std::string::npos)
      << lost[0].description;
  EXPECT_TRUE(a.OnExit(lost[0], false).failed_now);
  // The launcher's own report, when Slurm gets to it, changes nothing.
  EXPECT_FALSE(a.OnExit(RankExit::Killed("j", 1, 2, 9), false).failed_now);
  EXPECT_TRUE(a.RanksOnLostNodes("j", kT0 + seconds(60)).empty());

  // An evicted rank still connected (its node cut off: the launcher's
  // kill cannot reach it) ends after the grace too; a replacement forgets it.
  Attempt b(1, 2, /*external=*/false);
  b.WatchForLostNodes(seconds(5));
  auto c0 = std::make_shared<WorkerChannel>(), c1 = std::make_shared<WorkerChannel>();
  b.Attach(0, c0);
  b.Attach(1, c1);
  b.place().nodes[1] = "n3";
  b.Evicted(1, kT0);
  EXPECT_TRUE(b.RanksOnLostNodes("j", kT0 + seconds(5)).empty());
  const std::vector<RankExit> cut = b.RanksOnLostNodes("j", kT0 + seconds(6));
  ASSERT_EQ(cut.size(), 1u);
  EXPECT_NE(cut[0].description.find("rank 1 on node n3 was evicted and no end was reported within 5 s"),
            std::string::npos)
      << cut[0].description;
  b.Replace(1);
  EXPECT_TRUE(b.RanksOnLostNodes("j", kT0 + seconds(60)).empty());

  // Without the watch (a local launcher reaps its children), a lost stream
  // ends nothing; nor is it an external rank's loss.
  EXPECT_TRUE(a.LostRanks("j", kT0 + seconds(60), seconds(0)).empty());
  Attempt local(1, 1, false);
  auto c = std::make_shared<WorkerChannel>();
  local.Attach(0, c);
  local.Detach("j", 0, c, kT0);
  EXPECT_TRUE(local.RanksOnLostNodes("j", kT0 + seconds(600)).empty());
}

}  // namespace
}  // namespace trainyard
