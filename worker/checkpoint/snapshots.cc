#include "worker/checkpoint/snapshots.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/checkpoint_dir.h"
#include "common/paths.h"
#include "worker/checkpoint/checkpoint_internal.h"
#include "worker/models/models.h"
#include "worker/parallel/fsdp.h"

namespace trainyard {
namespace fs = std::filesystem;
using namespace checkpoint_internal;  // NOLINT: part of the checkpoint code

Snapshots::Snapshots(std::string dir, int64_t every_steps) : dir_(std::move(dir)), every_steps_(every_steps) {}

Snapshots::~Snapshots() { WaitForPruning(); }

void Snapshots::WaitForPruning() {
  if (pruning_.joinable()) pruning_.join();
}

int64_t SnapshotBytesEstimate(const TrainingState& s) {
  const std::vector<at::Tensor> holders = s.fsdp != nullptr ? s.fsdp->ShardParameters() : s.model->parameters();
  int64_t elements = 0;
  for (const at::Tensor& h : holders) elements += h.numel();
  const int64_t per_element = 4 * static_cast<int64_t>(1 + OptimizerFields(*s.spec).size());
  // DDP: each rank writes an even share of the whole; FSDP: its own shard.
  const int64_t shares = s.fsdp != nullptr ? 1 : std::max(1, s.world_size);
  int64_t buffers = 0;
  for (const auto& [name, t] : Buffers(s)) buffers += static_cast<int64_t>(t.nbytes());
  return elements * per_element / shares + buffers + (1 << 20);  // headers, RNG, JSON
}

int64_t FreeBytes(const std::string& path) {
  fs::path p = path;
  std::error_code ec;
  while (!p.empty() && !fs::exists(p, ec)) p = p.parent_path();
  struct statvfs st {};
  if (p.empty() || ::statvfs(p.c_str(), &st) != 0) return -1;
  return static_cast<int64_t>(st.f_bavail) * static_cast<int64_t>(st.f_frsize);
}

CheckpointEvent Snapshots::Take(const TrainingState& s, int64_t index, const std::string& staging_tag) {
  // The previous removal touches staging directories too: it must be over.
  WaitForPruning();
  // Room for the new snapshot while the previous one is still there.
  const int64_t need = SnapshotBytesEstimate(s);
  const int64_t free = FreeBytes(dir_);
  std::string error;
  if (free >= 0 && free < need) {
    error = "not enough shared memory for a snapshot in " + dir_ + ": " + std::to_string(free) +
            " bytes free, this rank needs about " + std::to_string(need);
  }
  if (error.empty()) {
    // In a place every account writes: this job's own directory, or none.
    std::error_code ec;
    fs::create_directories(fs::path(dir_).parent_path(), ec);
    if (absl::Status own = MakeOwnDirectory(dir_); !own.ok()) {
      error = absl::StrCat("in-memory snapshot refused: ", own.message());
    }
  }
  if (int32_t failed = FirstFailure(s, error.empty()); failed >= 0) {
    CheckpointEvent ev;
    ev.step = s.step;
    ev.index = index;
    ev.type = CheckpointType::kSharded;
    ev.error = failed == s.rank ? error
                                : absl::StrCat("snapshot skipped: rank ", failed, " could not write its part (",
                                               "its own error says why)");
    return ev;
  }
  // total_limit 0: nothing removed at the boundary; the older snapshot goes
  // afterwards, while training runs (freeing its memory takes a while, and
  // the other ranks would wait for it).
  CheckpointTarget target{dir_, index, staging_tag, /*total_limit=*/0, /*checksums=*/false};
  CheckpointEvent ev = SaveCheckpoint(s, CheckpointType::kSharded, target);
  if (ev.ok && s.rank == 0) {
    pruning_ = std::thread([dir = dir_] { (void)CheckpointDir(dir).ApplyTotalLimit(1); });
  }
  return ev;
}

absl::Status Snapshots::Usable() const {
  std::error_code ec;
  if (!enabled() || !fs::exists(fs::symlink_status(dir_, ec)) || ec) return absl::OkStatus();
  // Only this account's: a directory someone else made first holds what
  // they put there.
  return IsOwnDirectory(dir_, ::geteuid());
}

std::string Snapshots::Newest(std::vector<std::string>* notes) const {
  std::error_code ec;
  if (!enabled() || !fs::exists(fs::symlink_status(dir_, ec)) || ec || !Usable().ok()) return "";
  return ResolveCheckpoint(dir_, "latest", notes);
}

void Snapshots::RemoveAll() {
  WaitForPruning();
  if (dir_.empty()) return;
  (void)RemoveOwnTree(dir_, ::geteuid());  // someone else's is theirs to remove
}

}  // namespace trainyard
