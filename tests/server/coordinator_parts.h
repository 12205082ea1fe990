// Test helpers for the coordinator's parts: a launcher that records what it
// is asked, and the parts a JobManager owns wired together over a real
// store in a temporary directory, on a fake clock.
#ifndef TRAINYARD_TESTS_SERVER_COORDINATOR_PARTS_H_
#define TRAINYARD_TESTS_SERVER_COORDINATOR_PARTS_H_

#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/job_spec.h"
#include "server/jobs/attempt_watch.h"
#include "server/jobs/job_lifecycle.h"
#include "server/jobs/job_stops.h"
#include "server/jobs/job_table.h"
#include "server/jobs/launchers.h"
#include "server/jobs/pending_requests.h"
#include "server/jobs/worker_sessions.h"
#include "server/launch/external_launcher.h"
#include "server/launch/launcher.h"
#include "server/metrics/server_metrics.h"
#include "server/scheduling/scheduler.h"
#include "server/store/job_store.h"
#include "tests/test_util.h"

namespace trainyard {

class RecordingLauncher final : public Launcher {
 public:
  // Local by default; Elsewhere(): ranks on other hosts (as Slurm's).
  Traits traits() const override { return traits_; }
  void Elsewhere() { traits_.on_this_host = false; }
  absl::Status Launch(const LaunchRequest& r) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (fail_next_) {
      fail_next_ = false;
      return absl::ResourceExhaustedError("no fork today");
    }
    launched_.push_back(r);
    live_[r.job_id] = r.world_size;
    return absl::OkStatus();
  }
  absl::Status LaunchRank(const LaunchRequest& r, int32_t rank) override {
    std::lock_guard<std::mutex> lock(mu_);
    relaunched_.push_back({r, rank});
    return absl::OkStatus();
  }
  void KillRank(const std::string& job_id, int32_t attempt, int32_t rank) override {
    std::lock_guard<std::mutex> lock(mu_);
    killed_.push_back(job_id + "#" + std::to_string(attempt) + "/" + std::to_string(rank));
  }
  // The ranks started again alone (LaunchRank), in order.
  std::vector<std::pair<LaunchRequest, int32_t>> relaunched() {
    std::lock_guard<std::mutex> lock(mu_);
    return relaunched_;
  }
  // "job#attempt/rank" of each KillRank.
  std::vector<std::string> killed() {
    std::lock_guard<std::mutex> lock(mu_);
    return killed_;
  }
  void Stop(const std::string& job_id, int32_t attempt) override {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_.push_back(job_id + "#" + std::to_string(attempt));
  }
  int LiveProcesses(const std::string& job_id) override {
    std::lock_guard<std::mutex> lock(mu_);
    return live_[job_id];
  }
  void Adopt(const LaunchRequest& r) override {
    std::lock_guard<std::mutex> lock(mu_);
    adopted_.push_back(r);
  }
  std::vector<LaunchRequest> adopted() {
    std::lock_guard<std::mutex> lock(mu_);
    return adopted_;
  }
  std::vector<LaunchRequest> launched() {
    std::lock_guard<std::mutex> lock(mu_);
    return launched_;
  }
  std::vector<std::string> stopped() {
    std::lock_guard<std::mutex> lock(mu_);
    return stopped_;
  }
  void FailNext() {
    std::lock_guard<std::mutex> lock(mu_);
    fail_next_ = true;
  }

 private:
  std::mutex mu_;
  std::vector<LaunchRequest> launched_, adopted_;
  std::vector<std::string> stopped_, killed_;
  std::vector<std::pair<LaunchRequest, int32_t>> relaunched_;
  std::map<std::string, int> live_;
  bool fail_next_ = false;
  Traits traits_{.on_this_host = true, .replaces_ranks = true};
};

inline std::unique_ptr<JobStore> OpenTestStore(const std::string& dir) {
  auto store = JobStore::Open(dir + "/jobs.db");
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(*store) : nullptr;
}

// The parts a JobManager owns, wired as it wires them (4 slots; local jobs
// go to `local`, external ones join, Slurm ones go to `elsewhere`).
struct CoordinatorParts {
  CoordinatorParts() {
    launchers.Register(LauncherKind::kLocal, &local);
    launchers.Register(LauncherKind::kExternal, &external);
    elsewhere.Elsewhere();
    launchers.Register(LauncherKind::kSlurm, &elsewhere);
  }

  // Stores a job of `spec_text` (its checkpoints under the temporary
  // directory) and queues it: it starts if it can.
  ActiveJob& Submit(const std::string& spec_text, const Ownership& ownership = {}) {
    auto spec = ParseJobSpec(spec_text);
    EXPECT_TRUE(spec.ok()) << spec.status();
    const std::string id = jobs.NewId();
    spec->checkpoint.project_dir = dir.path() + "/jobs/" + id;
    auto job = jobs.Submit(id, *spec, {}, ownership);
    EXPECT_TRUE(job.ok()) << job.status();
    lifecycle.Enqueue(**job);
    return **job;
  }
  // Every rank of the job's attempt exits with `code`.
  void ExitAll(const std::string& id, int code) {
    ActiveJob* job = jobs.Find(id);
    ASSERT_NE(job, nullptr);
    const JobRecord r = job->record;
    for (int rank = 0; rank < r.num_processes; ++rank) workers.Exit(RankExit::Exited(id, r.attempt, rank, code));
  }
  JobState StateOf(const std::string& id) {
    auto r = jobs.Record(id);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->state : JobState::kFailed;
  }

  TempDir dir;
  FakeClock clock;
  ServerMetrics metrics{std::make_shared<prometheus::Registry>()};
  std::unique_ptr<JobStore> store = OpenTestStore(dir.path());
  RecordingLauncher local;
  RecordingLauncher elsewhere;
  JobTable jobs{store.get(), &metrics, &clock};
  Scheduler scheduler{4, 0};
  Launchers launchers{LauncherKind::kLocal};
  ExternalLauncher external{[this](const std::string& id, int32_t attempt, const WorkerCommand& command) {
    jobs.Broadcast(id, attempt, command);
  }};
  PendingRequests requests;
  JobLifecycle lifecycle{
      &jobs,    &scheduler, &launchers,
      &metrics, &clock,     {"127.0.0.1", dir.path(), std::chrono::milliseconds(1000), "127.0.0.1:1", "remote:1"}};
  WorkerSessions workers{&jobs, &lifecycle, &launchers, &requests, &clock};
  AttemptWatch watch{&jobs, &lifecycle, &launchers, &workers, &clock};
  JobStops stops{&jobs, &lifecycle};
};

}  // namespace trainyard

#endif  // TRAINYARD_TESTS_SERVER_COORDINATOR_PARTS_H_
