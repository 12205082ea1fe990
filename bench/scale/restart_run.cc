#include "bench/scale/restart_run.h"

#include <chrono>
#include <mutex>
#include <set>
#include <thread>
#include <utility>

#include "bench/scale/server_process.h"
#include "bench/scale/sim_rank.h"

namespace trainyard::scale {
namespace {

// The job's events, as (time, reason).
std::set<std::pair<int64_t, std::string>> Events(const v1::Job& job) {
  std::set<std::pair<int64_t, std::string>> out;
  for (const v1::JobEvent& e : job.events()) out.emplace(e.unix_millis(), e.reason());
  return out;
}

// The points of the job's loss series, as (step, time).
std::set<std::pair<int64_t, int64_t>> LossPoints(v1::JobService::Stub* stub, const std::string& id) {
  grpc::ClientContext ctx;
  v1::GetJobHistoryRequest req;
  req.set_id(id);
  req.add_series("loss");
  v1::GetJobHistoryResponse resp;
  std::set<std::pair<int64_t, int64_t>> out;
  if (!stub->GetJobHistory(&ctx, req, &resp).ok()) return out;
  for (const v1::HistorySeries& s : resp.series()) {
    for (const v1::HistoryPoint& p : s.points()) out.emplace(p.step(), p.unix_millis());
  }
  return out;
}

}  // namespace

RestartRow RunRestart(const std::string& binary, int ranks, double report_seconds, int channels) {
  RestartRow row;
  row.ranks = ranks;
  row.reported_s = report_seconds;
  ServerProcess server(binary, ranks, 1000);
  auto jobs = JobStub(server.addr());
  SimJob job(server.addr(), ExternalSpec("scale-restart", ranks, "metrics_every_steps: 1\n"), ranks, channels);
  row.error = job.error();
  if (job.id().empty()) return row;
  const std::string id = job.id();
  SimRanks& sim = job.sim();
  auto running = [&](v1::JobService::Stub* stub, double timeout_s) {
    for (const auto give_up = Clock::now() + std::chrono::duration<double>(timeout_s); Clock::now() < give_up;) {
      if (TimedGetJob(stub, id, nullptr).state() == v1::RUNNING) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  };
  for (auto& r : sim.ranks) r->Start();
  if (!running(jobs.get(), 300)) {
    row.error = "the job never ran";
    return row;
  }
  StepReporter reporter(&sim);
  std::this_thread::sleep_for(std::chrono::duration<double>(report_seconds));
  // What the owner sees just before the kill.
  const auto events = Events(TimedGetJob(jobs.get(), id, nullptr));
  const auto points = LossPoints(jobs.get(), id);
  row.events_before = static_cast<int>(events.size());
  row.points_before = static_cast<int>(points.size());
  const auto t_kill = Clock::now();
  server.Restart();
  const auto t_ready = Clock::now();
  row.restart_s = Seconds(t_ready - t_kill);
  jobs = JobStub(server.addr());
  if (!running(jobs.get(), 120)) {
    row.error = "the ranks did not reattach within 120 s of the restart";
  } else {
    row.running_s = Seconds(Clock::now() - t_ready);
    const auto events_after = Events(TimedGetJob(jobs.get(), id, nullptr));
    const auto points_after = LossPoints(jobs.get(), id);
    for (const auto& e : events) row.events_lost += events_after.count(e) ? 0 : 1;
    // A downsampled series may merge points later: a point counts as kept
    // when its step is still there.
    std::set<int64_t> steps_after;
    for (const auto& [step, ms] : points_after) steps_after.insert(step);
    const int64_t kill_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
            .count() -
        static_cast<int64_t>(Seconds(Clock::now() - t_kill) * 1e3);
    for (const auto& [step, ms] : points) {
      if (steps_after.count(step)) continue;
      ++row.points_lost;
      if (ms < kill_ms - 2500) ++row.old_points_lost;
    }
  }
  reporter.Stop();
  row.failed = job.End(jobs.get(), &row.error);
  return row;
}

}  // namespace trainyard::scale
