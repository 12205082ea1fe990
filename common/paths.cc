#include "common/paths.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace trainyard {
namespace fs = std::filesystem;

namespace {

absl::StatusOr<fs::path> Resolve(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("empty path");
  if (path.find('\0') != std::string::npos) return absl::InvalidArgumentError("path contains a NUL character");
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::absolute(path, ec), ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("cannot resolve ", path, ": ", ec.message()));
  return p.lexically_normal();
}

bool IsUnder(const fs::path& p, const fs::path& root) {
  auto r = root.begin(), q = p.begin();
  for (; r != root.end(); ++r, ++q) {
    if (r->empty()) continue;  // trailing separator
    if (q == p.end() || *q != *r) return false;
  }
  return true;
}

// openat2(dir_fd, path, flags, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS).
int OpenAt2Beneath(int dir_fd, const char* path, int flags) {
  open_how how{};
  how.flags = static_cast<uint64_t>(flags | O_CLOEXEC);
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  return static_cast<int>(syscall(SYS_openat2, dir_fd, path, &how, sizeof(how)));
}

// Whether the existing part of `rel` opens beneath `root` (the rest does
// not exist yet); the error says where it leads out.
absl::Status CheckBeneath(const fs::path& root, const fs::path& rel, const std::string& shown) {
  const int root_fd = ::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (root_fd < 0) return absl::InvalidArgumentError(absl::StrCat("cannot open root ", root.string()));
  fs::path prefix = rel;
  absl::Status result = absl::OkStatus();
  for (;;) {
    const int fd = OpenAt2Beneath(root_fd, prefix.empty() ? "." : prefix.c_str(), O_PATH);
    if (fd >= 0) {
      ::close(fd);
      break;
    }
    const int err = errno;
    if (err == ENOENT && !prefix.empty()) {
      prefix = prefix.parent_path();
      continue;
    }
    result = absl::InvalidArgumentError(
        err == EXDEV || err == ELOOP
            ? absl::StrCat(shown, " leads out of ", root.string(), " through a symbolic link or '..' (under ",
                           (root / prefix).string(), ")")
            : absl::StrCat(shown, ": ", (root / prefix).string(), ": ", std::strerror(err)));
    break;
  }
  ::close(root_fd);
  return result;
}

}  // namespace

bool IsPathUnder(const std::string& path, const std::string& dir) { return IsUnder(fs::path(path), fs::path(dir)); }

absl::StatusOr<std::string> ResolveUnderRoots(const std::string& path, const std::vector<std::string>& roots,
                                              const std::string& hint) {
  auto p = Resolve(path);
  if (!p.ok()) return p.status();
  if (roots.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": no directory is allowed (no roots): name none"));
  }
  std::vector<std::string> shown;
  for (const std::string& root : roots) {
    auto r = Resolve(root);
    if (!r.ok()) continue;
    if (IsUnder(*p, *r)) {
      if (absl::Status s = CheckBeneath(*r, p->lexically_relative(*r), path); !s.ok()) return s;
      return p->string();
    }
    shown.push_back(r->string());
  }
  return absl::InvalidArgumentError(absl::StrCat(path, " resolves to ", p->string(), ", outside the allowed roots (",
                                                 absl::StrJoin(shown, ", "), "); ", hint));
}

bool ReadFileToString(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::stringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return static_cast<bool>(in) || in.eof();
}

namespace {

// Opens `path` read-only, non-blocking: as named, or beneath one of
// `beneath`; -1 with errno when it cannot be (EXDEV: it leads out).
int OpenForRead(const std::string& path, const std::vector<std::string>& beneath, int extra_flags) {
  const int flags = O_RDONLY | O_NONBLOCK | O_NOCTTY | extra_flags;
  if (beneath.empty()) return ::open(path.c_str(), flags | O_CLOEXEC);
  const fs::path p = fs::path(path).lexically_normal();
  int err = EXDEV;
  for (const std::string& dir : beneath) {
    const fs::path d = fs::path(dir).lexically_normal();
    if (!IsUnder(p, d)) continue;
    const int dir_fd = ::open(d.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd < 0) continue;
    const fs::path rel = p.lexically_relative(d);
    const int fd = OpenAt2Beneath(dir_fd, rel.empty() ? "." : rel.c_str(), flags);
    err = errno;
    ::close(dir_fd);
    if (fd >= 0) return fd;
  }
  errno = err;
  return -1;
}

// What `st` is, when it is not a regular file; nullptr when it is.
const char* NotRegular(const struct stat& st) {
  if (S_ISREG(st.st_mode)) return nullptr;
  return S_ISFIFO(st.st_mode)   ? "a FIFO"
         : S_ISDIR(st.st_mode)  ? "a directory"
         : S_ISCHR(st.st_mode)  ? "a character device"
         : S_ISBLK(st.st_mode)  ? "a block device"
         : S_ISSOCK(st.st_mode) ? "a socket"
                                : "not a regular file";
}

}  // namespace

absl::StatusOr<int> OpenRegularFileNoFollow(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) return absl::NotFoundError(absl::StrCat(path, ": does not exist"));
    if (err == ELOOP) return absl::InvalidArgumentError(absl::StrCat(path, ": is a symbolic link, not a file"));
    return absl::InvalidArgumentError(absl::StrCat(path, ": cannot be read (", std::strerror(err), ")"));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || NotRegular(st) != nullptr) {
    const char* kind = NotRegular(st);
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": is ", kind ? kind : "unreadable", ", not a regular file"));
  }
  ::fcntl(fd, F_SETFL, O_RDONLY);
  return fd;
}

absl::StatusOr<uint64_t> RegularFileSizeBeneath(const std::string& path, const std::string& dir) {
  const fs::path p = fs::path(path).lexically_normal(), d = fs::path(dir).lexically_normal();
  if (!IsUnder(p, d)) return absl::InvalidArgumentError(absl::StrCat(path, ": leads out of ", dir));
  const int dir_fd = ::open(d.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) return absl::NotFoundError(absl::StrCat(dir, ": does not exist"));
  const fs::path rel = p.lexically_relative(d);
  // O_PATH: neither reads nor blocks (a FIFO opens as any file does).
  const int fd = OpenAt2Beneath(dir_fd, rel.empty() ? "." : rel.c_str(), O_PATH);
  const int open_errno = errno;
  ::close(dir_fd);
  if (fd < 0) {
    const int err = open_errno;
    if (err == ENOENT || err == ENOTDIR) return absl::NotFoundError(absl::StrCat(path, ": does not exist"));
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": leads out of ", dir, " or cannot be read (", std::strerror(err), ")"));
  }
  struct stat st {};
  const int rc = ::fstat(fd, &st);
  ::close(fd);
  if (rc != 0) return absl::InvalidArgumentError(absl::StrCat(path, ": ", std::strerror(errno)));
  if (const char* kind = NotRegular(st)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": is ", kind, ", not a regular file"));
  }
  return static_cast<uint64_t>(st.st_size);
}

absl::StatusOr<std::string> ReadBoundedFile(const std::string& path, size_t max_bytes,
                                            const std::vector<std::string>& beneath) {
  const int fd = OpenForRead(path, beneath, 0);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) return absl::NotFoundError(absl::StrCat(path, ": does not exist"));
    if (err == EXDEV || err == ELOOP) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": leads out of ", absl::StrJoin(beneath, ", "), " through a symbolic link or '..'"));
    }
    return absl::InvalidArgumentError(absl::StrCat(path, ": cannot be read (", std::strerror(err), ")"));
  }
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": cannot be read (", std::strerror(errno), ")"));
  }
  if (const char* kind = NotRegular(st)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": is ", kind, ", not a regular file"));
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": is ", st.st_size, " bytes, more than the ", max_bytes, " such a file may have"));
  }
  std::string out(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::read(fd, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::InvalidArgumentError(absl::StrCat(path, ": cannot be read (", std::strerror(errno), ")"));
    if (n == 0) break;  // shrank meanwhile
    done += static_cast<size_t>(n);
  }
  out.resize(done);
  return out;
}

std::optional<int> ReadExitCodeFile(const std::string& path) {
  absl::StatusOr<int> fd = OpenRegularFileNoFollow(path);
  if (!fd.ok()) return std::nullopt;
  char buf[32] = {};
  const ssize_t n = ::read(*fd, buf, sizeof(buf) - 1);
  ::close(*fd);
  if (n <= 0) return std::nullopt;
  char* end = nullptr;
  const long code = std::strtol(buf, &end, 10);
  if (end == buf || code < 0 || code > 255) return std::nullopt;
  return static_cast<int>(code);
}

namespace {

absl::Status OwnedBy(const struct stat& st, const std::string& path, uid_t uid) {
  if (S_ISLNK(st.st_mode) || !S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(path, " is not a directory (a link or a file in its place)"));
  }
  if (st.st_uid != uid || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return absl::FailedPreconditionError(absl::StrCat(path, " belongs to uid ", st.st_uid, " with mode ", mode,
                                                      ", not to uid ", uid, " alone: someone else made it"));
  }
  return absl::OkStatus();
}

// Empties the directory open at `dir` (taking the descriptor), never
// following a link; the first error is kept, the rest goes on.
absl::Status EmptyDirectoryAt(int dir, const std::string& where) {
  DIR* d = ::fdopendir(dir);
  if (d == nullptr) {
    ::close(dir);
    return absl::InternalError(absl::StrCat(where, ": ", std::strerror(errno)));
  }
  absl::Status first = absl::OkStatus();
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.emplace_back(e->d_name);
  }
  for (const std::string& name : names) {
    struct stat st {};
    if (::fstatat(::dirfd(d), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      const int sub = ::openat(::dirfd(d), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub >= 0) {
        absl::Status s = EmptyDirectoryAt(sub, where + "/" + name);
        if (first.ok()) first = s;
      }
    }
    if (::unlinkat(::dirfd(d), name.c_str(), S_ISDIR(st.st_mode) ? AT_REMOVEDIR : 0) != 0 && errno != ENOENT &&
        first.ok()) {
      first = absl::InternalError(absl::StrCat(where, "/", name, ": ", std::strerror(errno)));
    }
  }
  ::closedir(d);
  return first;
}

}  // namespace

absl::Status IsOwnDirectory(const std::string& path, uid_t uid) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return absl::NotFoundError(absl::StrCat(path, ": ", std::strerror(errno)));
  return OwnedBy(st, path, uid);
}

absl::Status MakeOwnDirectory(const std::string& path) {
  if (::mkdir(path.c_str(), 0700) == 0) return absl::OkStatus();
  if (errno != EEXIST) return absl::InternalError(absl::StrCat("cannot make ", path, ": ", std::strerror(errno)));
  return IsOwnDirectory(path, ::geteuid());
}

absl::Status RemoveOwnTree(const std::string& path, uid_t uid) {
  const std::filesystem::path p(path);
  const int parent = ::open(p.parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (parent < 0) return errno == ENOENT ? absl::OkStatus() : absl::InternalError(std::strerror(errno));
  const std::string name = p.filename().string();
  absl::Status out = absl::OkStatus();
  const int dir = ::openat(parent, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  struct stat st {};
  if (dir < 0) {
    if (errno != ENOENT) {
      out = ::fstatat(parent, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0
                ? OwnedBy(st, path, uid)
                : absl::InternalError(absl::StrCat(path, ": ", std::strerror(errno)));
    }
  } else if (::fstat(dir, &st) != 0 || !(out = OwnedBy(st, path, uid)).ok()) {
    ::close(dir);
  } else {
    out = EmptyDirectoryAt(dir, path);
    if (::unlinkat(parent, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT && out.ok()) {
      out = absl::InternalError(absl::StrCat(path, ": ", std::strerror(errno)));
    }
  }
  ::close(parent);
  return out;
}

std::string SnapshotDir(const std::string& job_id) {
  const char* root = std::getenv("TRAINYARD_SNAPSHOT_ROOT");
  return std::string(root != nullptr && *root != '\0' ? root : "/dev/shm") + "/trainyard-job-" + job_id;
}

}  // namespace trainyard
