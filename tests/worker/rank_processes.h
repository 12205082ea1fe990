// Ranks as processes, for tests that run DDP or FSDP on CUDA: the running
// test binary is started again once per rank (`--gtest_filter` naming the
// running test, TRAINYARD_TEST_RANK=r), each rank's process runs `body` to
// the point of RunRankProcesses and leaves there, and the parent gets each
// rank's tensors back through a file.
//
// Why not threads: a process has one autograd thread per GPU, shared by
// every thread's backward on that device, and DDP's end of backward
// (Reducer::finalize_backward) blocks it until every rank's gradients have
// been reduced: the other ranks' backward, queued on the same thread, never
// runs. Seen on an H100 (docs/gpu-status.md). Processes, as the worker runs
// them, each have their own.
//
// A test calls RunRankProcesses at most once: the rank processes run the
// test from its start, so anything before the call must not depend on
// another rank (it runs in every process), and the call must be reached.
#ifndef TRAINYARD_TESTS_WORKER_RANK_PROCESSES_H_
#define TRAINYARD_TESTS_WORKER_RANK_PROCESSES_H_

#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <torch/serialize.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "common/placement.h"
#include "tests/test_util.h"
#include "worker/collectives/process_group.h"

extern char** environ;

namespace trainyard {

// One rank's part: runs in that rank's process with the job's store (rank 0
// serves it) and returns the tensors the parent receives for that rank.
using RankBody =
    std::function<std::vector<at::Tensor>(int rank, int world, const c10::intrusive_ptr<c10d::Store>& store)>;

inline std::vector<std::vector<at::Tensor>> RunRankProcesses(int world, const RankBody& body) {
  if (const char* r = std::getenv("TRAINYARD_TEST_RANK")) {
    // A rank's process: run its part, write its tensors, leave.
    const int rank = std::atoi(r);
    int code = 0;
    try {
      RendezvousOptions ro;
      ro.master_port = std::atoi(std::getenv("TRAINYARD_TEST_PORT"));
      ro.rank = rank;
      ro.world_size = world;
      ro.timeout = std::chrono::minutes(2);
      std::vector<at::Tensor> out = body(rank, world, ConnectStore(ro));
      torch::save(out, std::string(std::getenv("TRAINYARD_TEST_OUT")) + "/rank" + std::to_string(rank) + ".pt");
    } catch (const std::exception& e) {
      std::cerr << "rank " << rank << ": " << e.what() << std::endl;
      code = 2;
    }
    if (::testing::Test::HasFailure()) code = 1;
    std::cout << std::flush;
    std::cerr << std::flush;
    std::_Exit(code);  // the rest of the test is the parent's
  }
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string filter = std::string("--gtest_filter=") + info->test_suite_name() + "." + info->name();
  TempDir dir;
  const int port = PickFreePortOn("127.0.0.1");
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
    env.push_back("TRAINYARD_TEST_RANK=" + std::to_string(r));
    env.push_back("TRAINYARD_TEST_PORT=" + std::to_string(port));
    env.push_back("TRAINYARD_TEST_OUT=" + dir.path());
    std::vector<char*> envp;
    for (std::string& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::string exe = "/proc/self/exe";
    std::vector<char*> argv = {exe.data(), const_cast<char*>(filter.c_str()), nullptr};
    pid_t pid = 0;
    if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(), envp.data()) != 0) {
      ADD_FAILURE() << "cannot start rank " << r;
      continue;
    }
    pids.push_back(pid);
  }
  std::vector<std::vector<at::Tensor>> out(world);
  for (size_t r = 0; r < pids.size(); ++r) {
    int status = 0;
    waitpid(pids[r], &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "rank " << r << "'s process " << (WIFSIGNALED(status) ? "was killed by signal " : "exited ")
        << (WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
  }
  for (int r = 0; r < world; ++r) {
    const std::string path = dir.path() + "/rank" + std::to_string(r) + ".pt";
    if (std::FILE* f = std::fopen(path.c_str(), "rb")) {
      std::fclose(f);
      torch::load(out[r], path);
    }
  }
  return out;
}

}  // namespace trainyard

#endif  // TRAINYARD_TESTS_WORKER_RANK_PROCESSES_H_
