// The sweep manager over a real SQLite sweep store and a job handler that
// stands in for the job manager (it records each submission and the rights
// it came with, and answers as a test tells it): what a sweep does with
// its owner's rights, with refused trials, and with PBT's copies — and
// what it leaves in the store for a restarted coordinator.
#include "server/sweeps/sweep_manager.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace trainyard {
namespace {

std::string TempDb(const std::string& name) {
  const std::string dir = std::filesystem::temp_directory_path() / ("sweep-manager-" + name + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir + "/trainyard.db";
}

// Jobs as the sweep manager sees them: each submission is recorded with
// its caller; `refuse` (when set) answers a submission instead.
class Jobs : public JobRequestHandler {
 public:
  struct Submission {
    std::string spec;
    Caller by;
  };
  std::vector<Submission> submissions;
  std::function<absl::Status(const std::string& spec)> refuse;
  std::map<std::string, JobRecord> jobs;
  std::map<std::string, JobHistory> histories;
  std::map<std::string, std::vector<CheckpointRecord>> checkpoints;
  int64_t checkpoint_requests = 0;

  absl::StatusOr<JobRecord> Submit(const std::string& spec_text, const std::string&, const Caller& by,
                                   const TrialOf& trial_of) override {
    if (refuse) {
      if (absl::Status s = refuse(spec_text); !s.ok()) return s;
    }
    submissions.push_back({spec_text, by});
    JobRecord r;
    r.id = absl::StrCat("job-", submissions.size());
    r.owner = by.user;
    r.state = JobState::kRunning;
    r.started_unix_millis = 1;
    r.num_processes = 1;
    r.sweep_id = trial_of.sweep_id;
    r.sweep_trial = trial_of.trial;
    jobs[r.id] = r;
    return r;
  }
  // Trial `job`'s loss at `step`.
  void Report(const std::string& job, int64_t step, double loss) {
    StepMetrics m;
    m.step = step;
    m.loss = loss;
    histories[job].Add(m, 1);
    jobs[job].step = step;
  }

  absl::StatusOr<JobRecord> Get(const std::string& id) override {
    auto it = jobs.find(id);
    if (it == jobs.end()) return absl::NotFoundError(id);
    return it->second;
  }
  absl::StatusOr<JobRecord> Cancel(const std::string& id, bool, const std::string& reason) override {
    auto it = jobs.find(id);
    if (it == jobs.end()) return absl::NotFoundError(id);
    it->second.state = JobState::kCancelled;
    it->second.reason = reason.empty() ? "cancelled by user" : reason;
    return it->second;
  }
  absl::StatusOr<JobHistory> History(const std::string& id) override { return histories[id]; }
  absl::StatusOr<int64_t> RequestCheckpoint(const std::string&, CheckpointType) override {
    return ++checkpoint_requests;
  }
  absl::StatusOr<std::vector<CheckpointRecord>> Checkpoints(const std::string& id) override { return checkpoints[id]; }

  absl::Status Authorize(const Caller&, const std::string&, const std::string&, bool) override {
    return absl::OkStatus();
  }
  absl::StatusOr<QueuePage> Queue(const Caller&, bool, int32_t, int32_t) override { return QueuePage{}; }
  absl::StatusOr<std::vector<QuotaUse>> Usage(const Caller&, bool) override { return std::vector<QuotaUse>{}; }
  int free_slots() override { return 0; }
  int free_gpus() override { return 0; }
  absl::StatusOr<std::vector<JobEvent>> Events(const std::string&) override { return std::vector<JobEvent>{}; }
  absl::StatusOr<JobPage> List(const std::set<JobState>&, int, const std::string&, const Caller&, bool, bool) override {
    return JobPage{};
  }
  absl::Status Delete(const std::string&, const Caller&) override { return absl::OkStatus(); }
  absl::StatusOr<JobRecord> Scale(const std::string& id, int32_t, const Caller&) override { return Get(id); }
  absl::Status AwaitRunning(const std::string&, std::chrono::system_clock::time_point) override {
    return absl::OkStatus();
  }
  absl::StatusOr<CheckpointEvent> WaitCheckpoint(const std::string&, int64_t,
                                                 std::chrono::system_clock::time_point) override {
    return absl::UnimplementedError("");
  }
  absl::StatusOr<JobRecord> Resume(const std::string& id, const std::string&, int32_t, const Caller&) override {
    return Get(id);
  }
  absl::StatusOr<std::shared_ptr<JobWatch>> Watch(const std::string&) override { return absl::UnimplementedError(""); }
  absl::StatusOr<std::pair<std::string, int32_t>> LogPath(const std::string&, int32_t, int32_t) override {
    return absl::UnimplementedError("");
  }
  absl::StatusOr<JoinInfo> GetJoinInfo(const std::string&) override { return absl::UnimplementedError(""); }
  absl::StatusOr<int64_t> RequestDiagnosis(const std::string&, std::chrono::milliseconds) override {
    return absl::UnimplementedError("");
  }
  absl::StatusOr<Diagnosis> WaitDiagnosis(int64_t) override { return absl::UnimplementedError(""); }
};

constexpr char kBase[] = "model: {kind: mlp}\nmax_steps: 300\n";

TEST(SweepManager, PbtCopiesAreStoredWhole) {
  // Four trials fill the trial list's capacity: the first copy appended
  // moves it. Every trial stored must still be one the sweep made.
  const std::string db = TempDb("pbt");
  auto store = SweepStore::Open(db);
  ASSERT_TRUE(store.ok()) << store.status();
  Jobs jobs;
  SweepManager sweeps(&jobs, store->get());
  auto sweep = sweeps.Submit(absl::StrCat(kBase,
                                          "sweep:\n  parameters: {optimizer.lr: {log_uniform: [1.0e-4, 1.0e-1]}}\n"
                                          "  searcher: {kind: pbt, perturbation_interval: 100, quantile: 0.25,\n"
                                          "             resample_probability: 0}\n"
                                          "  max_trials: 4\n  concurrency: 4\n  seed: 3\n"),
                             Caller{"alice", {}, false, {"/data"}, "alice"});
  ASSERT_TRUE(sweep.ok()) << sweep.status();
  ASSERT_EQ(jobs.submissions.size(), 4u);
  for (int i = 0; i < 4; ++i) jobs.Report(absl::StrCat("job-", i + 1), 100, 1.0 + i);
  sweeps.Tick();  // each member is ranked from the interval after its first report on
  EXPECT_EQ(jobs.checkpoint_requests, 0);
  for (int i = 0; i < 4; ++i) jobs.Report(absl::StrCat("job-", i + 1), 200, 0.5 + i);
  sweeps.Tick();  // trial 3, the worst, asks trial 0 for a checkpoint
  ASSERT_EQ(jobs.checkpoint_requests, 1);
  CheckpointRecord ck;
  ck.checkpoint = {.index = 1, .step = 200, .trigger = "request", .request_id = 1, .path = "/state/jobs/job-1/ck-1"};
  ck.checkpoint.ok = true;
  jobs.checkpoints["job-1"] = {ck};
  sweeps.Tick();  // the copy replaces trial 3
  ASSERT_EQ(jobs.submissions.size(), 5u);
  EXPECT_TRUE(absl::StrContains(jobs.submissions[4].spec, "/state/jobs/job-1/ck-1")) << jobs.submissions[4].spec;

  auto reopened = SweepStore::Open(db);  // what a restarted coordinator reads
  ASSERT_TRUE(reopened.ok());
  auto all = (*reopened)->List();
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 1u);
  const std::vector<SweepTrialRecord>& trials = all->front().trials;
  ASSERT_EQ(trials.size(), 5u);
  for (size_t i = 0; i < trials.size(); ++i) {
    EXPECT_EQ(trials[i].number, static_cast<int>(i));
    EXPECT_EQ(trials[i].job_id, absl::StrCat("job-", i + 1));
  }
  EXPECT_TRUE(absl::StrContains(trials[3].reason, "exploited at step 200: replaced by trial 4")) << trials[3].reason;
  EXPECT_EQ(trials[3].state, JobState::kCancelled);
  // Its job says who stopped it, and why.
  EXPECT_EQ(jobs.jobs["job-4"].reason,
            absl::StrCat("stopped by sweep ", all->front().id,
                         " (PBT: trial 4 continues from trial 0's checkpoint in its place)"));
  EXPECT_EQ(trials[4].parent, 0);
  EXPECT_EQ(trials[4].from_step, 200);
}

// alice's PBT sweep of two trials, reported at steps 100 and 200 with the
// second the worse: it has asked the first for a checkpoint (request 1).
absl::StatusOr<SweepStatus> PbtPairAskingForACheckpoint(Jobs& jobs, SweepManager& sweeps) {
  auto sweep = sweeps.Submit(absl::StrCat(kBase,
                                          "sweep:\n  parameters: {optimizer.lr: {log_uniform: [1.0e-4, 1.0e-1]}}\n"
                                          "  searcher: {kind: pbt, perturbation_interval: 100, quantile: 0.5}\n"
                                          "  max_trials: 2\n  concurrency: 2\n  seed: 3\n"),
                             Caller{"alice", {}, false, {"/data"}, "alice"});
  if (!sweep.ok()) return sweep;
  for (int step : {100, 200}) {
    jobs.Report("job-1", step, 1.0);
    jobs.Report("job-2", step, 2.0);
    sweeps.Tick();
  }
  return sweep;
}

// The checkpoint of request 1, saved at `step` to `path`.
CheckpointRecord RequestedCheckpoint(int64_t step, const std::string& path) {
  CheckpointRecord ck;
  ck.checkpoint = {.index = 1, .step = step, .trigger = "request", .request_id = 1, .path = path};
  ck.checkpoint.ok = true;
  return ck;
}

// A copy that cannot run (here: its checkpoint is outside its owner's
// roots) does not stop the poor trial it was to replace: that one trains on.
TEST(SweepManager, ARefusedPbtCopyLeavesThePoorTrialTraining) {
  auto store = SweepStore::Open(TempDb("pbt-refused"));
  ASSERT_TRUE(store.ok()) << store.status();
  Jobs jobs;
  SweepManager sweeps(&jobs, store->get());
  auto sweep = PbtPairAskingForACheckpoint(jobs, sweeps);
  ASSERT_TRUE(sweep.ok()) << sweep.status();
  ASSERT_EQ(jobs.checkpoint_requests, 1);  // trial 1, the worse, is to copy trial 0
  jobs.checkpoints["job-1"] = {RequestedCheckpoint(200, "/elsewhere/ck-1")};
  jobs.refuse = [](const std::string& spec) {
    return absl::StrContains(spec, "/elsewhere/") ? absl::InvalidArgumentError("outside the allowed roots")
                                                  : absl::OkStatus();
  };
  sweeps.Tick();
  EXPECT_EQ(jobs.jobs["job-2"].state, JobState::kRunning) << jobs.jobs["job-2"].reason;
  auto now = sweeps.Get(sweep->record.id, Caller{});
  ASSERT_TRUE(now.ok());
  ASSERT_EQ(now->record.trials.size(), 3u);
  EXPECT_EQ(now->record.trials[1].state, JobState::kRunning);
  EXPECT_EQ(now->record.trials[2].state, JobState::kFailed);
  EXPECT_TRUE(absl::StrContains(now->record.trials[2].reason, "refused: outside the allowed roots"));
  bool said = false;
  for (const JobEvent& e : now->events) {
    said |= absl::StrContains(e.reason,
                              "trial 1 (job-2) goes on as it is: its copy of trial 0's checkpoint of step "
                              "200, trial 2, was refused: outside the allowed roots");
  }
  EXPECT_TRUE(said);
}

// A source that reached the trials' last step before its checkpoint was
// saved leaves its copy nothing to train: the poor trial is not stopped
// for a copy that would end at once without a value; it trains on.
TEST(SweepManager, ACheckpointAtTheLastStepIsNotCopied) {
  auto store = SweepStore::Open(TempDb("pbt-spent"));
  ASSERT_TRUE(store.ok()) << store.status();
  Jobs jobs;
  SweepManager sweeps(&jobs, store->get());
  auto sweep = PbtPairAskingForACheckpoint(jobs, sweeps);
  ASSERT_TRUE(sweep.ok()) << sweep.status();
  ASSERT_EQ(jobs.checkpoint_requests, 1);  // trial 1, the worse, is to copy trial 0
  // Saved when trial 0 had reached its last step, 300.
  jobs.checkpoints["job-1"] = {RequestedCheckpoint(300, "/data/ck-1")};
  sweeps.Tick();
  EXPECT_EQ(jobs.submissions.size(), 2u) << "no copy is submitted";
  EXPECT_EQ(jobs.jobs["job-2"].state, JobState::kRunning) << jobs.jobs["job-2"].reason;
  auto now = sweeps.Get(sweep->record.id, Caller{});
  ASSERT_TRUE(now.ok());
  ASSERT_EQ(now->record.trials.size(), 2u);
  bool said = false;
  for (const JobEvent& e : now->events) {
    said |=
        absl::StrContains(e.reason, "trial 1 goes on as it is: trial 0's checkpoint is of step 300, the trials' last");
  }
  EXPECT_TRUE(said);
}

// A trial ASHA stops says so on its job: the sweep, the searcher, the step
// and the value, not "cancelled by user".
TEST(SweepManager, ATrialAshaStopsNamesTheSweepOnItsJob) {
  auto store = SweepStore::Open(TempDb("asha"));
  ASSERT_TRUE(store.ok()) << store.status();
  Jobs jobs;
  SweepManager sweeps(&jobs, store->get());
  auto sweep = sweeps.Submit(absl::StrCat(kBase,
                                          "sweep:\n  parameters: {optimizer.lr: {choice: [0.1, 0.01, 0.001]}}\n"
                                          "  searcher: {kind: asha, min_steps: 100, reduction_factor: 3}\n"
                                          "  max_trials: 3\n  concurrency: 3\n"),
                             Caller{"alice", {}, false, {"/data"}, "alice"});
  ASSERT_TRUE(sweep.ok()) << sweep.status();
  ASSERT_EQ(jobs.submissions.size(), 3u);
  // The first to reach the rung goes on; the later, worse ones stop there.
  jobs.Report("job-1", 100, 1.0);
  sweeps.Tick();
  jobs.Report("job-2", 100, 2.0);
  jobs.Report("job-3", 100, 3.0);
  sweeps.Tick();
  EXPECT_EQ(jobs.jobs["job-1"].state, JobState::kRunning);
  EXPECT_EQ(jobs.jobs["job-3"].state, JobState::kCancelled);
  EXPECT_EQ(jobs.jobs["job-3"].reason, absl::StrCat("stopped by sweep ", sweep->record.id,
                                                    " (ASHA, step 100: loss 3 not among the best 1/3 at the rung)"));
}

TEST(SweepManager, TrialsActWithTheOwnersRightsOfNowAndStopWhenTheyAreGone) {
  auto store = SweepStore::Open(TempDb("rights"));
  ASSERT_TRUE(store.ok());
  Jobs jobs;
  SweepManager sweeps(&jobs, store->get());
  // bob is an admin when he submits, a plain user later, then removed.
  std::map<std::string, Caller> policy = {{"bob", Caller{"bob", {"ml"}, true, {}, ""}}};
  sweeps.set_caller_lookup([&](const Caller& stored) -> absl::StatusOr<Caller> {
    auto it = policy.find(stored.user);
    if (it == policy.end()) return absl::PermissionDeniedError("user " + stored.user + " is no longer in the policy");
    return it->second;
  });
  auto sweep = sweeps.Submit(absl::StrCat(kBase,
                                          "sweep:\n  parameters: {seed: {int: [1, 100]}}\n"
                                          "  searcher: {kind: grid}\n  concurrency: 1\n"),
                             policy["bob"]);
  ASSERT_TRUE(sweep.ok()) << sweep.status();
  ASSERT_EQ(jobs.submissions.size(), 1u);
  EXPECT_TRUE(jobs.submissions[0].by.admin);

  policy["bob"] = Caller{"bob", {"ml"}, false, {"/data/bob"}, "bob"};  // demoted
  jobs.Report("job-1", 300, 1.0);
  jobs.jobs["job-1"].state = JobState::kSucceeded;
  sweeps.Tick();
  ASSERT_EQ(jobs.submissions.size(), 2u);
  EXPECT_FALSE(jobs.submissions[1].by.admin);
  EXPECT_EQ(jobs.submissions[1].by.unix_user, "bob");
  EXPECT_EQ(jobs.submissions[1].by.roots, std::vector<std::string>{"/data/bob"});

  policy.erase("bob");  // removed
  jobs.Report("job-2", 300, 1.0);
  jobs.jobs["job-2"].state = JobState::kSucceeded;
  sweeps.Tick();
  EXPECT_EQ(jobs.submissions.size(), 2u);
  auto now = sweeps.Get(sweep->record.id, Caller{});
  ASSERT_TRUE(now.ok());
  EXPECT_EQ(now->record.state, JobState::kFailed);
  EXPECT_TRUE(absl::StrContains(now->record.reason, "user bob is no longer in the policy")) << now->record.reason;
  sweeps.Tick();
  EXPECT_EQ(jobs.submissions.size(), 2u);
}

TEST(SweepManager, ASweepWhoseTrialsKeepBeingRefusedEndsWithoutDrawingItsWholeSpace) {
  auto store = SweepStore::Open(TempDb("refused"));
  ASSERT_TRUE(store.ok());
  Jobs jobs;
  SweepManager sweeps(&jobs, store->get());
  int refused = 0;
  jobs.refuse = [&](const std::string&) {
    ++refused;
    return absl::PermissionDeniedError("spec field 'script': not allowed");
  };
  // A grid of a million trials, each refused.
  auto sweep = sweeps.Submit(absl::StrCat(kBase,
                                          "sweep:\n  parameters: {seed: {int: [1, 1000000]}}\n"
                                          "  searcher: {kind: grid}\n  concurrency: 4\n"),
                             Caller{});
  ASSERT_TRUE(sweep.ok()) << sweep.status();
  for (int i = 0; i < 5; ++i) sweeps.Tick();
  EXPECT_EQ(refused, SweepManager::kMaxRefusedInARow);
  auto now = sweeps.Get(sweep->record.id, Caller{});
  ASSERT_TRUE(now.ok());
  EXPECT_EQ(now->record.state, JobState::kFailed);
  EXPECT_TRUE(absl::StrContains(now->record.reason, "its last 3 trials were refused")) << now->record.reason;
  EXPECT_TRUE(absl::StrContains(now->record.reason, "not allowed")) << now->record.reason;
  EXPECT_EQ(now->record.trials.size(), 3u);
}

TEST(SweepManager, AFullQueueDelaysTrialsWithoutThrowingThemAway) {
  auto store = SweepStore::Open(TempDb("quota"));
  ASSERT_TRUE(store.ok());
  Jobs jobs;
  SweepManager sweeps(&jobs, store->get());
  int queued = 0;  // the owner's quota: 1 queued job
  jobs.refuse = [&](const std::string&) {
    if (queued >= 1) return absl::ResourceExhaustedError("user carol has 1 jobs queued, the quota (queued_jobs)");
    ++queued;
    return absl::OkStatus();
  };
  auto sweep = sweeps.Submit(absl::StrCat(kBase,
                                          "sweep:\n  parameters: {seed: {int: [1, 20]}}\n"
                                          "  searcher: {kind: grid}\n  concurrency: 20\n"),
                             Caller{"carol", {}, false, {"/data"}, "carol"});
  ASSERT_TRUE(sweep.ok()) << sweep.status();
  for (int i = 0; i < 10; ++i) sweeps.Tick();
  auto now = sweeps.Get(sweep->record.id, Caller{});
  ASSERT_TRUE(now.ok());
  EXPECT_EQ(now->record.state, JobState::kRunning);
  ASSERT_EQ(now->record.trials.size(), 1u);  // the others wait, none was refused
  // The queue frees: the waiting trials follow, numbered on, none lost.
  for (int round = 0; round < 19; ++round) {
    queued = 0;
    sweeps.Tick();
  }
  now = sweeps.Get(sweep->record.id, Caller{});
  ASSERT_EQ(now->record.trials.size(), 20u);
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(now->record.trials[i].number, i);
    EXPECT_FALSE(now->record.trials[i].job_id.empty()) << now->record.trials[i].reason;
  }
}

TEST(SweepManager, OneLookSubmitsABoundedNumberOfTrials) {
  auto store = SweepStore::Open(TempDb("bound"));
  ASSERT_TRUE(store.ok());
  Jobs jobs;
  SweepManager sweeps(&jobs, store->get());
  auto sweep = sweeps.Submit(absl::StrCat(kBase,
                                          "sweep:\n  parameters: {seed: {int: [1, 1000]}}\n"
                                          "  searcher: {kind: grid}\n  concurrency: 100\n"),
                             Caller{});
  ASSERT_TRUE(sweep.ok()) << sweep.status();
  EXPECT_EQ(jobs.submissions.size(), static_cast<size_t>(SweepManager::kMaxSubmissionsPerLook));
  sweeps.Tick();
  EXPECT_EQ(jobs.submissions.size(), static_cast<size_t>(2 * SweepManager::kMaxSubmissionsPerLook));
}

TEST(SweepManager, EveryValueOfTheSearchIsCheckedAtSubmit) {
  auto store = SweepStore::Open(TempDb("values"));
  ASSERT_TRUE(store.ok());
  Jobs jobs;
  SweepManager sweeps(&jobs, store->get());
  // Trial 0 (batch size 16) is valid; the third choice is not a number.
  auto sweep = sweeps.Submit(absl::StrCat(kBase,
                                          "sweep:\n  parameters: {data.batch_size: {choice: [16, 32, lots]}}\n"
                                          "  searcher: {kind: grid}\n"),
                             Caller{});
  ASSERT_FALSE(sweep.ok());
  EXPECT_TRUE(absl::StrContains(sweep.status().message(), "sweep.parameters.data.batch_size value lots"))
      << sweep.status();
  EXPECT_TRUE(jobs.submissions.empty());
}

TEST(SweepManager, OneUserRunsABoundedNumberOfSweeps) {
  auto store = SweepStore::Open(TempDb("cap"));
  ASSERT_TRUE(store.ok());
  Jobs jobs;
  SweepManager sweeps(&jobs, store->get());
  const std::string spec =
      absl::StrCat(kBase, "sweep:\n  parameters: {seed: {int: [1, 2]}}\n  searcher: {kind: grid}\n");
  const Caller dan{"dan", {}, false, {"/data"}, "dan"};
  for (int i = 0; i < SweepManager::kMaxRunningPerUser; ++i) ASSERT_TRUE(sweeps.Submit(spec, dan).ok());
  auto refused = sweeps.Submit(spec, dan);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(refused.status())) << refused.status();
  EXPECT_TRUE(sweeps.Submit(spec, Caller{"erin", {}, false, {"/data"}, "erin"}).ok());
}

// Issue 67: the sweep as its users read it.

Caller Alice() { return Caller{"alice", {}, false, {"/data"}, "alice"}; }

SweepTrialRecord TrialOfSweep(SweepManager& sweeps, const std::string& id, int n) {
  auto now = sweeps.Get(id, Caller{});
  EXPECT_TRUE(now.ok()) << now.status();
  return now.ok() && n < static_cast<int>(now->record.trials.size()) ? now->record.trials[n] : SweepTrialRecord{};
}

TEST(SweepManager, EachTrialsJobNamesItsSweepAndNumber) {
  auto store = SweepStore::Open(TempDb("trial-of"));
  ASSERT_TRUE(store.ok());
  Jobs jobs;
  SweepManager sweeps(&jobs, store->get());
  auto sweep = sweeps.Submit(absl::StrCat(kBase,
                                          "sweep:\n  parameters: {seed: {int: [1, 3]}}\n"
                                          "  searcher: {kind: grid}\n  concurrency: 3\n"),
                             Alice());
  ASSERT_TRUE(sweep.ok()) << sweep.status();
  ASSERT_EQ(jobs.jobs.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    const JobRecord& j = jobs.jobs[absl::StrCat("job-", i + 1)];
    EXPECT_EQ(j.sweep_id, sweep->record.id);
    EXPECT_EQ(j.sweep_trial, i);
  }
}

TEST(SweepManager, ANativeSweepsMetricNoNativeSeriesHasIsRefusedAtSubmit) {
  auto store = SweepStore::Open(TempDb("metric"));
  ASSERT_TRUE(store.ok());
  Jobs jobs;
  SweepManager sweeps(&jobs, store->get());
  const std::string params = "sweep:\n  parameters: {seed: {int: [1, 3]}}\n  searcher: {kind: grid}\n";
  auto bad = sweeps.Submit(absl::StrCat(kBase, params, "  metric: {name: accuracy, goal: maximize}\n"), Alice());
  ASSERT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(bad.status().message(), "sweep.metric.name: 'accuracy'")) << bad.status();
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "loss, eval_loss")) << bad.status();
  auto no_eval = sweeps.Submit(absl::StrCat(kBase, params, "  metric: {name: eval_loss}\n"), Alice());
  ASSERT_EQ(no_eval.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(no_eval.status().message(), "sweep.metric.name: 'eval_loss'")) << no_eval.status();
  EXPECT_TRUE(jobs.submissions.empty());
  // A native series is taken; a script's own name cannot be known before it runs.
  EXPECT_TRUE(sweeps.Submit(absl::StrCat(kBase, params, "  metric: {name: grad_norm}\n"), Alice()).ok());
  EXPECT_TRUE(sweeps
                  .Submit("script: {path: /data/train.py}\nsweep:\n  parameters: {script.args: {choice: [[a], [b]]}}\n"
                          "  searcher: {kind: grid}\n"
                          "  metric: {name: accuracy, goal: maximize}\n",
                          Alice())
                  .ok());
}

TEST(SweepManager, AScriptSweepFailsAfterTheFirstTrialThatEndsWithoutItsMetric) {
  auto store = SweepStore::Open(TempDb("no-metric"));
  ASSERT_TRUE(store.ok());
  Jobs jobs;
  SweepManager sweeps(&jobs, store->get());
  auto sweep = sweeps.Submit(
      "script: {path: /data/train.py}\nsweep:\n  parameters: {script.args: {choice: [[a], [b], [c], [d]]}}\n"
      "  searcher: {kind: grid}\n  metric: {name: accuracy, goal: maximize}\n  concurrency: 2\n",
      Alice());
  ASSERT_TRUE(sweep.ok()) << sweep.status();
  ASSERT_EQ(jobs.submissions.size(), 2u);
  jobs.Report("job-1", 50, 2.0);  // a loss, not the accuracy asked for
  jobs.jobs["job-1"].state = JobState::kSucceeded;
  sweeps.Tick();
  auto now = sweeps.Get(sweep->record.id, Caller{});
  ASSERT_TRUE(now.ok());
  EXPECT_EQ(now->record.state, JobState::kFailed);
  EXPECT_EQ(now->record.reason,
            "trial 0 (job-1) ended at step 50 without ever reporting the sweep's metric accuracy (a script reports "
            "it with trainyard.report(step, accuracy=...))");
  EXPECT_EQ(jobs.jobs["job-2"].state, JobState::kCancelled);  // the other trial stopped
  sweeps.Tick();
  EXPECT_EQ(jobs.submissions.size(), 2u);  // and no more started
}

// A trial's value is its last report by default (Ray Tune's scope="last"),
// its best with scope best, the mean of its last N with last-N-avg.
TEST(SweepManager, ATrialsValueIsItsLastReportUnlessTheScopeSaysOtherwise) {
  for (const auto& [scope, want] : std::vector<std::pair<std::string, double>>{
           {"", 3.0}, {"last", 3.0}, {"best", 0.5}, {"last-2-avg", 2.5}, {"last-3-avg", 5.5 / 3}}) {
    SCOPED_TRACE(scope);
    auto store = SweepStore::Open(TempDb("scope" + std::to_string(want)));
    ASSERT_TRUE(store.ok());
    Jobs jobs;
    SweepManager sweeps(&jobs, store->get());
    auto sweep = sweeps.Submit(absl::StrCat(kBase, "sweep:\n  parameters: {seed: {int: [1, 1]}}\n",
                                            "  searcher: {kind: grid}\n  metric: {name: loss",
                                            scope.empty() ? "" : ", scope: " + scope, "}\n"),
                               Alice());
    ASSERT_TRUE(sweep.ok()) << sweep.status();
    jobs.Report("job-1", 10, 0.5);  // one lucky batch
    jobs.Report("job-2", 10, 0.5);
    jobs.Report("job-1", 20, 2.0);
    jobs.Report("job-1", 30, 3.0);
    sweeps.Tick();
    const SweepTrialRecord t = TrialOfSweep(sweeps, sweep->record.id, 0);
    ASSERT_TRUE(t.best_metric.has_value());
    EXPECT_DOUBLE_EQ(*t.best_metric, want);
  }
}

// A trial ASHA stopped keeps the step and value of the decision, though its
// job reports steps after it before it stops.
TEST(SweepManager, AStoppedTrialIsShownAsOfTheDecision) {
  auto store = SweepStore::Open(TempDb("frozen"));
  ASSERT_TRUE(store.ok());
  Jobs jobs;
  SweepManager sweeps(&jobs, store->get());
  auto sweep = sweeps.Submit(absl::StrCat(kBase,
                                          "sweep:\n  parameters: {optimizer.lr: {choice: [0.1, 0.01]}}\n"
                                          "  searcher: {kind: asha, min_steps: 100, reduction_factor: 2}\n"
                                          "  max_trials: 2\n  concurrency: 2\n"),
                             Alice());
  ASSERT_TRUE(sweep.ok()) << sweep.status();
  jobs.Report("job-1", 100, 1.0);
  sweeps.Tick();
  jobs.Report("job-2", 100, 3.0);
  jobs.Report("job-2", 110, 2.5);  // reported in the same look, after the rung
  sweeps.Tick();
  ASSERT_EQ(jobs.jobs["job-2"].state, JobState::kCancelled);
  jobs.jobs["job-2"].state = JobState::kRunning;  // its ranks take a while to stop
  jobs.Report("job-2", 240, 0.1);
  jobs.jobs["job-2"].state = JobState::kCancelled;
  sweeps.Tick();
  const SweepTrialRecord t = TrialOfSweep(sweeps, sweep->record.id, 1);
  EXPECT_TRUE(t.early_stopped);
  EXPECT_EQ(t.step, 100);
  ASSERT_TRUE(t.best_metric.has_value());
  EXPECT_DOUBLE_EQ(*t.best_metric, 3.0);
}

TEST(SweepManager, EventsCountAGridsTrialsAndNameNoAnyone) {
  auto store = SweepStore::Open(TempDb("grid-events"));
  ASSERT_TRUE(store.ok());
  Jobs jobs;
  SweepManager sweeps(&jobs, store->get());
  auto sweep = sweeps.Submit(absl::StrCat(kBase,
                                          "sweep:\n  parameters: {seed: {int: [1, 3]}}\n"
                                          "  searcher: {kind: grid}\n  concurrency: 1\n"),
                             Caller{});
  ASSERT_TRUE(sweep.ok()) << sweep.status();
  ASSERT_TRUE(sweeps.Cancel(sweep->record.id, false, Caller{}).ok());
  auto now = sweeps.Get(sweep->record.id, Caller{});
  ASSERT_TRUE(now.ok());
  ASSERT_FALSE(now->events.empty());
  EXPECT_EQ(now->events.front().reason,
            "submitted: searcher grid, 3 trials (every combination), 1 at once, metric loss (minimize, scope last)");
  EXPECT_EQ(now->record.reason, "cancelled");
  EXPECT_EQ(jobs.jobs["job-1"].reason, absl::StrCat("stopped by sweep ", now->record.id, ": the sweep was cancelled"));
  EXPECT_EQ(TotalTrials(now->spec), 3);
}

}  // namespace
}  // namespace trainyard
