#include "common/checkpoint_dir.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/paths.h"

namespace trainyard {
namespace fs = std::filesystem;
namespace {

constexpr const char* kManifest = "manifest.json";
constexpr const char* kPrefix = "checkpoint_";
constexpr const char* kStaging = ".staging-checkpoint_";

absl::Status FsyncPath(const std::string& path, bool directory) {
  int fd = ::open(path.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) return absl::InternalError(absl::StrCat("open ", path, ": ", strerror(errno)));
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return absl::InternalError(absl::StrCat("fsync ", path, ": ", strerror(errno)));
  return absl::OkStatus();
}

// N from "checkpoint_<N>", or -1.
int64_t IndexOf(const std::string& name) {
  if (name.rfind(kPrefix, 0) != 0) return -1;
  const std::string digits = name.substr(std::strlen(kPrefix));
  if (digits.empty() || digits.size() > 18 || !std::all_of(digits.begin(), digits.end(), ::isdigit)) return -1;
  return std::stoll(digits);
}

std::string Hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

absl::StatusOr<std::string> FileChecksum(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    XXH3_64bits_update(state, buf.data(), static_cast<size_t>(in.gcount()));
  }
  const uint64_t h = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  return Hex64(h);
}

CheckpointDir::CheckpointDir(std::string project_dir) : root_((fs::path(project_dir) / "checkpoints").string()) {}

int64_t CheckpointDir::NextIndex() const {
  int64_t next = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root_, ec)) {
    std::string name = e.path().filename().string();
    if (name.rfind(kStaging, 0) == 0) name = kPrefix + name.substr(std::strlen(kStaging));
    const int64_t i = IndexOf(name.substr(0, name.find('.') == std::string::npos ? name.size() : name.find('.')));
    if (i >= 0) next = std::max(next, i + 1);
  }
  return next;
}

absl::StatusOr<std::string> CheckpointDir::Begin(int64_t index) const {
  return Begin(index, std::to_string(::getpid()));
}

std::string CheckpointDir::StagingPath(int64_t index, const std::string& tag) const {
  return (fs::path(root_) / absl::StrCat(kStaging, index, ".", tag)).string();
}

absl::StatusOr<std::string> CheckpointDir::Begin(int64_t index, const std::string& tag) const {
  std::error_code ec;
  fs::create_directories(root_, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", root_, ": ", ec.message()));
  const std::string staging = StagingPath(index, tag);
  fs::remove_all(staging, ec);
  if (!fs::create_directory(staging, ec) || ec) {
    return absl::InternalError(absl::StrCat("cannot create ", staging, ": ", ec.message()));
  }
  return staging;
}

namespace {

// Fsyncs every file under `dir` and writes its manifest last (fsynced, with
// the directory): from then on `dir` is a complete checkpoint N.
absl::Status WriteManifest(const std::string& dir, int64_t index, const std::string& metadata_json, bool checksums) {
  nlohmann::ordered_json files = nlohmann::ordered_json::object();
  std::vector<fs::path> paths;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file() && e.path().filename() != kManifest) paths.push_back(e.path());
  }
  std::sort(paths.begin(), paths.end());
  for (const fs::path& p : paths) {
    if (auto s = FsyncPath(p.string(), false); !s.ok()) return s;
    nlohmann::ordered_json entry = {{"size", fs::file_size(p)}};
    if (checksums) {
      auto sum = FileChecksum(p.string());
      if (!sum.ok()) return sum.status();
      entry["xxh3"] = *sum;
    }
    files[fs::relative(p, dir).string()] = entry;
  }
  nlohmann::ordered_json manifest = {
      {"format", "trainyard-checkpoint-v1"}, {"index", index}, {"checksums", checksums}, {"files", files}};
  auto meta = nlohmann::json::parse(metadata_json.empty() ? "{}" : metadata_json, nullptr, false);
  if (meta.is_discarded()) return absl::InvalidArgumentError("checkpoint metadata is not JSON");
  manifest["metadata"] = meta;
  const std::string manifest_path = (fs::path(dir) / kManifest).string();
  {
    std::ofstream out(manifest_path, std::ios::trunc);
    out << manifest.dump(2) << "\n";
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", manifest_path));
  }
  if (auto s = FsyncPath(manifest_path, false); !s.ok()) return s;
  return FsyncPath(dir, true);
}

}  // namespace

absl::Status CheckpointDir::Commit(const std::string& staging, int64_t index, const std::string& metadata_json,
                                   bool checksums) const {
  if (auto s = WriteManifest(staging, index, metadata_json, checksums); !s.ok()) return s;
  const std::string final_path = (fs::path(root_) / absl::StrCat(kPrefix, index)).string();
  std::error_code ec;
  if (fs::exists(final_path, ec)) return absl::AlreadyExistsError(absl::StrCat(final_path, " already exists"));
  fs::rename(staging, final_path, ec);
  if (ec) return absl::InternalError(absl::StrCat("rename to ", final_path, ": ", ec.message()));
  return FsyncPath(root_, true);
}

absl::StatusOr<int64_t> CheckpointDir::Seal(const std::string& dir, const std::string& metadata_json,
                                            bool checksums) const {
  const fs::path p = fs::path(dir).lexically_normal();
  const std::string name = p.filename().string();
  int64_t index = -1;
  if (p.parent_path() != fs::path(root_).lexically_normal() || name.rfind(kPrefix, 0) != 0 ||
      !absl::SimpleAtoi(name.substr(std::string(kPrefix).size()), &index) || index < 0) {
    return absl::InvalidArgumentError(absl::StrCat(dir, " is not a checkpoint_<N> directory of ", root_));
  }
  std::error_code ec;
  if (!fs::is_directory(p, ec)) return absl::NotFoundError(absl::StrCat(dir, " does not exist"));
  if (fs::exists(p / kManifest, ec)) return absl::AlreadyExistsError(absl::StrCat(dir, " is sealed already"));
  if (auto s = WriteManifest(p.string(), index, metadata_json, checksums); !s.ok()) return s;
  return index;
}

namespace {

// A manifest lists a checkpoint's files with their sizes and checksums.
constexpr size_t kMaxManifestBytes = 64 << 20;

// Why `dir` (checkpoint_<index>) is not a complete checkpoint, or "" when it
// is; fills `manifest`.
std::string Problem(const fs::path& dir, int64_t index, bool verify, nlohmann::json* manifest) {
  // Bounded and non-blocking: the server reads manifests a request names.
  absl::StatusOr<std::string> text = ReadBoundedFile((dir / kManifest).string(), kMaxManifestBytes);
  if (absl::IsNotFound(text.status())) return "no manifest (incomplete write)";
  if (!text.ok()) return std::string(text.status().message());
  *manifest = nlohmann::json::parse(*text, nullptr, false);
  if (manifest->is_discarded() || !manifest->is_object() || !manifest->contains("files") ||
      !(*manifest)["files"].is_object() || manifest->value("index", int64_t{-1}) != index) {
    return "manifest is not valid";
  }
  for (auto& [file, info] : (*manifest)["files"].items()) {
    const fs::path p = dir / file;
    // A file of the checkpoint, beneath its directory: a manifest naming
    // ../../etc/shadow (or a link there) learns nothing of that file.
    absl::StatusOr<uint64_t> found = RegularFileSizeBeneath(p.string(), dir.string());
    if (absl::IsNotFound(found.status())) return absl::StrCat("missing file ", file);
    if (!found.ok()) return absl::StrCat("file ", file, " is not a file of the checkpoint");
    const uint64_t size = *found;
    const uint64_t want = info.is_object() ? info.value("size", uint64_t{0}) : 0;
    if (size != want) return absl::StrCat(file, " has ", size, " bytes, the manifest says ", want);
    if (verify && manifest->value("checksums", true)) {
      auto sum = FileChecksum(p.string());
      if (!sum.ok() || *sum != info.value("xxh3", std::string())) return absl::StrCat(file, " fails its checksum");
    }
  }
  return "";
}

}  // namespace

CheckpointScan CheckpointDir::List(bool verify) const {
  CheckpointScan scan;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root_, ec)) {
    const std::string name = e.path().filename().string();
    const int64_t index = IndexOf(name);
    if (index < 0 || !e.is_directory()) continue;
    nlohmann::json manifest;
    const std::string problem = Problem(e.path(), index, verify, &manifest);
    if (!problem.empty()) {
      scan.skipped.push_back({e.path().string(), problem});
      continue;
    }
    scan.complete.push_back({index, fs::absolute(e.path()).string(), manifest["metadata"].dump()});
  }
  std::sort(scan.complete.begin(), scan.complete.end(), [](const auto& a, const auto& b) { return a.index > b.index; });
  return scan;
}

absl::StatusOr<CheckpointInfo> CheckCheckpoint(const std::string& path, bool verify) {
  const fs::path dir = fs::path(path).lexically_normal();
  std::string name = dir.filename().string();
  if (name.empty()) name = dir.parent_path().filename().string();
  const int64_t index = IndexOf(name);
  if (index < 0) return absl::InvalidArgumentError(absl::StrCat(path, " is not a checkpoint_<N> directory"));
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return absl::NotFoundError(absl::StrCat(path, " does not exist"));
  nlohmann::json manifest;
  const std::string problem = Problem(dir, index, verify, &manifest);
  if (!problem.empty())
    return absl::FailedPreconditionError(absl::StrCat(path, " is not a complete checkpoint: ", problem));
  return CheckpointInfo{index, fs::absolute(dir).string(), manifest["metadata"].dump()};
}

absl::StatusOr<std::vector<std::string>> CheckpointDir::ApplyTotalLimit(int limit) const {
  if (limit < 1) return absl::InvalidArgumentError("total_limit must be at least 1");
  CheckpointScan scan = List(/*verify=*/false);
  std::vector<std::string> deleted;
  std::error_code ec;
  for (size_t i = static_cast<size_t>(limit); i < scan.complete.size(); ++i) {
    fs::remove_all(scan.complete[i].path, ec);
    if (ec) return absl::InternalError(absl::StrCat("cannot delete ", scan.complete[i].path, ": ", ec.message()));
    deleted.push_back(scan.complete[i].path);
  }
  for (const auto& e : fs::directory_iterator(root_, ec)) {
    if (e.path().filename().string().rfind(kStaging, 0) == 0) {
      fs::remove_all(e.path(), ec);
      deleted.push_back(e.path().string());
    }
  }
  return deleted;
}

}  // namespace trainyard
