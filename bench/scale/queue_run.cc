#include "bench/scale/queue_run.h"

#include <atomic>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "bench/scale/server_process.h"

namespace trainyard::scale {

QueueRow RunQueue(const std::string& binary, int queued, int clients, double idle_seconds, const std::string& store) {
  QueueRow row;
  row.queued = queued;
  ServerProcess server(binary, 16, queued + 16, 0,
                       store.empty() ? std::vector<std::string>{} : std::vector<std::string>{"--store", store});
  std::atomic<int> next{0};
  std::atomic<int64_t> failed{0};
  std::mutex mu;
  std::vector<double> ms;
  const auto t0 = Clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&] {
      auto stub = JobStub(server.addr());
      std::vector<double> mine;
      while (next++ < queued) {
        v1::SubmitJobRequest req;
        req.set_spec("name: queued\nlauncher: local\nmodel: {kind: mlp}\nmax_steps: 10\nnum_processes: 1\n");
        v1::SubmitJobResponse resp;
        grpc::ClientContext ctx;
        const auto s0 = Clock::now();
        if (!stub->SubmitJob(&ctx, req, &resp).ok()) ++failed;
        mine.push_back(Seconds(Clock::now() - s0) * 1e3);
      }
      std::lock_guard<std::mutex> lock(mu);
      ms.insert(ms.end(), mine.begin(), mine.end());
    });
  }
  for (auto& t : threads) t.join();
  row.per_second = static_cast<double>(queued) / Seconds(Clock::now() - t0);
  row.p99_ms = P99(ms);
  row.failed = failed;
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const double cpu0 = server.CpuSeconds();
  std::this_thread::sleep_for(std::chrono::duration<double>(idle_seconds));
  row.idle_cpu = (server.CpuSeconds() - cpu0) / idle_seconds;
  auto stub = JobStub(server.addr());
  std::vector<double> q;
  for (int i = 0; i < 20; ++i) {
    grpc::ClientContext ctx;
    v1::GetQueueRequest req;
    v1::GetQueueResponse resp;
    const auto s0 = Clock::now();
    stub->GetQueue(&ctx, req, &resp);
    q.push_back(Seconds(Clock::now() - s0) * 1e3);
  }
  row.queue_p99_ms = P99(q);
  // Every waiting job once in GetQueue's pages (five or more; the queue
  // stands still meanwhile), as many as the first page's total_size.
  std::set<std::string> seen;
  v1::GetQueueRequest req;
  req.set_page_size(std::max(1, queued / 5));
  int32_t total = -1;
  do {
    grpc::ClientContext ctx;
    v1::GetQueueResponse resp;
    if (auto st = stub->GetQueue(&ctx, req, &resp); !st.ok()) {
      row.error = "GetQueue: " + st.error_message();
      return row;
    }
    if (total < 0) total = resp.total_size();
    for (const v1::QueueEntry& e : resp.entries()) {
      if (!seen.insert(e.id()).second) row.error = "GetQueue's pages show " + e.id() + " twice";
    }
    req.set_page_token(resp.next_page_token());
  } while (!req.page_token().empty() && seen.size() <= static_cast<size_t>(queued));
  if (row.error.empty() && (seen.size() != static_cast<size_t>(total) || total < queued - 1)) {
    row.error = "GetQueue's pages show " + std::to_string(seen.size()) + " jobs of " + std::to_string(total) +
                " (submitted " + std::to_string(queued) + ")";
  }
  return row;
}

KillRow RunBurstKill(const std::string& binary, int submissions, int clients) {
  KillRow row;
  ServerProcess server(binary, 16, submissions + 16);
  std::mutex mu;
  std::vector<std::string> acked;
  std::atomic<int> next{0};
  std::atomic<bool> down{false};
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&] {
      auto stub = JobStub(server.addr());
      while (!down && next++ < submissions) {
        v1::SubmitJobRequest req;
        req.set_spec("name: burst\nlauncher: local\nmodel: {kind: mlp}\nmax_steps: 10\nnum_processes: 1\n");
        v1::SubmitJobResponse resp;
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
        if (!stub->SubmitJob(&ctx, req, &resp).ok()) break;  // the server is gone
        std::lock_guard<std::mutex> lock(mu);
        acked.push_back(resp.job().id());
      }
    });
  }
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (static_cast<int>(acked.size()) >= submissions / 2) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const auto t0 = Clock::now();
  server.Restart();  // kill -9 while the clients submit, then start again
  row.restart_s = Seconds(Clock::now() - t0);
  down = true;
  for (auto& t : threads) t.join();
  row.acknowledged = static_cast<int>(acked.size());
  auto stub = JobStub(server.addr());
  const std::set<std::string> ack_set(acked.begin(), acked.end());
  for (const std::string& id : acked) {
    grpc::ClientContext ctx;
    v1::GetJobRequest req;
    req.set_id(id);
    v1::GetJobResponse resp;
    if (!stub->GetJob(&ctx, req, &resp).ok()) continue;
    bool submitted = false;
    for (const v1::JobEvent& e : resp.job().events()) submitted |= e.reason() == "submitted";
    if (submitted) ++row.found;
  }
  // Jobs stored but not acknowledged (the reply lost with the server).
  v1::ListJobsRequest list;
  list.set_page_size(1000);
  do {
    grpc::ClientContext ctx;
    v1::ListJobsResponse page;
    if (!stub->ListJobs(&ctx, list, &page).ok()) break;
    for (const v1::Job& j : page.jobs()) row.unacknowledged_found += ack_set.count(j.id()) ? 0 : 1;
    list.set_page_token(page.next_page_token());
  } while (!list.page_token().empty());
  if (row.found != row.acknowledged) {
    row.error = std::to_string(row.acknowledged - row.found) + " acknowledged submissions lost to kill -9";
  }
  return row;
}

}  // namespace trainyard::scale
