// Path policy: every path a job names (checkpoint directories, resume
// sources) must lie under one of the server's allowed roots, after `..` and
// symbolic links are resolved.
#ifndef TRAINYARD_COMMON_PATHS_H_
#define TRAINYARD_COMMON_PATHS_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace trainyard {

// Resolves `path` (relative paths against the working directory; symbolic
// links followed as far as the path exists, `..` and `.` removed) and checks
// that it is one of `roots` (resolved likewise) or lies beneath one, as the
// kernel sees it: the part of it that exists is opened from the root's
// directory with openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS), so a
// symbolic link that leads out of the root — dangling ones too — is refused.
// No roots: every path is refused. Returns the resolved absolute path, or
// InvalidArgument naming both.
// `hint` ends the message of a path outside them (what would allow it).
absl::StatusOr<std::string> ResolveUnderRoots(
    const std::string& path, const std::vector<std::string>& roots,
    const std::string& hint = "start the server with --allowed-root DIR to allow more");

// Whether `path` (absolute, resolved) is `dir` or lies beneath it.
bool IsPathUnder(const std::string& path, const std::string& dir);

// The whole content of a file; false when it cannot be read.
bool ReadFileToString(const std::string& path, std::string* out);

// The whole content of a regular file of at most `max_bytes`, read without
// ever blocking on what is not a regular file: opened non-blocking (a FIFO
// or device is refused at once, never waited on) and checked with fstat
// before a byte is read (a huge or sparse file is refused by its size).
// NotFound when it does not exist; InvalidArgument naming the path and why
// otherwise. For the files a request makes the server read (config.json,
// manifests). `beneath`: when not empty, the file is opened beneath one of
// these directories by the kernel (openat2 RESOLVE_BENEATH |
// RESOLVE_NO_MAGICLINKS): no `..` and no symbolic link leads out of it,
// whatever changed since its path was checked.
absl::StatusOr<std::string> ReadBoundedFile(const std::string& path, size_t max_bytes,
                                            const std::vector<std::string>& beneath = {});

// The size of the regular file `path`, which must lie beneath `dir` (no
// '..' or link leading out of it: openat2 RESOLVE_BENEATH), without reading
// it or blocking. NotFound when it is missing; InvalidArgument when it leads
// out of `dir` or is not a regular file.
absl::StatusOr<uint64_t> RegularFileSizeBeneath(const std::string& path, const std::string& dir);

// Opens a regular file for reading without ever blocking and without
// following a symbolic link at its last component (a file in a directory
// another account writes: a job's log), as ReadBoundedFile checks it.
// Returns the descriptor (close-on-exec, blocking again), or the error.
absl::StatusOr<int> OpenRegularFileNoFollow(const std::string& path);

// The exit code a worker left in `path` (trainyard-worker
// --exit-status-dir), read as OpenRegularFileNoFollow opens it: nullopt
// when there is none, or it is not a regular file holding a number.
std::optional<int> ReadExitCodeFile(const std::string& path);

// Where a job's in-memory snapshots (checkpoint.snapshot_every_steps) live
// on a host: $TRAINYARD_SNAPSHOT_ROOT (default /dev/shm, the host's shared
// memory) / trainyard-job-<job_id>. Workers write there; the coordinator
// removes it when a local job ends.
std::string SnapshotDir(const std::string& job_id);

// A directory that only this process's account may write, in a place others
// can write too (/dev/shm, /tmp): made with mode 0700, or, when it exists
// already, accepted only if it is a directory (not a link), owned by this
// account, and writable by nobody else. FailedPrecondition naming its owner
// and mode otherwise (someone else made it first: the caller uses nothing
// in it).
absl::Status MakeOwnDirectory(const std::string& path);
// Whether `path` is a directory (not a link) owned by `uid` and writable
// by nobody else (what MakeOwnDirectory leaves); the error says why not.
absl::Status IsOwnDirectory(const std::string& path, uid_t uid);

// Removes `path` and everything beneath it without following a symbolic
// link anywhere (each directory opened relative to its parent, O_NOFOLLOW),
// so that a tree another account can change while it is removed never
// leads the removal out of it. Only when the top is a directory owned by
// `uid` (IsOwnDirectory); a missing `path` is OK.
absl::Status RemoveOwnTree(const std::string& path, uid_t uid);

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_PATHS_H_
