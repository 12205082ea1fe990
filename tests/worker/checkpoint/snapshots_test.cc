// In-memory snapshots (checkpoint.snapshot_every_steps) through the Trainer,
// ranks as threads over real Gloo: a group that dies after a snapshot
// resumes from it and ends bitwise where an uninterrupted run ends; a
// snapshot older than the disk checkpoint, or a torn one, is not used; the
// snapshots are gone when the job ends.
#include "worker/checkpoint/snapshots.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>

#include "common/checkpoint_dir.h"
#include "tests/test_util.h"
#include "tests/worker/trainer_test_util.h"
#include "worker/checkpoint/checkpoint.h"
#include "worker/train/trainer.h"

namespace trainyard {
namespace {
namespace fs = std::filesystem;

JobSpec BaseSpec(const std::string& project_dir, DistributedType type) {
  JobSpec s;
  s.model.hidden = {64, 48, 32};
  s.data.num_samples = 48;  // 3 batches per rank and epoch: resumes cross epochs
  s.data.batch_size = 8;
  s.optimizer.kind = OptimizerKind::kAdamW;
  s.max_steps = 12;
  s.num_processes = 2;
  s.ddp.intra_host_transport = IntraHostTransport::kProcessGroup;
  s.distributed_type = type;
  s.fsdp.sharding_strategy = ShardingStrategy::kFullShard;
  s.fsdp.auto_wrap_policy = WrapPolicy::kSizeBased;
  s.fsdp.min_num_params = 2000;
  s.checkpoint.project_dir = project_dir;
  s.checkpoint.every_steps = 4;
  s.checkpoint.snapshot_every_steps = 3;
  s.checkpoint.save_final = true;
  return s;
}

// Runs `steps` steps on 2 ranks, lets the background checkpoint in flight
// end, and drops the trainers without ending the run, as a crash would (no final
// save, no cleanup).
void CrashAfter(const JobSpec& spec, const std::string& snapshot_dir, int steps) {
  RunTrainers(
      spec, 2,
      [&](int, Trainer& t) {
        for (int i = 0; i < steps; ++i) t.Step();
        t.WaitForCheckpoints();
      },
      nullptr, nullptr, {}, snapshot_dir);
}

struct Resumed {
  int64_t step = -1;
  std::string from;
  std::vector<std::string> notes;
  std::string final_checkpoint;
};

Resumed RunToEnd(const JobSpec& spec, const std::string& snapshot_dir) {
  Resumed out;
  RunTrainers(
      spec, 2,
      [&](int r, Trainer& t) {
        if (r == 0) {
          out.step = t.step();
          out.from = t.resumed_from();
          out.notes = t.resume_notes();
        }
        TrainResult result = t.Run();
        if (r == 0) out.final_checkpoint = result.final_checkpoint;
      },
      nullptr, nullptr, {}, snapshot_dir);
  return out;
}

void ExpectSameFinalState(const std::string& a, const std::string& b) {
  CheckpointReader ra(a), rb(b);
  ASSERT_EQ(ra.ModelTensors(), rb.ModelTensors());
  ASSERT_EQ(ra.OptimizerTensors(), rb.OptimizerTensors());
  for (const std::string& n : ra.ModelTensors()) EXPECT_TRUE(torch::equal(ra.ModelTensor(n), rb.ModelTensor(n))) << n;
  for (const std::string& n : ra.OptimizerTensors()) {
    EXPECT_TRUE(torch::equal(ra.OptimizerTensor(n), rb.OptimizerTensor(n))) << n;
  }
}

std::string Joined(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += s + "\n";
  return out;
}

void PrintTo(DistributedType t, std::ostream* os) { *os << (t == DistributedType::kDdp ? "DDP" : "FSDP"); }

class SnapshotResume : public ::testing::TestWithParam<DistributedType> {};

TEST_P(SnapshotResume, FromTheNewestSnapshotEqualsAnUninterruptedRun) {
  TempDir reference_dir, dir, shm;
  const std::string snapshots = shm.path() + "/trainyard-job-x";
  JobSpec reference = BaseSpec(reference_dir.path(), GetParam());
  const Resumed whole = RunToEnd(reference, shm.path() + "/reference");

  JobSpec spec = BaseSpec(dir.path(), GetParam());
  CrashAfter(spec, snapshots, 10);  // disk checkpoints at 4 and 8, snapshots at 3, 6, 9
  CheckpointScan kept = CheckpointDir(snapshots).List(/*verify=*/true);
  ASSERT_EQ(kept.complete.size(), 1u) << "only the newest snapshot is kept";
  spec.checkpoint.resume_from = "latest";
  const int64_t next_disk_index = CheckpointDir(dir.path()).NextIndex();
  const Resumed resumed = RunToEnd(spec, snapshots);
  EXPECT_EQ(resumed.step, 9) << Joined(resumed.notes);
  EXPECT_EQ(resumed.from, kept.complete[0].path);
  EXPECT_NE(Joined(resumed.notes).find("in-memory snapshot at step 9"), std::string::npos) << Joined(resumed.notes);
  ExpectSameFinalState(whole.final_checkpoint, resumed.final_checkpoint);
  EXPECT_FALSE(fs::exists(snapshots)) << "snapshots are removed when the job ends";
  // Disk numbering goes on from the disk checkpoints (the snapshots have their own).
  EXPECT_EQ(fs::path(resumed.final_checkpoint).filename(), "checkpoint_" + std::to_string(next_disk_index));
}

INSTANTIATE_TEST_SUITE_P(Parallelism, SnapshotResume, ::testing::Values(DistributedType::kDdp, DistributedType::kFsdp),
                         [](const auto& info) { return info.param == DistributedType::kDdp ? "Ddp" : "Fsdp"; });

TEST(SnapshotChoice, ASnapshotOlderThanTheDiskCheckpointIsNotUsed) {
  TempDir dir, shm;
  const std::string snapshots = shm.path() + "/trainyard-job-x";
  JobSpec spec = BaseSpec(dir.path(), DistributedType::kDdp);
  spec.checkpoint.async = false;
  CrashAfter(spec, snapshots, 8);  // snapshot at 6, checkpoint at 8
  spec.checkpoint.resume_from = "latest";
  const Resumed resumed = RunToEnd(spec, snapshots);
  EXPECT_EQ(resumed.step, 8);
  EXPECT_EQ(fs::path(resumed.from).filename(), "checkpoint_1");
  EXPECT_NE(Joined(resumed.notes).find("snapshot at step 6 is not newer than the checkpoint at step 8"),
            std::string::npos)
      << Joined(resumed.notes);
}

TEST(SnapshotChoice, ATornSnapshotIsNeverUsed) {
  TempDir dir, shm;
  const std::string snapshots = shm.path() + "/trainyard-job-x";
  JobSpec spec = BaseSpec(dir.path(), DistributedType::kDdp);
  spec.checkpoint.async = false;
  CrashAfter(spec, snapshots, 10);  // snapshot at 9, checkpoint at 8
  CheckpointScan kept = CheckpointDir(snapshots).List(/*verify=*/true);
  ASSERT_EQ(kept.complete.size(), 1u);
  // Half of one rank's file is gone, as if the host lost it mid-write.
  const fs::path shard = fs::path(kept.complete[0].path) / "model_shard-00001-of-00002.safetensors";
  ASSERT_TRUE(fs::exists(shard));
  fs::resize_file(shard, fs::file_size(shard) / 2);
  spec.checkpoint.resume_from = "latest";
  const Resumed resumed = RunToEnd(spec, snapshots);
  EXPECT_EQ(resumed.step, 8) << Joined(resumed.notes);
  EXPECT_EQ(fs::path(resumed.from).filename(), "checkpoint_1");
}

}  // namespace
}  // namespace trainyard
