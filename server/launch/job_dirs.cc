#include "server/launch/job_dirs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace trainyard {
namespace {

// A directory `name` in the directory `parent_fd`, made when missing (mode
// `mode`), opened without following a symbolic link, given to `account`
// (null: kept) and set to `mode`. Returns its descriptor.
absl::StatusOr<int> Directory(int parent_fd, const std::string& name, const std::string& path, mode_t mode,
                              const UnixAccount* account) {
  if (mkdirat(parent_fd, name.c_str(), mode) != 0 && errno != EEXIST) {
    return absl::InternalError(absl::StrCat("cannot make ", path, ": ", std::strerror(errno)));
  }
  const int fd = openat(parent_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, " is not a directory", errno == ELOOP || errno == ENOTDIR ? "" : ": ",
        errno == ELOOP || errno == ENOTDIR ? " (a symbolic link or file stands there)" : std::strerror(errno)));
  }
  if (absl::Status s = GiveTo(fd, account, path); !s.ok()) {
    close(fd);
    return s;
  }
  if (fchmod(fd, mode) != 0) {
    const int err = errno;
    close(fd);
    return absl::InternalError(absl::StrCat("cannot set the mode of ", path, ": ", std::strerror(err)));
  }
  return fd;
}

}  // namespace

absl::Status PrepareJobDirs(const std::string& log_dir, bool default_project, const UnixAccount* account) {
  namespace fs = std::filesystem;
  const fs::path attempt(log_dir);
  const fs::path job = attempt.parent_path();
  std::error_code ec;
  // <state>/jobs: the server's alone to write.
  fs::create_directories(job.parent_path(), ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", job.parent_path().string(), ": ", ec.message()));
  const int jobs_fd = open(job.parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (jobs_fd < 0) return absl::InternalError(absl::StrCat("cannot open ", job.parent_path().string()));
  absl::StatusOr<int> job_fd = Directory(jobs_fd, job.filename().string(), job.string(), 0711, nullptr);
  close(jobs_fd);
  if (!job_fd.ok()) return job_fd.status();
  absl::Status result = absl::OkStatus();
  absl::StatusOr<int> attempt_fd = Directory(*job_fd, attempt.filename().string(), log_dir, 0700, account);
  if (attempt_fd.ok()) {
    close(*attempt_fd);
  } else {
    result = attempt_fd.status();
  }
  if (result.ok() && default_project && account != nullptr) {
    absl::StatusOr<int> c = Directory(*job_fd, "checkpoints", (job / "checkpoints").string(), 0700, account);
    if (c.ok()) {
      close(*c);
    } else {
      result = c.status();
    }
  }
  close(*job_fd);
  return result;
}

}  // namespace trainyard
