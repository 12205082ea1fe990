// The Checkpointer alone, two ranks as threads over real Gloo, each with a
// model, an optimizer and a data loader of its own (no Trainer): the ranks
// agree on numbering and staging, a save is restored bit for bit by the
// checkpointer of a later run and numbering goes on after it, background
// saves are committed by Drain and reported once by rank 0, the final save
// reuses a FULL save of the same step, a newer in-memory snapshot wins
// over the disk checkpoint, and step boundaries trigger the saves agreed on
// and due.
#include "worker/train/checkpointer.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <mutex>

#include "common/checkpoint_dir.h"
#include "tests/test_util.h"
#include "tests/worker/dist_test_util.h"
#include "worker/data/job_data.h"
#include "worker/models/models.h"
#include "worker/models/optimizer.h"

namespace trainyard {
namespace {

namespace fs = std::filesystem;

JobSpec SmallSpec(const std::string& project_dir) {
  JobSpec s;
  s.model.hidden = {16};
  s.data.num_samples = 64;
  s.data.batch_size = 8;
  s.num_processes = 2;
  s.optimizer.kind = OptimizerKind::kAdamW;
  s.checkpoint.project_dir = project_dir;
  return s;
}

// One rank's training state, without a Trainer.
struct Rank {
  Rank(const JobSpec& spec, int r, c10::intrusive_ptr<c10d::ProcessGroup> pg) : pg(std::move(pg)) {
    model = BuildModel(spec.model, spec.seed);
    optimizer = MakeOptimizer(spec.optimizer, model->parameters());
    data = MakeJobData(spec, model->sample_shape(), r, 2);
  }
  TrainingState State(const JobSpec* spec, int r) {
    TrainingState st;
    st.spec = spec;
    st.rank = r;
    st.world_size = 2;
    st.process_group = pg;
    st.model = model.get();
    st.optimizer = optimizer.get();
    st.loader = data.train.get();
    st.step = step;
    return st;
  }
  // A step's worth of change: every parameter moves.
  void Perturb() {
    torch::NoGradGuard no_grad;
    for (at::Tensor& p : model->parameters()) p.add_(0.125);
    ++step;
  }
  c10::intrusive_ptr<c10d::ProcessGroup> pg;
  std::shared_ptr<Model> model;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  JobData data;
  int64_t step = 0;
};

struct Events : MetricsSink {
  std::mutex mu;
  std::vector<CheckpointEvent> saved;
  void OnStep(const StepMetrics&) override {}
  void OnCheckpoint(const CheckpointEvent& e) override {
    std::lock_guard<std::mutex> lock(mu);
    saved.push_back(e);
  }
};

// Runs fn(rank, state, checkpointer) on two ranks.
void WithCheckpointers(const JobSpec& spec, Events* rank0_events, const std::string& snapshot_dir,
                       const std::function<void(int, Rank&, Checkpointer&)>& fn) {
  RunRanks(2, [&](int r, c10::intrusive_ptr<c10d::ProcessGroup> pg) {
    Rank rank(spec, r, pg);
    Checkpointer c(spec, r, pg, snapshot_dir, r == 0 ? rank0_events : nullptr,
                   [&rank, &spec, r] { return rank.State(&spec, r); });
    fn(r, rank, c);
  });
}

TEST(Checkpointer, ASaveIsRestoredExactlyAndNumberingGoesOn) {
  TempDir dir;
  JobSpec spec = SmallSpec(dir.path());
  Events events;
  std::vector<at::Tensor> saved(2);
  WithCheckpointers(spec, &events, "", [&](int r, Rank& rank, Checkpointer& c) {
    EXPECT_EQ(c.AgreeAndRestore(), 0);
    EXPECT_TRUE(c.resumed_from().empty());
    rank.Perturb();
    rank.Perturb();
    const CheckpointEvent ev = c.Save(CheckpointType::kFull, "request", 7);
    ASSERT_TRUE(ev.ok) << ev.error;
    EXPECT_EQ(ev.step, 2);
    saved[r] = rank.model->parameters()[0].clone();
  });
  ASSERT_EQ(events.saved.size(), 1u) << "rank 0 reports, once";
  EXPECT_EQ(events.saved[0].request_id, 7);
  EXPECT_EQ(fs::path(events.saved[0].path).filename(), "checkpoint_0");

  // A later run: it resumes at step 2 with the saved weights, not its own.
  spec.checkpoint.resume_from = "latest";
  Events later;
  WithCheckpointers(spec, &later, "", [&](int r, Rank& rank, Checkpointer& c) {
    EXPECT_FALSE(torch::equal(rank.model->parameters()[0], saved[r])) << "fresh weights differ";
    const int64_t step = c.AgreeAndRestore();
    EXPECT_EQ(step, 2);
    EXPECT_EQ(fs::path(c.resumed_from()).filename(), "checkpoint_0");
    EXPECT_TRUE(torch::equal(rank.model->parameters()[0], saved[r])) << "rank " << r;
    rank.step = step;
    rank.Perturb();
    EXPECT_TRUE(c.Save(CheckpointType::kAuto, "periodic").ok);
  });
  ASSERT_EQ(later.saved.size(), 1u);
  EXPECT_EQ(fs::path(later.saved[0].path).filename(), "checkpoint_1");
  EXPECT_EQ(later.saved[0].step, 3);
}

TEST(Checkpointer, BackgroundSavesAreCommittedByDrainAndTheFinalOneReusesThem) {
  TempDir dir;
  JobSpec spec = SmallSpec(dir.path());
  spec.checkpoint.async = true;
  Events events;
  std::vector<std::string> final_paths(2);
  WithCheckpointers(spec, &events, "", [&](int r, Rank& rank, Checkpointer& c) {
    c.AgreeAndRestore();
    rank.Perturb();
    c.Start(CheckpointType::kFull, "periodic", 0);
    c.Drain();
    // The final save at the same step is the one just made.
    final_paths[r] = c.SaveFinal(rank.step);
    rank.Perturb();
    EXPECT_NE(c.SaveFinal(rank.step), final_paths[r]) << "a later step needs a save of its own";
  });
  ASSERT_EQ(events.saved.size(), 2u);
  EXPECT_TRUE(events.saved[0].ok) << events.saved[0].error;
  EXPECT_EQ(events.saved[0].trigger, "periodic");
  EXPECT_GT(events.saved[0].host_bytes, 0) << "written in the background";
  EXPECT_EQ(events.saved[1].trigger, "final");
  EXPECT_EQ(final_paths[0], events.saved[0].path);
  EXPECT_EQ(final_paths[0], final_paths[1]);
  EXPECT_EQ(CheckpointDir(dir.path()).List(/*verify=*/true).complete.size(), 2u);
}

TEST(Checkpointer, ANewerSnapshotWinsOverTheDiskCheckpoint) {
  TempDir dir, shm;
  JobSpec spec = SmallSpec(dir.path());
  spec.checkpoint.snapshot_every_steps = 2;
  std::vector<at::Tensor> at_snapshot(2);
  const std::string snapshots = shm.path() + "/job";
  WithCheckpointers(spec, nullptr, snapshots, [&](int r, Rank& rank, Checkpointer& c) {
    c.AgreeAndRestore();
    rank.Perturb();
    EXPECT_FALSE(c.SnapshotDue(rank.step));
    EXPECT_TRUE(c.Save(CheckpointType::kFull, "periodic").ok);  // on disk at step 1
    rank.Perturb();
    ASSERT_TRUE(c.SnapshotDue(rank.step));
    c.Snapshot();  // in memory at step 2
    at_snapshot[r] = rank.model->parameters()[0].clone();
  });
  spec.checkpoint.resume_from = "latest";
  WithCheckpointers(spec, nullptr, snapshots, [&](int r, Rank& rank, Checkpointer& c) {
    EXPECT_EQ(c.AgreeAndRestore(), 2);
    EXPECT_TRUE(torch::equal(rank.model->parameters()[0], at_snapshot[r]));
    bool said = false;
    for (const std::string& note : c.resume_notes())
      said |= note.find("in-memory snapshot at step 2") != std::string::npos;
    EXPECT_TRUE(said) << "the notes say where it resumed from";
    rank.pg->barrier()->wait();  // every rank has read its part (the Trainer's end is collective too)
    c.RemoveSnapshots();
  });
  EXPECT_TRUE(!fs::exists(snapshots) || fs::is_empty(snapshots)) << "rank 0 removed them";
}

// When to checkpoint: each step boundary takes what the ranks agreed on
// (preemption before a request, a cancel's checkpoint synchronously) and
// what is due (every_steps), and says whether the run stops there.
TEST(Checkpointer, TheStepBoundaryTakesWhatIsAgreedAndWhatIsDue) {
  TempDir dir;
  JobSpec spec = SmallSpec(dir.path());
  spec.checkpoint.every_steps = 2;
  Events events;
  WithCheckpointers(spec, &events, "", [&](int /*r*/, Rank& rank, Checkpointer& c) {
    c.AgreeAndRestore();
    rank.Perturb();
    EXPECT_FALSE(c.AtStepBoundary(StepAgreement{}, 1).stop) << "nothing due at step 1";
    rank.Perturb();
    EXPECT_FALSE(c.AtStepBoundary(StepAgreement{}, 2).stop) << "periodic";
    rank.Perturb();
    StepAgreement request;
    request.checkpoint = CheckpointType::kFull;
    request.request_id = 5;
    EXPECT_FALSE(c.AtStepBoundary(request, 3).stop);
    rank.Perturb();
    StepAgreement stop;
    stop.stop = true;
    Checkpointer::Boundary b = c.AtStepBoundary(stop, 4);
    EXPECT_TRUE(b.stop);
    EXPECT_FALSE(b.preempted);
    rank.Perturb();
    StepAgreement cancel = request;
    cancel.request_id = 6;
    cancel.stop_after = true;
    EXPECT_TRUE(c.AtStepBoundary(cancel, 5).stop);
    rank.Perturb();
    StepAgreement preempt = request;
    preempt.preempt = true;
    b = c.AtStepBoundary(preempt, 6);
    EXPECT_TRUE(b.stop);
    EXPECT_TRUE(b.preempted);
    EXPECT_EQ(fs::path(b.preemption_checkpoint).filename(), "checkpoint_4");
    c.Drain();
  });
  std::vector<std::string> triggers;
  for (const CheckpointEvent& e : events.saved) {
    EXPECT_TRUE(e.ok) << e.error;
    triggers.push_back(e.trigger + "@" + std::to_string(e.step) + "#" + std::to_string(e.request_id));
  }
  EXPECT_EQ(triggers,
            (std::vector<std::string>{"periodic@2#0", "request@3#5", "periodic@4#0", "cancel@5#6", "preemption@6#0"}));
}

}  // namespace
}  // namespace trainyard
