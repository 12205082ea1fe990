// PrepareJobDirs with a real account (as root: `nobody`, on every Debian
// system): the job directory stays the server's and closed to listing, the
// attempt's and the default checkpoints/ are the account's, and a symbolic
// link the account planted where one is to be made is refused, not followed.
#include "server/launch/job_dirs.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "tests/test_util.h"

namespace trainyard {
namespace {

struct stat Stat(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(lstat(path.c_str(), &st), 0) << path;
  return st;
}

TEST(JobDirsTest, TheAccountOwnsWhatItWritesAndNothingAbove) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give directories away";
  absl::StatusOr<UnixAccount> nobody = LookupUnixAccount("nobody");
  ASSERT_TRUE(nobody.ok()) << nobody.status();
  TempDir state;
  const std::string job = state.path() + "/jobs/job-1", log = job + "/attempt-1";
  ASSERT_TRUE(PrepareJobDirs(log, /*default_project=*/true, &*nobody).ok());
  EXPECT_EQ(Stat(job).st_uid, 0u);
  EXPECT_EQ(Stat(job).st_mode & 07777, 0711u);
  for (const std::string& d : {log, job + "/checkpoints"}) {
    EXPECT_EQ(Stat(d).st_uid, nobody->uid) << d;
    EXPECT_EQ(Stat(d).st_gid, nobody->gid) << d;
    EXPECT_EQ(Stat(d).st_mode & 07777, 0700u) << d;
  }
  // The next attempt, after the account replaced checkpoints/ by a link.
  TempDir elsewhere;
  std::filesystem::remove(job + "/checkpoints");
  std::filesystem::create_directory_symlink(elsewhere.path(), job + "/checkpoints");
  absl::Status s = PrepareJobDirs(job + "/attempt-2", true, &*nobody);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find("symbolic link"), std::string::npos) << s;
  EXPECT_EQ(Stat(elsewhere.path()).st_uid, 0u) << "the link's target was not given away";
}

TEST(JobDirsTest, WithoutAnAccountTheDirectoriesAreTheServers) {
  TempDir state;
  const std::string job = state.path() + "/jobs/job-2", log = job + "/attempt-1";
  ASSERT_TRUE(PrepareJobDirs(log, true, nullptr).ok());
  EXPECT_EQ(Stat(job).st_mode & 07777, 0711u);
  EXPECT_EQ(Stat(log).st_mode & 07777, 0700u);
  EXPECT_EQ(Stat(log).st_uid, geteuid());
  EXPECT_FALSE(std::filesystem::exists(job + "/checkpoints")) << "the worker makes it";
}

}  // namespace
}  // namespace trainyard
