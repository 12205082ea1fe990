#include "common/paths.h"

#include <cstdlib>
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

std::string SnapshotDir(const std::string& job_id) {
  const char* root = std::getenv("TRAINYARD_SNAPSHOT_ROOT");
  return std::string(root != nullptr && *root != '\0' ? root : "/dev/shm") + "/trainyard-job-" + job_id;
}

}  // namespace trainyard
