// Scheduler tests: FIFO queue, slot accounting and the job lifecycle, with a
// launcher that records launches and lets the test end ranks.
#include "server/jobs/job_manager.h"

#include <gtest/gtest.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <mutex>
#include <set>
#include <tuple>

#include "common/clock.h"
#include "tests/server/coordinator_parts.h"
#include "tests/test_util.h"

namespace trainyard {
namespace {

class JobManagerTest : public ::testing::Test {
 protected:
  void SetUp() override { Open(); }

  void Open(int gpus = 0) {
    manager_.reset();
    store_.reset();
    auto store = JobStore::Open(dir_.path() + "/jobs.db");
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    JobManagerOptions o;
    o.slots = 4;
    o.state_dir = dir_.path();
    o.coordinator_addr = "127.0.0.1:1";
    o.gpus = gpus;
    o.preemption_min_run_time = std::chrono::seconds(0);
    manager_ = std::make_unique<JobManager>(store_.get(), &launcher_, &metrics_, o, &clock_);
    ASSERT_TRUE(manager_->Recover().ok());
  }

  std::string Submit(int procs) {
    auto job = manager_->Submit("max_steps: 10\nnum_processes: " + std::to_string(procs) + "\n");
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? job->id : "";
  }

  JobState StateOf(const std::string& id) {
    auto job = manager_->Get(id);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? job->state : JobState::kFailed;
  }

  void ExitAll(const std::string& id, int code) {
    auto job = manager_->Get(id);
    ASSERT_TRUE(job.ok());
    for (int r = 0; r < job->num_processes; ++r)
      manager_->workers().OnRankExit(RankExit::Exited(id, job->attempt, r, code));
  }

  TempDir dir_;
  FakeClock clock_;
  RecordingLauncher launcher_;
  ServerMetrics metrics_{std::make_shared<prometheus::Registry>()};
  std::unique_ptr<JobStore> store_;
  std::unique_ptr<JobManager> manager_;
};

TEST_F(JobManagerTest, StartsJobsWhileSlotsLastThenQueuesWithBackfill) {
  const std::string a = Submit(2), b = Submit(2), c = Submit(3), d = Submit(1), e = Submit(2);
  EXPECT_EQ(StateOf(a), JobState::kStarting);
  EXPECT_EQ(StateOf(b), JobState::kStarting);
  EXPECT_EQ(StateOf(c), JobState::kQueued);
  EXPECT_EQ(StateOf(d), JobState::kQueued);  // no slot is free
  EXPECT_EQ(manager_->free_slots(), 0);

  ExitAll(a, 0);
  EXPECT_EQ(StateOf(a), JobState::kSucceeded);
  EXPECT_EQ(StateOf(c), JobState::kQueued);  // needs 3, only 2 free: the head waits
  EXPECT_EQ(manager_->Get(c)->reason, "waiting: 2 of this host's slots free; this job needs 3");
  // d takes the one slot c will not need when b ends; e would take two.
  EXPECT_EQ(StateOf(d), JobState::kStarting);
  EXPECT_EQ(StateOf(e), JobState::kQueued);
  EXPECT_EQ(manager_->Get(e)->reason, "waiting: behind job " + c + ", which starts first");
  EXPECT_EQ(manager_->free_slots(), 1);

  ExitAll(b, 0);
  EXPECT_EQ(StateOf(c), JobState::kStarting);
  EXPECT_EQ(manager_->free_slots(), 0);
  ASSERT_EQ(launcher_.launched().size(), 4u);
  EXPECT_EQ(launcher_.launched()[2].job_id, d);
  EXPECT_EQ(launcher_.launched()[3].job_id, c);
  EXPECT_EQ(launcher_.launched()[3].world_size, 3);
}

TEST_F(JobManagerTest, RejectsJobsLargerThanTheServer) {
  auto job = manager_->Submit("num_processes: 5\n");
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(job.status().message()).find("num_processes"), std::string::npos);
  EXPECT_NE(std::string(job.status().message()).find("4 slots"), std::string::npos);
}

TEST_F(JobManagerTest, CudaJobsOnAServerWithoutGpusAreRejectedAtSubmit) {
  auto job = manager_->Submit("num_processes: 1\ndevice: cuda\n");
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(job.status().message()).find("this server has 0"), std::string::npos) << job.status();
  EXPECT_NE(std::string(job.status().message()).find("--gpus"), std::string::npos) << job.status();
}

TEST_F(JobManagerTest, GpusAreHandedOutOnePerRankNeverShared) {
  Open(/*gpus=*/3);
  EXPECT_EQ(manager_->Submit("num_processes: 4\ndevice: cuda\n").status().code(),
            absl::StatusCode::kInvalidArgument);  // more than the server has
  auto a = manager_->Submit("max_steps: 10\nnum_processes: 2\ndevice: cuda\n");
  auto b = manager_->Submit("max_steps: 10\nnum_processes: 2\ndevice: cuda\n");
  auto c = manager_->Submit("max_steps: 10\nnum_processes: 4\n");  // CPU: slots, not GPUs
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(StateOf(a->id), JobState::kStarting);
  EXPECT_EQ(StateOf(b->id), JobState::kQueued);  // one GPU free, two needed
  EXPECT_EQ(StateOf(c->id), JobState::kStarting);
  EXPECT_EQ(manager_->free_gpus(), 1);
  EXPECT_EQ(manager_->free_slots(), 0);
  ASSERT_EQ(launcher_.launched().size(), 2u);
  EXPECT_EQ(launcher_.launched()[0].gpus, (std::vector<int>{0, 1}));
  EXPECT_TRUE(launcher_.launched()[0].cuda);
  EXPECT_TRUE(launcher_.launched()[1].gpus.empty());
  // b waits at the head; a later 1-GPU job takes the GPU b will not need
  // (backfill), a later 2-GPU one waits behind b.
  auto d = manager_->Submit("max_steps: 10\nnum_processes: 1\ndevice: cuda\n");
  auto e = manager_->Submit("max_steps: 10\nnum_processes: 2\ndevice: cuda\n");
  ASSERT_TRUE(d.ok() && e.ok());
  EXPECT_EQ(StateOf(d->id), JobState::kStarting);
  EXPECT_EQ(StateOf(e->id), JobState::kQueued);
  ExitAll(a->id, 0);
  EXPECT_EQ(StateOf(b->id), JobState::kStarting);
  EXPECT_EQ(StateOf(e->id), JobState::kQueued);
  ASSERT_EQ(launcher_.launched().size(), 4u);
  const std::vector<int> gd = launcher_.launched()[2].gpus, gb = launcher_.launched()[3].gpus;
  ASSERT_EQ(gb.size(), 2u);
  ASSERT_EQ(gd.size(), 1u);
  std::set<int> all(gb.begin(), gb.end());
  all.insert(gd.begin(), gd.end());
  EXPECT_EQ(all, (std::set<int>{0, 1, 2}));  // disjoint, all three in use
  EXPECT_EQ(manager_->free_gpus(), 0);
  // A failed attempt gives its GPUs back before the restart takes them again.
  ExitAll(b->id, 1);
  EXPECT_EQ(StateOf(b->id), JobState::kFailed);
  EXPECT_EQ(StateOf(e->id), JobState::kStarting);
  EXPECT_EQ(launcher_.launched()[4].gpus, gb) << "e gets the two b gave back";
  ExitAll(d->id, 0);
  ExitAll(e->id, 0);
  EXPECT_EQ(manager_->free_gpus(), 3);
}

TEST_F(JobManagerTest, ExternalJobsWaitForJoiningWorkers) {
  auto job = manager_->Submit("max_steps: 10\nnum_processes: 2\nlauncher: external\nmax_restarts: 1\n");
  ASSERT_TRUE(job.ok()) << job.status();
  const std::string id = job->id;
  EXPECT_EQ(StateOf(id), JobState::kStarting);
  EXPECT_TRUE(launcher_.launched().empty());  // nobody is started by the server
  EXPECT_EQ(manager_->free_slots(), 4);       // nor does it take this host's slots
  auto info = manager_->GetJoinInfo(id);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->world_size, 2);
  EXPECT_EQ(info->attempt, 1);
  // Rank 1 first: it waits for rank 0's rendezvous address.
  EXPECT_EQ(manager_->workers().AttachWorker(id, 1, 0, info->token).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(manager_->workers().AttachWorker(id, 0, 0, "forged", "10.0.0.1", 29400).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(manager_->workers().AttachWorker(id, 0, 0, info->token).status().code(), absl::StatusCode::kInvalidArgument)
      << "rank 0 must say where its store listens";
  auto w0 = manager_->workers().AttachWorker(id, 0, 0, info->token, "10.0.0.1", 29400);
  ASSERT_TRUE(w0.ok()) << w0.status();
  EXPECT_EQ(w0->attempt, 1);
  auto w1 = manager_->workers().AttachWorker(id, 1, 0, info->token, "10.0.0.2", 0);
  ASSERT_TRUE(w1.ok()) << w1.status();
  EXPECT_EQ(w1->master_addr, "10.0.0.1");
  EXPECT_EQ(w1->master_port, 29400);
  EXPECT_EQ(StateOf(id), JobState::kRunning);

  // Rank 1 fails: rank 0 is told to stop; both ends come from their streams.
  manager_->workers().ReportResult(id, 1, 1, WorkerOutcome::kFailed, "boom");
  manager_->workers().DetachWorker(id, 1, 1, w1->channel);
  WorkerCommand cmd;
  ASSERT_TRUE(w0->channel->Pop(&cmd, std::chrono::milliseconds(100)));
  EXPECT_EQ(cmd.kind, WorkerCommand::Kind::kStop);
  manager_->workers().ReportResult(id, 1, 0, WorkerOutcome::kStopped, "stopped on request after step 3");
  manager_->workers().DetachWorker(id, 1, 0, w0->channel);
  // Restarted: attempt 2 waits for joins again, with the same token.
  EXPECT_EQ(StateOf(id), JobState::kStarting);
  auto info2 = manager_->GetJoinInfo(id);
  ASSERT_TRUE(info2.ok());
  EXPECT_EQ(info2->attempt, 2);
  EXPECT_EQ(info2->token, info->token);
  EXPECT_EQ(manager_->workers().AttachWorker(id, 0, 1, info->token, "10.0.0.1", 29400).status().code(),
            absl::StatusCode::kFailedPrecondition);  // the old attempt is fenced
  auto v0 = manager_->workers().AttachWorker(id, 0, 0, info->token, "10.0.0.3", 29401);
  auto v1 = manager_->workers().AttachWorker(id, 1, 0, info->token);
  ASSERT_TRUE(v0.ok() && v1.ok());
  EXPECT_EQ(v1->master_addr, "10.0.0.3");
  EXPECT_EQ(StateOf(id), JobState::kRunning);
  for (int r = 0; r < 2; ++r) manager_->workers().ReportResult(id, 2, r, WorkerOutcome::kSucceeded, "");
  manager_->workers().DetachWorker(id, 2, 0, v0->channel);
  manager_->workers().DetachWorker(id, 2, 1, v1->channel);
  EXPECT_EQ(StateOf(id), JobState::kSucceeded);
}

TEST_F(JobManagerTest, CancellingAnExternalJobNobodyJoinedEndsIt) {
  auto job = manager_->Submit("num_processes: 3\nlauncher: external\n");
  ASSERT_TRUE(job.ok());
  auto w0 = manager_->workers().AttachWorker(job->id, 0, 0, manager_->GetJoinInfo(job->id)->token, "10.0.0.1", 29400);
  ASSERT_TRUE(w0.ok());
  ASSERT_TRUE(manager_->Cancel(job->id).ok());
  WorkerCommand cmd;
  ASSERT_TRUE(w0->channel->Pop(&cmd, std::chrono::milliseconds(100)));
  EXPECT_EQ(cmd.kind, WorkerCommand::Kind::kStop);
  manager_->workers().ReportResult(job->id, 1, 0, WorkerOutcome::kStopped, "stopped on request after step 0");
  manager_->workers().DetachWorker(job->id, 1, 0, w0->channel);
  // Ranks 1 and 2 never came: the watchdog accounts for them.
  manager_->CheckProgress();
  EXPECT_EQ(StateOf(job->id), JobState::kCancelled);
}

TEST_F(JobManagerTest, LauncherMustBeAvailable) {
  auto job = manager_->Submit("num_processes: 1\nlauncher: slurm\n");
  ASSERT_FALSE(job.ok());
  EXPECT_NE(std::string(job.status().message()).find("launcher"), std::string::npos) << job.status();
  EXPECT_EQ(manager_->Submit("num_processes: 2\nslurm: {nodes: 2}\n").status().code(),
            absl::StatusCode::kInvalidArgument);  // the local launcher runs on one host
}

TEST_F(JobManagerTest, FirstFailureIsTheRootCauseAndStopsTheGroup) {
  const std::string a = Submit(2);
  auto job = manager_->Get(a);
  ASSERT_TRUE(job.ok());
  manager_->workers().ReportResult(a, job->attempt, 1, WorkerOutcome::kFailed, "boom in forward");
  manager_->workers().OnRankExit(RankExit::Exited(a, job->attempt, 1, 1));
  EXPECT_EQ(launcher_.stopped().size(), 1u);
  manager_->workers().OnRankExit(RankExit::Killed(a, job->attempt, 0, 9));  // killed by the stop
  auto ended = manager_->Get(a);
  ASSERT_TRUE(ended.ok());
  EXPECT_EQ(ended->state, JobState::kFailed);
  EXPECT_EQ(ended->failed_rank, 1);
  EXPECT_NE(ended->reason.find("boom in forward"), std::string::npos) << ended->reason;
  EXPECT_EQ(manager_->free_slots(), 4);
}

TEST_F(JobManagerTest, CancelQueuedAndRunning) {
  const std::string a = Submit(4), b = Submit(1);
  EXPECT_EQ(StateOf(b), JobState::kQueued);
  auto cb = manager_->Cancel(b);
  ASSERT_TRUE(cb.ok());
  EXPECT_EQ(cb->state, JobState::kCancelled);

  auto ca = manager_->Cancel(a);
  ASSERT_TRUE(ca.ok());
  EXPECT_EQ(launcher_.stopped().size(), 1u);
  ExitAll(a, 143);
  EXPECT_EQ(StateOf(a), JobState::kCancelled);
  EXPECT_EQ(manager_->Cancel(a).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(manager_->Cancel("job-nope").status().code(), absl::StatusCode::kNotFound);
}

// Delete forgets an ended job (record, events) and refuses a live one; a
// list newest first pages from the newest, and no longer shows it.
TEST_F(JobManagerTest, EndedJobsAreDeletedLiveOnesRefusedListsNewestFirst) {
  const std::string a = Submit(4), b = Submit(1), c = Submit(1);
  ASSERT_TRUE(manager_->Cancel(b).ok());
  const absl::Status live = manager_->Delete(a, Caller{});
  EXPECT_EQ(live.code(), absl::StatusCode::kFailedPrecondition) << live;
  EXPECT_NE(live.message().find("cancel it first"), std::string::npos) << live;
  EXPECT_EQ(manager_->Delete("job-nope", Caller{}).code(), absl::StatusCode::kNotFound);

  auto first = manager_->List({}, 2, "", Caller{}, true, /*newest_first=*/true);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->jobs.size(), 2u);
  EXPECT_EQ(first->jobs[0].id, c);
  EXPECT_EQ(first->jobs[1].id, b);
  auto rest = manager_->List({}, 2, first->next_page_token, Caller{}, true, /*newest_first=*/true);
  ASSERT_TRUE(rest.ok()) << rest.status();
  ASSERT_EQ(rest->jobs.size(), 1u);
  EXPECT_EQ(rest->jobs[0].id, a);
  EXPECT_EQ(manager_->List({}, 2, first->next_page_token, Caller{}, true).status().code(),
            absl::StatusCode::kInvalidArgument)
      << "a token of the other order";

  ASSERT_TRUE(manager_->Delete(b, Caller{}).ok());
  EXPECT_EQ(manager_->Get(b).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->Events(b)->size(), 0u);
  auto all = manager_->List({}, 0, "", Caller{}, true, /*newest_first=*/true);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->jobs.size(), 2u);
  EXPECT_EQ(all->jobs[0].id, c);
  EXPECT_EQ(all->jobs[1].id, a);
}

// A total the job's lead rank reports (a script's report(step, total=N))
// is the job's max_steps from then on: `trainctl watch` draws its bar.
TEST_F(JobManagerTest, AReportedTotalIsTheJobsLength) {
  const std::string id = Submit(1);
  JobRecord r = *manager_->Get(id);
  ASSERT_TRUE(manager_->workers().AttachWorker(id, 0, r.attempt, r.worker_token).ok());
  StepMetrics m;
  m.step = 1;
  manager_->workers().ReportMetrics(id, r.attempt, {m});
  EXPECT_EQ(manager_->Get(id)->max_steps, 10) << "the spec's, until a total is said";
  m.step = 2;
  m.total_steps = 250;
  manager_->workers().ReportMetrics(id, r.attempt, {m});
  EXPECT_EQ(manager_->Get(id)->max_steps, 250);
}

// --on-shutdown: detach leaves the running job as it is (the next
// coordinator adopts it), checkpoint asks rank 0 for a checkpoint and a stop
// and queues the job again whatever its ranks' ends, stop ends it FAILED.
TEST_F(JobManagerTest, ShutdownModes) {
  struct Started {
    std::string id;
    std::shared_ptr<WorkerChannel> rank0;
    int32_t attempt;
  };
  auto start = [&](int procs) {
    const std::string id = Submit(procs);
    const JobRecord r = *manager_->Get(id);
    Started out{id, nullptr, r.attempt};
    for (int rank = 0; rank < procs; ++rank) {
      auto w = manager_->workers().AttachWorker(id, rank, r.attempt, r.worker_token);
      EXPECT_TRUE(w.ok()) << w.status();
      if (rank == 0 && w.ok()) out.rank0 = w->channel;
    }
    EXPECT_EQ(StateOf(id), JobState::kRunning);
    return out;
  };
  // detach: nothing stopped or stored; the next coordinator adopts the job.
  const Started a = start(2);
  const std::string queued = Submit(4);  // waits for slots
  EXPECT_TRUE(manager_->Shutdown(ShutdownMode::kDetach).empty());
  WorkerCommand cmd;
  EXPECT_FALSE(a.rank0->Pop(&cmd, std::chrono::milliseconds(0)));
  EXPECT_TRUE(a.rank0->closed_and_drained());  // the stream ends; the worker reconnects to the next one
  EXPECT_TRUE(launcher_.stopped().empty());
  EXPECT_EQ(store_->Get(a.id)->state, JobState::kRunning);  // as after a crash
  EXPECT_EQ(store_->Get(queued)->state, JobState::kQueued);
  EXPECT_EQ(launcher_.launched().size(), 1u);
  Open();
  EXPECT_EQ(StateOf(a.id), JobState::kRecovering);
  ExitAll(a.id, 3);
  ASSERT_TRUE(manager_->Cancel(queued).ok());
  ExitAll(queued, 3);
  ASSERT_EQ(StateOf(queued), JobState::kCancelled);

  // checkpoint: rank 0 checkpoints and stops; the job is queued again, and
  // the next coordinator starts its next attempt.
  const Started b = start(1);
  const size_t launches = launcher_.launched().size();
  ASSERT_EQ(manager_->Shutdown(ShutdownMode::kCheckpoint), std::vector<std::string>{b.id});
  ASSERT_TRUE(b.rank0->Pop(&cmd, std::chrono::milliseconds(0)));
  EXPECT_EQ(cmd.kind, WorkerCommand::Kind::kCheckpoint);
  EXPECT_TRUE(cmd.stop_after);
  manager_->workers().OnRankExit(RankExit::Exited(b.id, b.attempt, 0, /*code=*/3));  // stopped after its checkpoint
  const JobRecord after = *store_->Get(b.id);
  EXPECT_EQ(after.state, JobState::kQueued);
  EXPECT_NE(after.reason.find("--on-shutdown checkpoint"), std::string::npos) << after.reason;
  EXPECT_EQ(launcher_.launched().size(), launches);  // nothing started by this coordinator
  Open();
  EXPECT_EQ(launcher_.launched().back().job_id, b.id);
  EXPECT_EQ(launcher_.launched().back().attempt, b.attempt + 1);
  ExitAll(b.id, 0);
  EXPECT_EQ(StateOf(b.id), JobState::kSucceeded);

  // stop: the workers are stopped and the job ends FAILED.
  const Started c = start(1);
  ASSERT_EQ(manager_->Shutdown(ShutdownMode::kStop), std::vector<std::string>{c.id});
  EXPECT_EQ(store_->Get(c.id)->state, JobState::kFailed);
  EXPECT_EQ(launcher_.stopped().back(), c.id + "#" + std::to_string(c.attempt));
}

// A failed group restarts; the next attempt's first step closes the
// recovery: its time from the failure, and the steps trained again.
TEST_F(JobManagerTest, RecoveryTimeAndLostStepsAreRecorded) {
  auto job = manager_->Submit("max_steps: 100\nnum_processes: 1\nmax_restarts: 1\n");
  ASSERT_TRUE(job.ok()) << job.status();
  const std::string id = job->id;
  const int64_t launched = clock_.UnixMillis();
  JobRecord r = *manager_->Get(id);
  ASSERT_TRUE(manager_->workers().AttachWorker(id, 0, r.attempt, r.worker_token).ok());
  StepMetrics m;
  m.step = 30;
  m.step_seconds = 0.1;
  m.data_seconds = 0.05;
  m.unix_millis = launched + 2000;  // its first report: 1.9 s after the launch began
  manager_->workers().ReportMetrics(id, r.attempt, {m});
  CheckpointEvent c;
  c.ok = false;     // blocks training all the same
  c.seconds = 0.4;  // of which training waited 0.25 s (the rest was written in the background)
  c.blocking_seconds = 0.25;
  manager_->workers().ReportCheckpoint(id, r.attempt, c);
  const int64_t before = clock_.UnixMillis();
  manager_->workers().OnRankExit(RankExit::Exited(id, r.attempt, 0, /*code=*/1));  // fails at step 30
  r = *manager_->Get(id);
  ASSERT_EQ(r.state, JobState::kStarting);  // restarted
  ASSERT_TRUE(manager_->workers().AttachWorker(id, 0, r.attempt, r.worker_token).ok());
  m.step = 26;  // resumed from its checkpoint at step 25: steps 26..30 again
  m.step_seconds = 0.2;
  m.unix_millis = before + 1500;
  manager_->workers().ReportMetrics(id, r.attempt, {m});
  m.step = 27;  // later steps close nothing more
  m.unix_millis = before + 9000;
  manager_->workers().ReportMetrics(id, r.attempt, {m});
  const std::string text = prometheus::TextSerializer().Serialize(metrics_.Collect());
  auto value = [&](const std::string& series) {
    const size_t at = text.find("\n" + series + " ");
    EXPECT_NE(at, std::string::npos) << series << " not in:\n" << text;
    return at == std::string::npos ? -1.0 : std::stod(text.substr(at + series.size() + 2));
  };
  EXPECT_NEAR(value("trainyard_job_recovery_seconds_sum{job_id=\"" + id + "\"}"), 1.5, 0.1);
  EXPECT_EQ(value("trainyard_job_recovery_seconds_count{job_id=\"" + id + "\"}"), 1);
  EXPECT_EQ(value("trainyard_job_lost_steps_total{job_id=\"" + id + "\"}"), 5);
  EXPECT_EQ(value("trainyard_recovery_seconds_count"), 1);
  EXPECT_EQ(value("trainyard_lost_steps_total"), 5);
  // Badput by cause: the failure's downtime before the new first step, the
  // step time lost past the last checkpoint (none was taken), the save, the
  // launch before the first step, and rank 0's waits for data.
  auto badput = [&](const char* cause) {
    return value("trainyard_job_badput_seconds_total{cause=\"" + std::string(cause) + "\",job_id=\"" + id + "\"}");
  };
  EXPECT_NEAR(badput("restart"), 1.3, 0.1);
  EXPECT_NEAR(badput("lost_work"), 0.1, 1e-9);
  EXPECT_NEAR(badput("checkpoint_blocking"), 0.25, 1e-9);
  EXPECT_NEAR(badput("startup"), 1.9, 0.1);
  EXPECT_NEAR(badput("data_wait"), 0.15, 1e-9);
}

// The first restart is immediate; a repeated failure waits for the backoff
// (1 s here, on the fake clock) without holding back the jobs behind it.
TEST_F(JobManagerTest, RepeatedFailuresBackOff) {
  auto job = manager_->Submit("max_steps: 100\nnum_processes: 2\nmax_restarts: 3\n");
  ASSERT_TRUE(job.ok()) << job.status();
  const std::string a = job->id;
  ExitAll(a, 1);
  EXPECT_EQ(StateOf(a), JobState::kStarting);  // restart 1: at once
  ExitAll(a, 1);
  EXPECT_EQ(StateOf(a), JobState::kQueued);
  EXPECT_NE(manager_->Get(a)->reason.find("starts in 1 s: backoff after repeated failures"), std::string::npos)
      << manager_->Get(a)->reason;
  const std::string b = Submit(2);  // not held back by the waiting job
  EXPECT_EQ(StateOf(b), JobState::kStarting);
  manager_->CheckProgress();
  EXPECT_EQ(StateOf(a), JobState::kQueued);
  clock_.Advance(std::chrono::milliseconds(999));
  manager_->CheckProgress();
  EXPECT_EQ(StateOf(a), JobState::kQueued);  // not before the backoff is over
  clock_.Advance(std::chrono::milliseconds(1));
  manager_->CheckProgress();
  EXPECT_EQ(StateOf(a), JobState::kStarting);
  // An attempt that trains before it fails is no crash loop: at once again.
  JobRecord r = *manager_->Get(a);
  ASSERT_TRUE(manager_->workers().AttachWorker(a, 0, r.attempt, r.worker_token).ok());
  StepMetrics m;
  m.step = 5;
  m.step_seconds = 0.1;
  manager_->workers().ReportMetrics(a, r.attempt, {m});
  ExitAll(a, 1);
  EXPECT_EQ(StateOf(a), JobState::kStarting) << manager_->Get(a)->reason;
}

TEST_F(JobManagerTest, WorkerTokensAreChecked) {
  const std::string a = Submit(2);
  auto launch = launcher_.launched().at(0);
  EXPECT_EQ(manager_->workers().AttachWorker(a, 0, launch.attempt, "forged").status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(manager_->workers().AttachWorker(a, 0, launch.attempt + 1, launch.token).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(manager_->workers().AttachWorker(a, 2, launch.attempt, launch.token).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto w0 = manager_->workers().AttachWorker(a, 0, launch.attempt, launch.token);
  ASSERT_TRUE(w0.ok()) << w0.status();
  EXPECT_EQ(manager_->workers().AttachWorker(a, 0, launch.attempt, launch.token).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(StateOf(a), JobState::kStarting);
  auto w1 = manager_->workers().AttachWorker(a, 1, launch.attempt, launch.token);
  ASSERT_TRUE(w1.ok());
  EXPECT_EQ(StateOf(a), JobState::kRunning);
  EXPECT_EQ(w1->world_size, 2);
}

TEST_F(JobManagerTest, LaunchFailureFailsTheJobAndFreesSlots) {
  launcher_.FailNext();
  const std::string a = Submit(2);
  EXPECT_EQ(StateOf(a), JobState::kFailed);
  auto job = manager_->Get(a);
  EXPECT_NE(job->reason.find("no fork today"), std::string::npos);
  EXPECT_EQ(manager_->free_slots(), 4);
}

TEST_F(JobManagerTest, HistorySurvivesRestart) {
  const std::string a = Submit(1);
  ExitAll(a, 0);
  const std::string b = Submit(4);  // running when the coordinator stops
  const std::string c = Submit(1);  // queued behind it
  Open();
  EXPECT_EQ(StateOf(a), JobState::kSucceeded);
  // b's workers may still be training: it waits for them, holding its slots.
  EXPECT_EQ(StateOf(b), JobState::kRecovering);
  EXPECT_NE(manager_->Get(b)->reason.find("coordinator restarted"), std::string::npos);
  EXPECT_EQ(StateOf(c), JobState::kQueued);
  // They reattach with their attempt and token: b runs again.
  const JobRecord rb = *manager_->Get(b);
  EXPECT_EQ(manager_->workers().AttachWorker(b, 0, rb.attempt, "forged").status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(manager_->workers().AttachWorker(b, 0, rb.attempt - 1, rb.worker_token).status().code(),
            absl::StatusCode::kFailedPrecondition);  // a stale attempt is told to go
  for (int r = 0; r < 4; ++r) ASSERT_TRUE(manager_->workers().AttachWorker(b, r, rb.attempt, rb.worker_token).ok());
  EXPECT_EQ(StateOf(b), JobState::kRunning);
  auto events = manager_->Events(a);
  ASSERT_TRUE(events.ok());
  ASSERT_GE(events->size(), 3u);
  EXPECT_EQ(events->back().state, JobState::kSucceeded);
}

// After a restart the launcher follows the group; a rank's end carries no
// exit code, so the rank's own report decides how it ended.
TEST_F(JobManagerTest, AdoptedRanksEndAsTheyReported) {
  const std::string b = Submit(2);
  Open();
  ASSERT_EQ(launcher_.adopted().size(), 1u);
  EXPECT_EQ(launcher_.adopted()[0].job_id, b);
  const JobRecord rb = *manager_->Get(b);
  EXPECT_EQ(launcher_.adopted()[0].attempt, rb.attempt);
  EXPECT_EQ(launcher_.adopted()[0].world_size, 2);
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(manager_->workers().AttachWorker(b, r, rb.attempt, rb.worker_token).ok());
  ASSERT_EQ(StateOf(b), JobState::kRunning);
  for (int r = 0; r < 2; ++r) manager_->workers().ReportResult(b, rb.attempt, r, WorkerOutcome::kSucceeded, "");
  for (int r = 0; r < 2; ++r) {
    manager_->workers().OnRankExit(RankExit::Unknown(b, rb.attempt, r));
  }
  EXPECT_EQ(StateOf(b), JobState::kSucceeded);
}

TEST_F(JobManagerTest, AdoptedRankGoneWithoutAReportStopsTheGroupAndRestartsItUncounted) {
  const std::string b = Submit(2);
  Open();
  const JobRecord rb = *manager_->Get(b);
  ASSERT_TRUE(manager_->workers().AttachWorker(b, 0, rb.attempt, rb.worker_token).ok());
  ASSERT_EQ(StateOf(b), JobState::kRecovering);
  RankExit e = RankExit::Unknown(b, rb.attempt, 1);
  manager_->workers().OnRankExit(e);
  // The rest of the group is stopped through the launcher.
  const std::vector<std::string> stopped = launcher_.stopped();
  EXPECT_NE(std::find(stopped.begin(), stopped.end(), b + "#" + std::to_string(rb.attempt)), stopped.end());
  e.rank = 0;
  manager_->workers().OnRankExit(e);
  // Lost while the coordinator was away: started again from its latest
  // checkpoint, and no restart of the job's own is counted.
  const JobRecord after = *manager_->Get(b);
  EXPECT_EQ(after.attempt, rb.attempt + 1);
  EXPECT_EQ(after.state, JobState::kStarting);
  auto events = manager_->Events(b);
  ASSERT_TRUE(events.ok());
  bool said = false;
  for (const JobEvent& ev : *events) {
    said |= ev.state == JobState::kQueued && ev.reason.find("restart from the latest checkpoint after: rank 1") == 0;
  }
  EXPECT_TRUE(said) << "no uncounted restart naming the lost rank";
}

TEST_F(JobManagerTest, WatchSeesStatesAndMetricsUntilTheEnd) {
  const std::string a = Submit(1);
  auto watch = manager_->Watch(a);
  ASSERT_TRUE(watch.ok());
  auto launch = launcher_.launched().at(0);
  ASSERT_TRUE(manager_->workers().AttachWorker(a, 0, launch.attempt, launch.token).ok());
  StepMetrics m;
  m.step = 3;
  m.loss = 1.5;
  m.samples_per_second = 100;
  manager_->workers().ReportMetrics(a, launch.attempt, {m});
  ExitAll(a, 0);
  std::vector<JobUpdate> updates;
  JobUpdate u;
  while ((*watch)->Next(&u, std::chrono::milliseconds(0))) updates.push_back(u);
  EXPECT_TRUE((*watch)->closed_and_drained());
  ASSERT_GE(updates.size(), 4u);
  EXPECT_EQ(updates.front().job->state, JobState::kStarting);
  bool saw_metrics = false;
  for (const auto& up : updates) saw_metrics |= up.metrics && up.metrics->step == 3;
  EXPECT_TRUE(saw_metrics);
  ASSERT_TRUE(updates.back().job.has_value());
  EXPECT_EQ(updates.back().job->state, JobState::kSucceeded);
  EXPECT_EQ(manager_->Get(a)->step, 3);
}

// A rank's flight record with collectives of group "world": (seq, started
// this long ago, ended or not).
FlightRecord Record(int32_t rank, const std::string& phase,
                    const std::vector<std::tuple<int64_t, double, bool>>& collectives) {
  const int64_t now = NowMicros();
  FlightRecord r;
  r.rank = rank;
  r.step = 7;
  r.phase = phase;
  r.phase_since_unix_micros = now - 2000000;
  r.captured_unix_micros = now;
  for (const auto& [seq, ago, ended] : collectives) {
    const int64_t start = now - static_cast<int64_t>(ago * 1e6);
    r.collectives.push_back({seq, "world", "allreduce", 400, start, ended ? start + 1000 : 0});
  }
  return r;
}

// `diagnose` and the watchdog ask every rank for its flight record; the
// watchdog records the diagnosis and fails the hung group with it.
TEST_F(JobManagerTest, HangsAreDiagnosedFromTheRanksFlightRecords) {
  auto job = manager_->Submit("max_steps: 100\nnum_processes: 2\nstep_timeout_s: 0.3\n");
  ASSERT_TRUE(job.ok()) << job.status();
  const std::string id = job->id;
  const JobRecord r = *manager_->Get(id);
  auto w0 = manager_->workers().AttachWorker(id, 0, r.attempt, r.worker_token);
  auto w1 = manager_->workers().AttachWorker(id, 1, r.attempt, r.worker_token);
  ASSERT_TRUE(w0.ok() && w1.ok());
  ASSERT_EQ(StateOf(id), JobState::kRunning);
  // Rank 0 waits in collective #2 since 3 s; rank 1 never started it.
  const FlightRecord r0 = Record(0, "backward", {{1, 5.0, true}, {2, 3.0, false}});
  const FlightRecord r1 = Record(1, "data", {{1, 5.0, true}});

  auto request = manager_->RequestDiagnosis(id, std::chrono::seconds(10));
  ASSERT_TRUE(request.ok()) << request.status();
  for (auto* w : {&*w0, &*w1}) {
    WorkerCommand cmd;
    ASSERT_TRUE(w->channel->Pop(&cmd, std::chrono::milliseconds(100)));
    EXPECT_EQ(cmd.kind, WorkerCommand::Kind::kDiagnose);
    EXPECT_EQ(cmd.request_id, *request);
  }
  manager_->workers().ReportFlightRecord(id, r.attempt + 1, *request, r1);  // another attempt's: ignored
  manager_->workers().ReportFlightRecord(id, r.attempt, *request, r0);
  manager_->workers().ReportFlightRecord(id, r.attempt, *request, r1);
  const auto asked = std::chrono::steady_clock::now();
  auto d = manager_->WaitDiagnosis(*request);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_LT(std::chrono::steady_clock::now() - asked, std::chrono::seconds(5));  // both answered: no wait
  EXPECT_EQ(d->answers.size(), 2u);
  EXPECT_EQ(d->result.behind_ranks, std::vector<int32_t>{1});
  EXPECT_NE(d->result.verdict.find("rank 1 is behind: it has not started collective #2 of group world (allreduce, "
                                   "400 B), which rank 0 started 3.0 s ago; rank 1 is in data after step 7"),
            std::string::npos)
      << d->result.verdict;
  EXPECT_EQ(manager_->WaitDiagnosis(*request).status().code(), absl::StatusCode::kNotFound);  // taken

  // The watchdog: no step for step_timeout_s.
  WorkerCommand cmd;
  manager_->CheckProgress();
  EXPECT_FALSE(w0->channel->Pop(&cmd, std::chrono::milliseconds(0)));  // within step_timeout_s
  clock_.Advance(std::chrono::milliseconds(301));
  manager_->CheckProgress();
  ASSERT_TRUE(w0->channel->Pop(&cmd, std::chrono::milliseconds(100)));
  ASSERT_EQ(cmd.kind, WorkerCommand::Kind::kDiagnose);
  EXPECT_EQ(StateOf(id), JobState::kRunning);  // still asking
  manager_->workers().ReportFlightRecord(id, r.attempt, cmd.request_id, r0);
  manager_->workers().ReportFlightRecord(id, r.attempt, cmd.request_id, r1);
  manager_->CheckProgress();
  EXPECT_EQ(launcher_.stopped(), std::vector<std::string>{id + "#" + std::to_string(r.attempt)});
  auto events = manager_->Events(id);
  ASSERT_TRUE(events.ok());
  bool diagnosed = false;
  for (const JobEvent& e : *events) {
    diagnosed =
        diagnosed || e.reason.rfind("hang diagnosis: rank 1 is behind: it has not started collective #2", 0) == 0;
  }
  EXPECT_TRUE(diagnosed);
  ExitAll(id, 1);  // the stopped ranks end: the job fails with the watchdog's reason
  EXPECT_EQ(StateOf(id), JobState::kFailed);
  EXPECT_NE(manager_->Get(id)->reason.find("the job is hung (rank 1 is behind"), std::string::npos)
      << manager_->Get(id)->reason;
}

// ---- Users: ownership, classes, quotas, preemption ----

Caller UserCaller(const std::string& name, std::vector<std::string> groups = {}) {
  return Caller{name, std::move(groups), /*admin=*/false, {}};
}

std::shared_ptr<const Policy> TeamPolicy(bool group_visibility = false) {
  auto p = std::make_shared<Policy>();
  p->priority_classes = {{"low", 0}, {"normal", 100}, {"high", 1000}};
  p->default_priority_class = "normal";
  p->user_quotas["alice"].max_priority_class = "normal";
  p->user_quotas["alice"].queued_jobs = 1;
  p->group_visibility = group_visibility;
  return p;
}

TEST_F(JobManagerTest, UsersSeeAndActOnTheirOwnJobsOnly) {
  manager_->SetPolicy(TeamPolicy());
  const Caller alice = UserCaller("alice", {"vision"}), bob = UserCaller("bob", {"nlp"});
  auto job = manager_->Submit("max_steps: 10\nnum_processes: 1\n", "", alice);
  ASSERT_TRUE(job.ok()) << job.status();
  const std::string a = job->id;
  EXPECT_EQ(job->owner, "alice");
  EXPECT_EQ(job->group, "vision");
  EXPECT_EQ(job->priority, 100);  // the default class
  EXPECT_EQ(store_->Get(a)->owner, "alice") << "stored with its owner";

  // Bob may not see alice's job: it is not found, as a job that does not
  // exist; alice's events say who asked, once per user.
  absl::Status denied = manager_->Authorize(bob, a, "cancel", /*read_only=*/false);
  EXPECT_EQ(denied.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(denied.message(), "job " + a + " not found");
  const absl::Status unknown = manager_->Authorize(bob, "job-00000000", "cancel", false);
  EXPECT_EQ(unknown.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(unknown.message(), "job job-00000000 not found");
  for (int i = 0; i < 50; ++i) EXPECT_EQ(manager_->Authorize(bob, a, "see", true).code(), absl::StatusCode::kNotFound);
  const std::vector<JobEvent> events = *manager_->Events(a);
  int recorded = 0;
  for (const JobEvent& e : events) recorded += e.reason.rfind("refused: user bob may not", 0) == 0;
  EXPECT_EQ(recorded, 1) << "one event for bob's 51 refusals";
  bool counted = false;
  for (const JobEvent& e : events)
    counted |= e.reason.find("(refused 51 requests of user bob since ") != std::string::npos;
  EXPECT_TRUE(counted) << "the event counts them";
  bool named = false;
  for (const JobEvent& e : events) {
    named |= e.reason.rfind("refused: user bob may not cancel job " + a + ": it is not theirs", 0) == 0;
  }
  EXPECT_TRUE(named);
  EXPECT_TRUE(manager_->Authorize(alice, a, "cancel", false).ok());
  EXPECT_TRUE(manager_->Authorize(Caller{"ops", {}, /*admin=*/true, {}}, a, "cancel", false).ok());
  EXPECT_EQ(manager_->Authorize(bob, "nope", "see", true).code(), absl::StatusCode::kNotFound);

  EXPECT_TRUE(manager_->List({}, 0, "", bob, false)->jobs.empty());
  EXPECT_EQ(manager_->List({}, 0, "", alice, false)->jobs.size(), 1u);
  EXPECT_EQ(manager_->List({}, 0, "", bob, true).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(manager_->List({}, 0, "", Caller{"ops", {}, true, {}}, true)->jobs.size(), 1u);

  // With group visibility, a group member may look but not act.
  manager_->SetPolicy(TeamPolicy(/*group_visibility=*/true));
  const Caller carol = UserCaller("carol", {"vision"});
  EXPECT_TRUE(manager_->Authorize(carol, a, "see", true).ok());
  EXPECT_EQ(manager_->Authorize(carol, a, "cancel", false).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(manager_->List({}, 0, "", carol, true)->jobs.size(), 1u);
  EXPECT_TRUE(manager_->List({}, 0, "", bob, true)->jobs.empty()) << "not bob's group";
}

TEST_F(JobManagerTest, PriorityClassesAndQuotasAreCheckedAtSubmit) {
  manager_->SetPolicy(TeamPolicy());
  const Caller alice = UserCaller("alice");
  auto unknown = manager_->Submit("num_processes: 1\npriority: urgent\n", "", alice);
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(unknown.status().message(),
            "spec field 'priority': unknown class 'urgent'; this server has: high, low, normal");
  auto above = manager_->Submit("num_processes: 1\npriority: high\n", "", alice);
  EXPECT_EQ(above.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(above.status().message(), "spec field 'priority': user alice may submit up to 'normal', not 'high'");
  EXPECT_EQ(manager_->Submit("num_processes: 1\npriority: high\n", "", UserCaller("bob"))->priority, 1000);
  // queued_jobs: 1.
  EXPECT_EQ(StateOf(manager_->Submit("num_processes: 3\n", "", alice)->id), JobState::kStarting);
  EXPECT_EQ(StateOf(manager_->Submit("num_processes: 4\n", "", alice)->id), JobState::kQueued);
  auto over = manager_->Submit("num_processes: 4\n", "", alice);
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(over.status().message().find("user alice has 1 jobs queued"), std::string::npos) << over.status();
}

// A job larger than its owner's whole quota could never start: refused at
// submit, naming the quota (as Slurm's EnforcePartLimits), not queued for
// ever; one that fits the quota but not what is free now waits.
TEST_F(JobManagerTest, AJobLargerThanItsOwnersWholeQuotaIsRefusedAtSubmit) {
  auto p = std::make_shared<Policy>(*TeamPolicy());
  p->user_quotas["bob"].slots = 2;
  p->group_quotas["nlp"].slots = 3;
  manager_->SetPolicy(p);
  const Caller bob = UserCaller("bob", {"nlp"});
  auto big = manager_->Submit("num_processes: 4\n", "", bob);
  ASSERT_EQ(big.status().code(), absl::StatusCode::kFailedPrecondition) << big.status();
  EXPECT_NE(big.status().message().find("needs 4 slots at least, more than user bob's whole quota (slots: 2)"),
            std::string::npos)
      << big.status();
  auto group = manager_->Submit("num_processes: 3\n", "", UserCaller("carol", {"nlp"}));
  EXPECT_TRUE(group.ok()) << group.status();
  auto over_group = manager_->Submit("num_processes: 4\n", "", UserCaller("dan", {"nlp"}));
  EXPECT_NE(over_group.status().message().find("group nlp's whole quota (slots: 3)"), std::string::npos)
      << over_group.status();
  EXPECT_TRUE(manager_->Submit("num_processes: 2\n", "", bob).ok());
  EXPECT_TRUE(manager_->Submit("num_processes: 4\npreemptible: true\n", "", bob).ok()) << "it may borrow";
}

TEST_F(JobManagerTest, AHigherPriorityJobPreemptsALowerPreemptibleOneWhichResumes) {
  manager_->SetPolicy(TeamPolicy());
  auto low =
      manager_->Submit("max_steps: 100\nnum_processes: 4\npreemptible: true\npriority: low\n", "", UserCaller("alice"));
  ASSERT_TRUE(low.ok()) << low.status();
  std::shared_ptr<WorkerChannel> rank0;
  for (int rank = 0; rank < 4; ++rank) {
    auto w = manager_->workers().AttachWorker(low->id, rank, 1, manager_->Get(low->id)->worker_token);
    ASSERT_TRUE(w.ok()) << w.status();
    if (rank == 0) rank0 = w->channel;
  }
  ASSERT_EQ(StateOf(low->id), JobState::kRunning);
  auto high = manager_->Submit("max_steps: 10\nnum_processes: 2\npriority: high\n", "", UserCaller("bob"));
  ASSERT_TRUE(high.ok()) << high.status();
  EXPECT_EQ(StateOf(high->id), JobState::kQueued);
  EXPECT_EQ(manager_->Get(high->id)->reason, "waiting: preempting " + low->id + " to free slots");
  WorkerCommand cmd;
  ASSERT_TRUE(rank0->Pop(&cmd, std::chrono::milliseconds(0)));
  EXPECT_EQ(cmd.kind, WorkerCommand::Kind::kCheckpoint);
  EXPECT_TRUE(cmd.stop_after) << "checkpoint, then stop";
  // The ranks checkpoint and stop (exit 3): low is queued again to resume; high starts.
  for (int rank = 0; rank < 4; ++rank) manager_->workers().OnRankExit(RankExit::Exited(low->id, 1, rank, 3));
  EXPECT_EQ(StateOf(low->id), JobState::kQueued);
  EXPECT_EQ(StateOf(high->id), JobState::kStarting);
  const JobRecord requeued = *store_->Get(low->id);
  EXPECT_EQ(requeued.reason, "preempted for a job of higher priority: resumes from its latest checkpoint");
  EXPECT_NE(requeued.spec_json.find("\"resume_from\":\"latest\""), std::string::npos);
  EXPECT_EQ(manager_->Get(low->id)->reason, "waiting: 2 of this host's slots free; this job needs 4");
  EXPECT_EQ(launcher_.stopped().size(), 0u) << "no signal: the ranks stopped on their own";
  // High ends: low starts again (attempt 2).
  ExitAll(high->id, 0);
  EXPECT_EQ(StateOf(low->id), JobState::kStarting);
  EXPECT_EQ(manager_->Get(low->id)->attempt, 2);
}

TEST_F(JobManagerTest, NeitherEqualPriorityNorNonPreemptibleJobsArePreempted) {
  manager_->SetPolicy(TeamPolicy());
  const std::string stiff = manager_->Submit("num_processes: 2\npriority: low\n", "", UserCaller("alice"))->id;
  const std::string peer =
      manager_->Submit("num_processes: 2\npriority: high\npreemptible: true\n", "", UserCaller("bob"))->id;
  auto high = manager_->Submit("num_processes: 2\npriority: high\n", "", UserCaller("bob"));
  EXPECT_EQ(StateOf(high->id), JobState::kQueued);
  EXPECT_EQ(manager_->Get(high->id)->reason, "waiting: 0 of this host's slots free; this job needs 2");
  EXPECT_EQ(StateOf(stiff), JobState::kStarting);
  EXPECT_EQ(StateOf(peer), JobState::kStarting);
}

}  // namespace
}  // namespace trainyard
