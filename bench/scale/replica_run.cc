#include "bench/scale/replica_run.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "bench/scale/server_process.h"
#include "bench/scale/sim_rank.h"

namespace trainyard::scale {

ReplicaRow RunReplicaLoss(const std::string& binary, int ranks, int losses, int channels) {
  ReplicaRow row;
  row.ranks = ranks;
  row.losses = losses = std::clamp(losses, 1, ranks - 1);
  ServerProcess server(binary, ranks, 1000);
  auto jobs = JobStub(server.addr());
  SimJob job(server.addr(),
             ExternalSpec("scale-replicas", ranks, "fault_tolerance: {mode: replica, min_replicas: 1}\n"), ranks,
             channels);
  row.error = job.error();
  if (job.id().empty()) return row;
  Shared& shared = job.shared();
  SimRanks& sim = job.sim();
  std::vector<bool> lost(static_cast<size_t>(ranks));
  // Waits until every rank (not lost) holds a membership `want` takes; the
  // latest arrival among them and the newest epoch, or false on timeout.
  Clock::time_point first;  // the earliest arrival of the last await
  auto await = [&](auto want, bool survivors_only, Clock::time_point* last, int64_t* epoch) {
    std::unique_lock<std::mutex> lock(shared.mu);
    auto all = [&] {
      for (int r = 0; r < ranks; ++r) {
        if (!(survivors_only && lost[r]) && !want(shared.memberships[r])) return false;
      }
      return true;
    };
    for (const auto give_up = Clock::now() + std::chrono::seconds(120); !all();) {
      if (Clock::now() > give_up) return false;
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));  // `at` times each arrival, not this look
      lock.lock();
    }
    *last = Clock::time_point::min();
    first = Clock::time_point::max();
    *epoch = 0;
    for (int r = 0; r < ranks; ++r) {
      if (survivors_only && lost[r]) continue;
      *last = std::max(*last, shared.memberships[r].at);
      first = std::min(first, shared.memberships[r].at);
      *epoch = std::max(*epoch, shared.memberships[r].epoch);
    }
    return true;
  };
  Clock::time_point last;
  int64_t formed_epoch = 0, loss_epoch = 0, rejoin_epoch = 0;
  const auto t0 = Clock::now();
  for (auto& r : sim.ranks) r->Start();
  if (!await([](const Shared::Seen& s) { return s.epoch >= 1; }, false, &last, &formed_epoch)) {
    row.error = "the group did not form within 120 s";
  } else {
    row.formed_s = Seconds(last - t0);
    // Ranks spread over the job (rank 0 stays: it is the joined job's rendezvous).
    std::vector<int> gone;
    for (int i = 0; i < losses; ++i) gone.push_back(1 + static_cast<int>(int64_t{i} * (ranks - 1) / losses));
    {
      std::lock_guard<std::mutex> lock(shared.mu);
      for (int r : gone) lost[r] = true;
    }
    const auto t_loss = Clock::now();
    for (int r : gone) sim.ranks[r]->Lose();
    if (!await([&](const Shared::Seen& s) { return s.size == ranks - losses; }, true, &last, &loss_epoch)) {
      row.error = "the survivors did not get a membership without the lost ranks within 120 s";
    } else {
      row.loss_s = Seconds(last - t_loss);
      row.loss_first_s = Seconds(first - t_loss);
      row.loss_epochs = loss_epoch - formed_epoch;
      const auto t_rejoin = Clock::now();
      for (int r : gone) {
        {
          std::lock_guard<std::mutex> lock(shared.mu);
          lost[r] = false;
        }
        sim.ranks[r]->Start();
      }
      if (!await([&](const Shared::Seen& s) { return s.size == ranks && s.epoch > loss_epoch; }, false, &last,
                 &rejoin_epoch)) {
        row.error = "the replacements did not join within 120 s";
      } else {
        row.rejoin_s = Seconds(last - t_rejoin);
        row.rejoin_epochs = rejoin_epoch - loss_epoch;
      }
    }
  }
  {
    std::lock_guard<std::mutex> lock(shared.mu);
    row.membership_messages = shared.membership_messages;
    row.membership_deltas = shared.membership_deltas;
    row.membership_mb = static_cast<double>(shared.membership_bytes) / 1e6;
  }
  row.failed = job.End(jobs.get(), &row.error);
  return row;
}

}  // namespace trainyard::scale
