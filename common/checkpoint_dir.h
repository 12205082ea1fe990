// CheckpointDir: the on-disk life of checkpoints under one project directory,
// in Accelerate's automatic layout: <project_dir>/checkpoints/checkpoint_<N>/.
//
// A checkpoint is written into a staging directory, its files fsynced, a
// manifest (every file's size and XXH3-64 checksum) written last and
// fsynced, then the directory is renamed into place and the parent fsynced:
// a crash never leaves a checkpoint that looks complete. A directory without
// a valid manifest, or whose files do not match it, is never used; List()
// says why it skipped each one. Retention (total_limit) never deletes the
// newest complete checkpoint. Not thread-safe: one writer per project.
#ifndef TRAINYARD_COMMON_CHECKPOINT_DIR_H_
#define TRAINYARD_COMMON_CHECKPOINT_DIR_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace trainyard {

struct CheckpointInfo {
  int64_t index = 0;          // N of checkpoint_<N>
  std::string path;           // absolute directory
  std::string metadata_json;  // what the writer stored in the manifest
};

struct CheckpointScan {
  std::vector<CheckpointInfo> complete;                      // newest (highest N) first
  std::vector<std::pair<std::string, std::string>> skipped;  // directory, reason
};

class CheckpointDir {
 public:
  explicit CheckpointDir(std::string project_dir);

  const std::string& root() const { return root_; }  // <project_dir>/checkpoints

  // 1 + the highest N of any checkpoint_<N> directory (complete or not), so
  // numbering continues after a resume and never reuses a failed N.
  int64_t NextIndex() const;

  // Creates an empty staging directory for checkpoint N. Several writers
  // (the ranks of a job) share it: the one that calls Begin passes a tag the
  // others know too, and they write into StagingPath(index, tag).
  absl::StatusOr<std::string> Begin(int64_t index) const;
  absl::StatusOr<std::string> Begin(int64_t index, const std::string& tag) const;
  std::string StagingPath(int64_t index, const std::string& tag) const;
  // Seals a staging directory as checkpoint_<N>: fsync, manifest, rename.
  // Without `checksums` the manifest holds sizes only and verification
  // checks them alone (snapshots in memory, where reading every byte back
  // would cost more than it guards against).
  absl::Status Commit(const std::string& staging, int64_t index, const std::string& metadata_json,
                      bool checksums = true) const;
  // Seals a checkpoint_<N> directory someone else wrote in place (a script
  // job's save_state): fsync, manifest. Until then it is not complete; the
  // files must not change afterwards. Returns N.
  absl::StatusOr<int64_t> Seal(const std::string& dir, const std::string& metadata_json, bool checksums = true) const;

  // Complete checkpoints and skipped directories. With `verify`, every
  // file's checksum is recomputed; otherwise sizes are checked.
  CheckpointScan List(bool verify) const;

  // Deletes the oldest complete checkpoints so that at most `limit` remain
  // (limit >= 1; the newest complete one always stays), and staging
  // leftovers. Returns the deleted directories.
  absl::StatusOr<std::vector<std::string>> ApplyTotalLimit(int limit) const;

 private:
  std::string root_;
};

// Checks one checkpoint_<N> directory as List() does (with `verify`, every
// checksum): InvalidArgument/NotFound/FailedPrecondition say what is wrong.
absl::StatusOr<CheckpointInfo> CheckCheckpoint(const std::string& path, bool verify);

// XXH3-64 of a file's bytes, as 16 hex digits.
absl::StatusOr<std::string> FileChecksum(const std::string& path);

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_CHECKPOINT_DIR_H_
