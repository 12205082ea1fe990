// Checkpoint directories on a real filesystem: atomic commit with a
// manifest, skipping of incomplete or corrupt checkpoints with a reason,
// numbering that continues, and retention that keeps the newest.
#include "common/checkpoint_dir.h"
#include "common/paths.h"

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <thread>

#include "tests/test_util.h"

namespace trainyard {
namespace {

namespace fs = std::filesystem;

void WriteFile(const std::string& path, const std::string& content) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << content;
}

std::string Commit(const CheckpointDir& dir, int64_t n, const std::string& payload) {
  auto staging = dir.Begin(n);
  EXPECT_TRUE(staging.ok()) << staging.status();
  WriteFile(*staging + "/model.safetensors", payload);
  WriteFile(*staging + "/rank-0/optimizer.bin", payload + payload);
  EXPECT_TRUE(dir.Commit(*staging, n, R"({"step": )" + std::to_string(n * 10) + "}").ok());
  return dir.root() + "/checkpoint_" + std::to_string(n);
}

TEST(CheckpointDirTest, CommitsAtomicallyAndListsNewestFirst) {
  TempDir project;
  CheckpointDir dir(project.path());
  EXPECT_EQ(dir.NextIndex(), 0);
  Commit(dir, 0, "zero");
  Commit(dir, 1, "one");
  EXPECT_EQ(dir.NextIndex(), 2);
  CheckpointScan scan = dir.List(/*verify=*/true);
  ASSERT_EQ(scan.complete.size(), 2u);
  EXPECT_EQ(scan.complete[0].index, 1);
  EXPECT_EQ(scan.complete[1].index, 0);
  EXPECT_NE(scan.complete[0].metadata_json.find("\"step\":10"), std::string::npos) << scan.complete[0].metadata_json;
  EXPECT_TRUE(scan.skipped.empty());
  EXPECT_TRUE(fs::exists(scan.complete[0].path + "/manifest.json"));
  // No staging directory is left behind.
  for (const auto& e : fs::directory_iterator(dir.root())) {
    EXPECT_EQ(e.path().filename().string().rfind(".staging", 0), std::string::npos) << e.path();
  }
}

TEST(CheckpointDirTest, SkipsIncompleteAndCorruptCheckpointsWithReasons) {
  TempDir project;
  CheckpointDir dir(project.path());
  Commit(dir, 0, "good");
  const std::string corrupt = Commit(dir, 1, "will be flipped");
  const std::string truncated = Commit(dir, 2, "will be cut");
  // A crash before the manifest: a directory that looks like a checkpoint.
  WriteFile(dir.root() + "/checkpoint_3/model.safetensors", "partial");
  {
    std::fstream f(corrupt + "/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(0);
    f.put('W');  // same size, different bytes
  }
  fs::resize_file(truncated + "/rank-0/optimizer.bin", 3);

  CheckpointScan quick = dir.List(/*verify=*/false);
  ASSERT_EQ(quick.complete.size(), 2u);  // sizes alone miss the flipped byte
  CheckpointScan scan = dir.List(/*verify=*/true);
  ASSERT_EQ(scan.complete.size(), 1u);
  EXPECT_EQ(scan.complete[0].index, 0);
  ASSERT_EQ(scan.skipped.size(), 3u);
  std::map<std::string, std::string> why(scan.skipped.begin(), scan.skipped.end());
  EXPECT_NE(why[dir.root() + "/checkpoint_3"].find("no manifest"), std::string::npos);
  EXPECT_NE(why[corrupt].find("fails its checksum"), std::string::npos);
  EXPECT_NE(why[truncated].find("bytes, the manifest says"), std::string::npos);
  // Numbering continues after every directory seen, complete or not.
  EXPECT_EQ(dir.NextIndex(), 4);
}

// A manifest (in a directory a user writes) naming files outside its
// checkpoint, directly or through a link, learns nothing about them: the
// checkpoint is not complete, and the reason names no size.
TEST(CheckpointDirTest, AManifestCannotNameFilesOutsideItsCheckpoint) {
  TempDir project, outside;
  WriteFile(outside.path() + "/secret", "0123456789");
  CheckpointDir dir(project.path());
  for (int i = 0; i < 2; ++i) {
    const std::string c = dir.root() + "/checkpoint_" + std::to_string(i);
    fs::create_directories(c);
    std::string name = "../../" + fs::relative(outside.path() + "/secret", project.path()).string();
    if (i == 1) {
      fs::create_symlink(outside.path() + "/secret", c + "/link");
      name = "link";
    }
    WriteFile(c + "/manifest.json", "{\"format\": \"trainyard-checkpoint-v1\", \"index\": " + std::to_string(i) +
                                        ", \"files\": {\"" + name + "\": {\"size\": 10}}}");
  }
  CheckpointScan scan = dir.List(/*verify=*/false);
  EXPECT_TRUE(scan.complete.empty());
  ASSERT_EQ(scan.skipped.size(), 2u);
  for (const auto& [path, why] : scan.skipped)
    EXPECT_NE(why.find("is not a file of the checkpoint"), std::string::npos) << why;
}

TEST(CheckpointDirTest, TotalLimitKeepsTheNewestComplete) {
  TempDir project;
  CheckpointDir dir(project.path());
  for (int n = 0; n < 5; ++n) Commit(dir, n, "payload " + std::to_string(n));
  // The newest directory is incomplete: it must not count, and the newest
  // complete one must survive.
  WriteFile(dir.root() + "/checkpoint_5/model.safetensors", "partial");
  auto deleted = dir.ApplyTotalLimit(2);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(deleted->size(), 3u);
  CheckpointScan scan = dir.List(true);
  ASSERT_EQ(scan.complete.size(), 2u);
  EXPECT_EQ(scan.complete[0].index, 4);
  EXPECT_EQ(scan.complete[1].index, 3);
  EXPECT_TRUE(fs::exists(dir.root() + "/checkpoint_5"));  // not ours to delete
  EXPECT_EQ(dir.ApplyTotalLimit(0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(dir.NextIndex(), 6);
}

TEST(CheckpointDirTest, RefusesToOverwriteACommittedCheckpoint) {
  TempDir project;
  CheckpointDir dir(project.path());
  Commit(dir, 0, "first");
  auto staging = dir.Begin(0);
  ASSERT_TRUE(staging.ok());
  WriteFile(*staging + "/model.safetensors", "second");
  EXPECT_EQ(dir.Commit(*staging, 0, "{}").code(), absl::StatusCode::kAlreadyExists);
}

TEST(PathsTest, AllowsPathsUnderARootAndRefusesEscapes) {
  TempDir root, outside;
  std::filesystem::create_directories(root.path() + "/a/b");
  std::filesystem::create_directory_symlink(outside.path(), root.path() + "/link");
  const std::vector<std::string> roots = {root.path()};
  auto ok = ResolveUnderRoots(root.path() + "/a/b/../b/new-dir", roots);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(*ok, std::filesystem::canonical(root.path()).string() + "/a/b/new-dir");
  EXPECT_TRUE(ResolveUnderRoots(root.path(), roots).ok());
  for (const std::string& bad : {root.path() + "/../x", root.path() + "/a/../../x", root.path() + "/link/x",
                                 std::string("/etc"), root.path() + "x"}) {
    auto r = ResolveUnderRoots(bad, roots);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(r.status().message()).find("outside the allowed roots"), std::string::npos);
  }
  EXPECT_FALSE(ResolveUnderRoots("", roots).ok());
}

// The kernel resolves a path beneath its root: a dangling link that leads
// out (which weakly_canonical keeps as it is) is refused, and so is a file
// read beneath a root through a link out of it; a link that stays inside
// is followed. No roots: no path.
TEST(PathsTest, ALinkOutOfARootIsRefusedEvenWhenItDangles) {
  TempDir root, outside;
  WriteFile(outside.path() + "/secret", "s");
  std::filesystem::create_directories(root.path() + "/in");
  std::filesystem::create_symlink(outside.path() + "/missing-dir", root.path() + "/dangling");
  std::filesystem::create_symlink("../../etc/not-there", root.path() + "/in/dotdot");
  std::filesystem::create_symlink("in", root.path() + "/inside");
  std::filesystem::create_symlink(outside.path() + "/secret", root.path() + "/in/secret-link");
  const std::vector<std::string> roots = {root.path()};
  for (const std::string& bad :
       {root.path() + "/dangling", root.path() + "/dangling/new", root.path() + "/in/dotdot"}) {
    auto r = ResolveUnderRoots(bad, roots);
    EXPECT_FALSE(r.ok()) << bad << " resolved to " << r.value_or("");
  }
  auto inside = ResolveUnderRoots(root.path() + "/inside/new-file", roots);
  ASSERT_TRUE(inside.ok()) << inside.status();
  auto none = ResolveUnderRoots(root.path() + "/in", {});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(std::string(none.status().message()).find("no roots"), std::string::npos) << none.status();
  // Read beneath the root: the link out of it is refused, as named it reads.
  auto leaked = ReadBoundedFile(root.path() + "/in/secret-link", 1024, roots);
  ASSERT_FALSE(leaked.ok());
  EXPECT_NE(std::string(leaked.status().message()).find("leads out of"), std::string::npos) << leaked.status();
  EXPECT_TRUE(ReadBoundedFile(root.path() + "/in/secret-link", 1024).ok());
  WriteFile(root.path() + "/in/config.json", "{}");
  EXPECT_TRUE(ReadBoundedFile(root.path() + "/inside/config.json", 1024, roots).ok());
}

// A file in a directory another account writes (a job's log, its exit
// code) is read only as a regular file, never through a link, never
// blocking on a FIFO.
TEST(PathsTest, NoFollowOpensRegularFilesOnly) {
  TempDir dir, outside;
  WriteFile(outside.path() + "/shadow", "root:secret");
  WriteFile(dir.path() + "/rank-0.exit", "3\n");
  std::filesystem::create_symlink(outside.path() + "/shadow", dir.path() + "/rank-1.exit");
  ASSERT_EQ(::mkfifo((dir.path() + "/rank-2.exit").c_str(), 0600), 0);
  EXPECT_EQ(ReadExitCodeFile(dir.path() + "/rank-0.exit"), 3);
  EXPECT_EQ(ReadExitCodeFile(dir.path() + "/rank-1.exit"), std::nullopt);
  EXPECT_EQ(ReadExitCodeFile(dir.path() + "/rank-2.exit"), std::nullopt);  // returns at once
  EXPECT_EQ(ReadExitCodeFile(dir.path() + "/rank-9.exit"), std::nullopt);
  auto link = OpenRegularFileNoFollow(dir.path() + "/rank-1.exit");
  ASSERT_FALSE(link.ok());
  EXPECT_NE(std::string(link.status().message()).find("symbolic link"), std::string::npos) << link.status();
}

// What a request makes the server read is read without blocking and
// within a size: a FIFO (no writer) or a 100 GB sparse file is refused at
// once, naming why. A blocking read of the FIFO would never return: it runs
// on a thread of its own here, so that such a failure ends the test.
TEST(PathsTest, BoundedReadsRefuseFifosAndHugeFilesAtOnce) {
  TempDir dir;
  const std::string small = dir.path() + "/config.json", fifo = dir.path() + "/fifo.json",
                    sparse = dir.path() + "/sparse.json";
  WriteFile(small, "{\"a\": 1}");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  { std::ofstream grow(sparse); }
  std::filesystem::resize_file(sparse, uint64_t{100} << 30);
  auto read = [](const std::string& path) {
    auto done = std::make_shared<std::promise<absl::StatusOr<std::string>>>();
    std::future<absl::StatusOr<std::string>> result = done->get_future();
    std::thread([done, path] { done->set_value(ReadBoundedFile(path, 1 << 20)); }).detach();
    EXPECT_EQ(result.wait_for(std::chrono::seconds(5)), std::future_status::ready) << path << " blocked";
    return result.wait_for(std::chrono::seconds(0)) == std::future_status::ready
               ? result.get()
               : absl::StatusOr<std::string>(absl::DeadlineExceededError("blocked"));
  };
  auto ok = read(small);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(*ok, "{\"a\": 1}");
  auto f = read(fifo);
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument) << f.status();
  EXPECT_NE(std::string(f.status().message()).find("is a FIFO, not a regular file"), std::string::npos) << f.status();
  auto s = read(sparse);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << s.status();
  EXPECT_NE(std::string(s.status().message()).find("is 107374182400 bytes, more than the 1048576"), std::string::npos)
      << s.status();
  EXPECT_EQ(read(dir.path() + "/missing.json").status().code(), absl::StatusCode::kNotFound);
  auto d = read(dir.path());
  EXPECT_NE(std::string(d.status().message()).find("is a directory"), std::string::npos) << d.status();
}

// A directory in a place every account writes (/dev/shm): this account's
// own, or refused; and removed without following a link out of it.
TEST(PathsTest, OwnDirectoriesAreMadePrivateAndOthersAreRefused) {
  TempDir dir;
  const std::string mine = dir.path() + "/mine";
  ASSERT_TRUE(MakeOwnDirectory(mine).ok());
  struct stat st {};
  ASSERT_EQ(::lstat(mine.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_TRUE(MakeOwnDirectory(mine).ok());  // again: it is ours
  // Writable by others: refused, though ours.
  const std::string open = dir.path() + "/open";
  ASSERT_EQ(::mkdir(open.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(open.c_str(), 0777), 0);
  absl::Status s = MakeOwnDirectory(open);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("with mode 0777"), std::string_view::npos) << s;
  // A link in its place: refused, whatever it points at.
  const std::string link = dir.path() + "/link";
  std::filesystem::create_directory_symlink(mine, link);
  s = MakeOwnDirectory(link);
  EXPECT_NE(s.message().find("is not a directory"), std::string_view::npos) << s;
  // Someone else's (as root, the test can make one).
  if (::geteuid() == 0) {
    const std::string theirs = dir.path() + "/theirs";
    ASSERT_EQ(::mkdir(theirs.c_str(), 0700), 0);
    ASSERT_EQ(::chown(theirs.c_str(), 65534, 65534), 0);
    s = MakeOwnDirectory(theirs);
    EXPECT_NE(s.message().find("belongs to uid 65534"), std::string_view::npos) << s;
    EXPECT_EQ(RemoveOwnTree(theirs, 0).code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_TRUE(std::filesystem::exists(theirs));
  }
}

TEST(PathsTest, RemovingAnOwnTreeNeverFollowsALink) {
  TempDir dir, outside;
  const std::string tree = dir.path() + "/tree";
  ASSERT_TRUE(MakeOwnDirectory(tree).ok());
  std::filesystem::create_directories(tree + "/a/b");
  std::ofstream(tree + "/a/b/file") << "x";
  std::ofstream(outside.path() + "/precious") << "keep";
  std::filesystem::create_directory_symlink(outside.path(), tree + "/a/to-outside");
  std::filesystem::create_symlink(outside.path() + "/precious", tree + "/file-link");
  ASSERT_TRUE(RemoveOwnTree(tree, ::geteuid()).ok());
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::symlink_status(tree)));
  EXPECT_TRUE(std::filesystem::exists(outside.path() + "/precious"));
  EXPECT_TRUE(RemoveOwnTree(tree, ::geteuid()).ok());  // gone already: nothing to do
  // The top itself a link to a directory: not followed, not removed.
  std::filesystem::create_directory_symlink(outside.path(), tree);
  EXPECT_EQ(RemoveOwnTree(tree, ::geteuid()).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(std::filesystem::exists(outside.path() + "/precious"));
}

TEST(CheckpointDirTest, CheckCheckpointNamesTheProblem) {
  TempDir dir;
  CheckpointDir cd(dir.path());
  auto staging = cd.Begin(4);
  ASSERT_TRUE(staging.ok());
  std::ofstream(*staging + "/w.bin") << "weights";
  ASSERT_TRUE(cd.Commit(*staging, 4, "{}").ok());
  const std::string path = cd.root() + "/checkpoint_4";
  EXPECT_TRUE(CheckCheckpoint(path, true).ok());
  std::ofstream(path + "/w.bin", std::ios::trunc) << "WEIGHTS";  // same size, other bytes
  auto r = CheckCheckpoint(path, true);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("fails its checksum"), std::string::npos) << r.status();
  EXPECT_EQ(CheckCheckpoint(dir.path() + "/nope", true).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckCheckpoint(cd.root() + "/checkpoint_9", true).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace trainyard
