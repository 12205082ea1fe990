// Scheduler benchmark: (1) the time of one scheduling decision with 10,000
// queued jobs from 100 users (priorities from three classes, fair share,
// quotas on half the users, backfill), each decision after a running job
// ended; (2) submissions per second to a real trainyard-server started with
// a policy file of those 100 users, from this program's own gRPC clients
// (not trainctl), each call with its user's token.
//
//   scheduler [--queued 10000] [--users 100] [--decisions 2000]
//             [--server-binary build/bin/trainyard-server] [--seconds 10] [--clients 8]
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_util.h"
#include "common/policy.h"
#include "server/scheduling/scheduler.h"
#include "trainyard/v1/trainyard.grpc.pb.h"

namespace trainyard {
namespace {

using Clock = std::chrono::steady_clock;

struct DecisionResult {
  bench::Stats micros;
  double p99 = 0;
  size_t started = 0, preempted = 0;
};

DecisionResult Decisions(int queued, int users, int decisions, bool quotas) {
  std::mt19937 rng(42);
  SchedulerPolicy policy;
  if (quotas) {
    for (int u = 0; u < users; u += 2) policy.user_quotas["user" + std::to_string(u)].slots = 16;
  }
  policy.min_run_time = std::chrono::seconds(60);
  constexpr int kSlots = 256;
  Scheduler s(kSlots, 0, policy);
  const int64_t kPriorities[] = {0, 100, 1000};
  int next = 0;
  auto enqueue = [&]() {
    const std::string id = "j" + std::to_string(next++);
    JobClaim c;
    c.owner = "user" + std::to_string(rng() % users);
    c.priority = kPriorities[rng() % 10 < 7 ? 1 : (rng() % 2 ? 0 : 2)];
    c.preemptible = rng() % 2 == 0;
    if (rng() % 2) c.runtime = std::chrono::seconds(60 + rng() % 3600);
    s.Enqueue(id, {true, ResourcePool::Kind::kSlots, 1 + static_cast<int>(rng() % 8)}, c);
  };
  Clock::time_point now = Clock::time_point{} + std::chrono::hours(1000);
  std::vector<std::string> running;
  for (int i = 0; i < queued; ++i) enqueue();
  for (const std::string& id : s.Schedule(now).start) running.push_back(id);
  while (static_cast<int>(s.size()) < queued) enqueue();  // 10,000 waiting
  DecisionResult out;
  std::vector<double> micros;
  for (int d = 0; d < decisions; ++d) {
    now += std::chrono::seconds(30);
    if (!running.empty()) {
      const size_t victim = rng() % running.size();
      s.Release(running[victim], now);
      running[victim] = running.back();
      running.pop_back();
    }
    const auto t0 = Clock::now();
    Scheduler::Decision decision = s.Schedule(now);
    micros.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    out.started += decision.start.size();
    out.preempted += decision.preempt.size();
    for (const std::string& id : decision.start) running.push_back(id);
    for (const auto& p : decision.preempt) {
      s.Release(p.victim, now);
      running.erase(std::find(running.begin(), running.end(), p.victim));
    }
    while (static_cast<int>(s.size()) < queued) enqueue();
  }
  out.micros = bench::Summarize(micros);
  std::sort(micros.begin(), micros.end());
  out.p99 = micros[static_cast<size_t>(0.99 * (micros.size() - 1))];
  return out;
}

struct SubmitResult {
  double per_second = 0;
  int64_t ok = 0, failed = 0;
  std::string first_error;
};

SubmitResult Submissions(const std::string& server_binary, int users, double seconds, int clients) {
  const std::string dir =
      std::filesystem::temp_directory_path() / ("trainyard-bench-sched-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  {
    std::ofstream p(dir + "/policy.yaml");
    p << "users:\n";
    for (int u = 0; u < users; ++u) {
      p << "  - {name: user" << u << ", token_sha256: \"" << Sha256Hex("token-" + std::to_string(u)) << "\"}\n";
    }
    p << "priority_classes: {low: 0, normal: 100, high: 1000}\n";
  }
  const pid_t pid = fork();
  if (pid == 0) {
    // The server's log goes to a file, not this table.
    if (FILE* log = std::fopen((dir + "/server.log").c_str(), "w")) {
      dup2(fileno(log), STDOUT_FILENO);
      dup2(fileno(log), STDERR_FILENO);
    }
    execl(server_binary.c_str(), server_binary.c_str(), "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
          "--http-listen", "127.0.0.1:0", "--state-dir", dir.c_str(), "--slots", "1", "--ready-file",
          (dir + "/ready.json").c_str(), "--policy-file", (dir + "/policy.yaml").c_str(), "--max-queued-jobs",
          "1000000", "--launcher", "external", nullptr);
    _exit(127);
  }
  std::string addr;
  for (int i = 0; i < 300 && addr.empty(); ++i) {
    std::ifstream ready(dir + "/ready.json");
    auto j = nlohmann::json::parse(ready, nullptr, false);
    if (!j.is_discarded() && j.contains("grpc_port")) addr = "127.0.0.1:" + std::to_string(j["grpc_port"].get<int>());
    if (addr.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  SubmitResult out;
  if (addr.empty()) {
    out.first_error = "the server did not start";
  } else {
    std::atomic<int64_t> ok{0}, failed{0};
    std::mutex mu;
    const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    std::vector<std::thread> threads;
    const auto t0 = Clock::now();
    for (int c = 0; c < clients; ++c) {
      threads.emplace_back([&, c] {
        auto stub = v1::JobService::NewStub(grpc::CreateChannel(addr, grpc::InsecureChannelCredentials()));
        int n = 0;
        while (Clock::now() < end) {
          const int user = (c + clients * n++) % users;
          v1::SubmitJobRequest req;
          req.set_spec("name: load\nmodel: {kind: mlp}\nmax_steps: 10\nnum_processes: 2\npriority: low\n");
          v1::SubmitJobResponse resp;
          grpc::ClientContext ctx;
          ctx.AddMetadata("authorization", "Bearer token-" + std::to_string(user));
          grpc::Status st = stub->SubmitJob(&ctx, req, &resp);
          if (st.ok()) {
            ++ok;
          } else {
            ++failed;
            std::lock_guard<std::mutex> lock(mu);
            if (out.first_error.empty()) out.first_error = st.error_message();
          }
        }
      });
    }
    for (auto& t : threads) t.join();
    out.ok = ok;
    out.failed = failed;
    out.per_second = ok / std::chrono::duration<double>(Clock::now() - t0).count();
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  std::filesystem::remove_all(dir);
  return out;
}

}  // namespace
}  // namespace trainyard

int main(int argc, char** argv) {
  CLI::App app{"Scheduling decisions with a deep queue; submissions per second with a policy file"};
  int queued = 10000, users = 100, decisions = 2000, clients = 8;
  double seconds = 10;
  std::string server_binary = "build/bin/trainyard-server";
  app.add_option("--queued", queued)->capture_default_str();
  app.add_option("--users", users)->capture_default_str();
  app.add_option("--decisions", decisions)->capture_default_str();
  app.add_option("--server-binary", server_binary)->capture_default_str();
  app.add_option("--seconds", seconds, "How long submissions run")->capture_default_str();
  app.add_option("--clients", clients, "Concurrent gRPC clients")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  std::string command = "bench/scheduler";
  for (int i = 1; i < argc; ++i) command += std::string(" ") + argv[i];
  std::printf("command: %s\n", command.c_str());
  std::printf("conditions: one process, %u hardware threads; %d queued jobs from %d users, 256 CPU slots\n\n",
              std::thread::hardware_concurrency(), queued, users);
  std::printf("| decision | decisions | mean µs | median µs | p99 µs | max µs | started | preempted |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  for (bool quotas : {false, true}) {
    auto r = trainyard::Decisions(queued, users, decisions, quotas);
    std::printf("| %s | %zu | %.1f | %.1f | %.1f | %.1f | %zu | %zu |\n",
                quotas ? "priorities, fair share, backfill, quotas on 50 users" : "priorities, fair share, backfill",
                r.micros.count, r.micros.mean, r.micros.median, r.p99, r.micros.max, r.started, r.preempted);
  }
  auto s = trainyard::Submissions(server_binary, users, seconds, clients);
  std::printf(
      "\n| submissions (policy file of %d users, %d gRPC clients, %.0f s) | accepted/s | accepted | refused |\n", users,
      clients, seconds);
  std::printf("|---|---|---|---|\n");
  std::printf("| SubmitJob with a bearer token each | %.0f | %lld | %lld |\n", s.per_second,
              static_cast<long long>(s.ok), static_cast<long long>(s.failed));
  if (!s.first_error.empty()) std::printf("first refusal: %s\n", s.first_error.c_str());
  return 0;
}
