// AccelerateLaunchEnvironment with the venv's Python and Accelerate: the
// variables of a config, the cache (used on the second call, kept apart
// per config), and the errors of a refused config and a missing Python.
#include "worker/script/accelerate_env.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>

#include "tests/test_paths.h"
#include "tests/test_util.h"

namespace trainyard {
namespace {

namespace fs = std::filesystem;

constexpr const char* kConfig =
    "compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_GPU\nnum_machines: 1\nnum_processes: 2\n"
    "mixed_precision: 'no'\n";

class AccelerateEnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string(TRAINYARD_TEST_PYTHON).empty()) GTEST_SKIP() << "built without TRAINYARD_PYTHON";
    where_.world_size = 2;
    where_.package_dir = std::string(TRAINYARD_SOURCE_DIR) + "/python";
  }
  std::vector<fs::path> CacheFiles() const {
    std::vector<fs::path> out;
    if (fs::exists(cache_.path() + "/c")) {
      for (const auto& e : fs::directory_iterator(cache_.path() + "/c")) {
        if (e.path().filename().string().rfind("accelerate-env-", 0) == 0) out.push_back(e.path());  // answers
      }
    }
    return out;
  }
  ScriptRank where_;
  TempDir cache_;
};

TEST_F(AccelerateEnvTest, AcceleratesVariablesForAConfig) {
  auto env = AccelerateLaunchEnvironment(TRAINYARD_TEST_PYTHON, kConfig, where_, "");
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->at("ACCELERATE_MIXED_PRECISION"), "no");
  EXPECT_EQ(env->count("ACCELERATE_DYNAMO_BACKEND"), 1u);
  std::string bf16 = kConfig;
  bf16.replace(bf16.find("'no'"), 4, "bf16");
  env = AccelerateLaunchEnvironment(TRAINYARD_TEST_PYTHON, bf16, where_, "");
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->at("ACCELERATE_MIXED_PRECISION"), "bf16");
}

TEST_F(AccelerateEnvTest, NoConfigRunsNothing) {
  auto env = AccelerateLaunchEnvironment("/nonexistent/python9", "", where_, "");
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_TRUE(env->empty());
}

TEST_F(AccelerateEnvTest, TheSecondCallReadsTheCacheAndConfigsAreKeptApart) {
  const std::string dir = cache_.path() + "/c";
  auto first = AccelerateLaunchEnvironment(TRAINYARD_TEST_PYTHON, kConfig, where_, dir);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(CacheFiles().size(), 1u);
  // The port and address of the rendezvous are not part of the key.
  where_.master_port = 31337;
  auto second = AccelerateLaunchEnvironment(TRAINYARD_TEST_PYTHON, kConfig, where_, dir);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(*second, *first);
  EXPECT_EQ(CacheFiles().size(), 1u);
  // What the cache holds is what the call returns: plant an answer.
  const std::string file = CacheFiles()[0];
  const std::string real = first->at("ACCELERATE_MIXED_PRECISION");
  std::ofstream(file) << R"({"ACCELERATE_MIXED_PRECISION": "planted"})";
  auto planted = AccelerateLaunchEnvironment(TRAINYARD_TEST_PYTHON, kConfig, where_, dir);
  ASSERT_TRUE(planted.ok()) << planted.status();
  EXPECT_EQ(planted->at("ACCELERATE_MIXED_PRECISION"), "planted");
  // An answer with anything accelerate launch does not set is not used: it
  // is computed anew (and the cache rewritten).
  std::ofstream(file) << R"({"ACCELERATE_MIXED_PRECISION": "planted", "LD_PRELOAD": "/tmp/evil.so"})";
  auto poisoned = AccelerateLaunchEnvironment(TRAINYARD_TEST_PYTHON, kConfig, where_, dir);
  ASSERT_TRUE(poisoned.ok()) << poisoned.status();
  EXPECT_EQ(poisoned->count("LD_PRELOAD"), 0u);
  EXPECT_EQ(poisoned->at("ACCELERATE_MIXED_PRECISION"), real);
  // Nor one another account may have written: a file others may write.
  std::ofstream(file) << R"({"ACCELERATE_MIXED_PRECISION": "planted"})";
  ASSERT_EQ(chmod(file.c_str(), 0666), 0);
  auto shared = AccelerateLaunchEnvironment(TRAINYARD_TEST_PYTHON, kConfig, where_, dir);
  ASSERT_TRUE(shared.ok()) << shared.status();
  EXPECT_EQ(shared->at("ACCELERATE_MIXED_PRECISION"), real);
  // Another config, another process count, or another machine rank: computed anew.
  std::string bf16 = kConfig;
  bf16.replace(bf16.find("'no'"), 4, "bf16");
  auto other = AccelerateLaunchEnvironment(TRAINYARD_TEST_PYTHON, bf16, where_, dir);
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(other->at("ACCELERATE_MIXED_PRECISION"), "bf16");
  where_.world_size = 4;
  ASSERT_TRUE(AccelerateLaunchEnvironment(TRAINYARD_TEST_PYTHON, kConfig, where_, dir).ok());
  EXPECT_EQ(CacheFiles().size(), 3u);
}

// Ranks that start together ask the same question at once: the first to
// take the cache's lock computes the answer, the others wait for it and read
// it. Here the test holds the lock: the call waits, and returns the answer
// stored meanwhile (planted, so that a computed one would show).
TEST_F(AccelerateEnvTest, RanksAskingTogetherComputeTheAnswerOnce) {
  const std::string dir = cache_.path() + "/c";
  auto first = AccelerateLaunchEnvironment(TRAINYARD_TEST_PYTHON, kConfig, where_, dir);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(CacheFiles().size(), 1u);
  const fs::path answer = CacheFiles()[0];
  fs::remove(answer);
  // Close-on-exec: the Python the call starts must not inherit (and so hold) the lock.
  const int lock = open((dir + "/accelerate-env.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  ASSERT_GE(lock, 0);
  ASSERT_EQ(flock(lock, LOCK_EX), 0);
  auto waiting = std::async(std::launch::async,
                            [&] { return AccelerateLaunchEnvironment(TRAINYARD_TEST_PYTHON, kConfig, where_, dir); });
  // Long enough for it to compute (about a second) had it not waited.
  EXPECT_EQ(waiting.wait_for(std::chrono::seconds(4)), std::future_status::timeout) << "it did not wait for the lock";
  std::ofstream(answer) << R"({"ACCELERATE_MIXED_PRECISION": "stored by the first rank"})";
  close(lock);
  auto env = waiting.get();
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->at("ACCELERATE_MIXED_PRECISION"), "stored by the first rank");
}

TEST_F(AccelerateEnvTest, ARefusedConfigGivesAcceleratesMessage) {
  auto env = AccelerateLaunchEnvironment(TRAINYARD_TEST_PYTHON, "distributed_type: NOT_A_TYPE\n", where_,
                                         cache_.path() + "/c");
  ASSERT_FALSE(env.ok());
  EXPECT_EQ(env.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(env.status().message().find("accelerate config"), std::string::npos) << env.status();
  EXPECT_NE(env.status().message().find("NOT_A_TYPE"), std::string::npos) << env.status();
  EXPECT_TRUE(CacheFiles().empty()) << "a refusal is not cached";
}

TEST_F(AccelerateEnvTest, APythonThatDoesNotExistIsNamed) {
  auto env = AccelerateLaunchEnvironment("/nonexistent/python9", kConfig, where_, "");
  ASSERT_FALSE(env.ok());
  EXPECT_NE(env.status().message().find("/nonexistent/python9"), std::string::npos) << env.status();
}

}  // namespace
}  // namespace trainyard
