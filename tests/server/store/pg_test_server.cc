#include "tests/server/store/pg_test_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pwd.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "tests/test_paths.h"

extern char** environ;

namespace trainyard::test {
namespace {

int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  ::close(fd);
  return port;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PgTestServer>> PgTestServer::Start() {
  std::unique_ptr<PgTestServer> server(new PgTestServer());
  if (absl::Status s = server->Init(); !s.ok()) return s;
  return server;
}

PgTestServer* PgTestServer::Shared(std::string* error) {
  static std::once_flag once;
  static std::unique_ptr<PgTestServer>* shared = new std::unique_ptr<PgTestServer>();
  static std::string* why = new std::string();
  std::call_once(once, [] {
    auto started = Start();
    if (started.ok()) {
      *shared = std::move(*started);
    } else {
      *why = std::string(started.status().message());
    }
  });
  if (error != nullptr) *error = *why;
  return shared->get();  // the helper process stops it when the program exits
}

absl::Status PgTestServer::Init() {
  const char* env_bin = std::getenv("TRAINYARD_PG_BIN");
  bin_ = env_bin ? env_bin : "/usr/lib/postgresql/15/bin";
  if (::access((bin_ + "/initdb").c_str(), X_OK) != 0 || ::access((bin_ + "/pg_ctl").c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "PostgreSQL 15 is not installed (no ", bin_,
        "/initdb): apt-get install postgresql-15 (scripts/install-deps.sh installs it), or set TRAINYARD_PG_BIN"));
  }
  std::string tmpl = (std::filesystem::temp_directory_path() / "trainyard-pg-XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) return absl::InternalError("mkdtemp failed");
  dir_ = tmpl;
  if (geteuid() == 0) {
    const passwd* pw = getpwnam("postgres");
    if (pw == nullptr) {
      return absl::FailedPreconditionError(
          "running as root and there is no user postgres to run PostgreSQL as (initdb refuses root): "
          "apt-get install postgresql-15 makes it");
    }
    if (::chown(dir_.c_str(), pw->pw_uid, pw->pw_gid) != 0) return absl::InternalError("chown " + dir_);
    as_postgres_ = "runuser -u postgres -- ";
  }
  // The helper: when this program's end of the pipe closes (it exited,
  // however), it stops the server and removes the directory.
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return absl::InternalError("pipe2");
  const std::string cleanup = absl::StrCat("read _; ", as_postgres_, bin_, "/pg_ctl -D ", dir_,
                                           "/data stop -m immediate >/dev/null 2>&1; rm -rf ", dir_);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[0], 0);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);  // not the test's output (ctest waits)
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  const char* argv[] = {"/bin/sh", "-c", cleanup.c_str(), nullptr};
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, "/bin/sh", &actions, nullptr, const_cast<char**>(argv), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[0]);
  if (rc != 0) {
    ::close(fds[1]);
    return absl::InternalError("cannot start the clean-up helper");
  }
  watcher_pipe_ = fds[1];
  watcher_pid_ = pid;

  if (absl::Status s = MakeDataDirectory(); !s.ok()) return s;
  absl::Status started;
  for (int attempt = 0; attempt < 3; ++attempt) {  // a free port taken meanwhile: another
    port_ = FreePort();
    started = Restart();
    if (started.ok()) break;
  }
  if (!started.ok()) return started;
  auto admin = pg::Connection::Open(Url("postgres"));
  if (!admin.ok()) return admin.status();
  absl::MutexLock lock(&mu_);
  admin_ = std::move(*admin);
  return absl::OkStatus();
}

PgTestServer::~PgTestServer() {
  {
    absl::MutexLock lock(&mu_);
    admin_.reset();
  }
  if (watcher_pipe_ >= 0) {
    ::close(watcher_pipe_);  // the helper stops the server and removes the directory
    int status = 0;
    ::waitpid(watcher_pid_, &status, 0);
  }
}

absl::Status PgTestServer::MakeDataDirectory() {
  // initdb once a build (most of a start's second), copied by every program
  // after it: the template in the build directory, made under a lock.
  const std::string initdb =
      absl::StrCat(bin_, "/initdb -D ", dir_, "/data -A trust -U postgres -E UTF8 ", "--locale=C --no-sync >/dev/null");
  const std::string tmpl = absl::StrCat(TRAINYARD_BINARY_DIR, "/tests/pg-template-", geteuid());
  const int lock = ::open((tmpl + ".lock").c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
  if (lock < 0 || ::flock(lock, LOCK_EX) != 0) {
    if (lock >= 0) ::close(lock);
    return Run(initdb);  // no template where it would go: initdb every time
  }
  absl::Status s;
  if (!std::filesystem::exists(tmpl + "/PG_VERSION")) {
    s = Run(initdb);
    // Copied by this process (root: ownership kept), so the template needs
    // no directory the postgres user can reach.
    if (s.ok() && std::system(absl::StrCat("rm -rf ", tmpl, " && cp -a ", dir_, "/data ", tmpl).c_str()) != 0) {
      std::filesystem::remove_all(tmpl);  // the next program tries again
    }
  } else if (std::system(absl::StrCat("cp -a ", tmpl, " ", dir_, "/data").c_str()) != 0) {
    s = Run(initdb);
  }
  ::close(lock);
  return s;
}

absl::Status PgTestServer::Run(const std::string& command) const {
  const std::string line = absl::StrCat(as_postgres_, command, " 2>&1");
  FILE* p = ::popen(line.c_str(), "r");
  if (p == nullptr) return absl::InternalError("popen " + line);
  std::string output;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) output.append(buf, n);
  const int status = ::pclose(p);
  if (status != 0) return absl::InternalError(absl::StrCat(line, " failed (", status, "): ", output));
  return absl::OkStatus();
}

absl::Status PgTestServer::Kill() { return Run(absl::StrCat(bin_, "/pg_ctl -D ", dir_, "/data stop -m immediate")); }

absl::Status PgTestServer::Restart() {
  return Run(absl::StrCat(bin_, "/pg_ctl -D ", dir_, "/data -l ", dir_,
                          "/log -w -t 30 -o \"-c listen_addresses=", "127.0.0.1 -p ", port_, " -k ", dir_, "\" start"));
}

std::string PgTestServer::Url(const std::string& database) const {
  return absl::StrCat("postgresql://postgres@127.0.0.1:", port_, "/", database);
}

absl::StatusOr<std::string> PgTestServer::NewDatabase() {
  absl::MutexLock lock(&mu_);
  if (admin_->broken()) {
    if (absl::Status s = admin_->Reset(); !s.ok()) return s;
  }
  const std::string name = absl::StrCat("test_", ++databases_);
  // A name we make (no value of a test's): CREATE DATABASE takes no parameters.
  if (auto r = admin_->Exec("CREATE DATABASE " + name); !r.ok()) return r.status();
  return Url(name);
}

std::string BackendName(StoreBackend backend) { return backend == StoreBackend::kSqlite ? "sqlite" : "postgresql"; }

absl::StatusOr<std::string> StoreUrl(StoreBackend backend, const std::string& dir) {
  if (backend == StoreBackend::kSqlite) return "sqlite:" + dir + "/trainyard.db";
  std::string error;
  PgTestServer* server = PgTestServer::Shared(&error);
  if (server == nullptr) return absl::FailedPreconditionError("cannot start PostgreSQL: " + error);
  return server->NewDatabase();
}

}  // namespace trainyard::test
