#include "common/paths.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

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

}  // namespace

absl::StatusOr<std::string> ResolveUnderRoots(const std::string& path, const std::vector<std::string>& roots) {
  auto p = Resolve(path);
  if (!p.ok()) return p.status();
  std::vector<std::string> shown;
  for (const std::string& root : roots) {
    auto r = Resolve(root);
    if (!r.ok()) continue;
    if (IsUnder(*p, *r)) return p->string();
    shown.push_back(r->string());
  }
  return absl::InvalidArgumentError(absl::StrCat(path, " resolves to ", p->string(), ", outside the allowed roots (",
                                                 absl::StrJoin(shown, ", "),
                                                 "); start the server with --allowed-root DIR to allow more"));
}

bool ReadFileToString(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::stringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return static_cast<bool>(in) || in.eof();
}

absl::StatusOr<std::string> ReadBoundedFile(const std::string& path, size_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) return absl::NotFoundError(absl::StrCat(path, ": does not exist"));
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
  if (!S_ISREG(st.st_mode)) {
    const char* kind = S_ISFIFO(st.st_mode)   ? "a FIFO"
                       : S_ISDIR(st.st_mode)  ? "a directory"
                       : S_ISCHR(st.st_mode)  ? "a character device"
                       : S_ISBLK(st.st_mode)  ? "a block device"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "not a regular file";
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

std::string SnapshotDir(const std::string& job_id) {
  const char* root = std::getenv("TRAINYARD_SNAPSHOT_ROOT");
  return std::string(root != nullptr && *root != '\0' ? root : "/dev/shm") + "/trainyard-job-" + job_id;
}

}  // namespace trainyard
