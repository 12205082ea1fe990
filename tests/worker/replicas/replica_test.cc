// Replica fault tolerance on the worker side (fault_tolerance.mode replica):
// the global-cursor sample order, and replicas as threads over real Gloo
// groups, each with its own store, with the test playing the coordinator —
// a replica dies, the survivors go on in a membership of their own, a
// replacement joins and heals.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <set>
#include <thread>
#include <tuple>
#include <vector>

#include "tests/worker/trainer_test_util.h"
#include "worker/checkpoint/checkpoint.h"
#include "worker/collectives/process_group.h"
#include "worker/control/membership.h"
#include "worker/data/data_loader.h"
#include "worker/data/distributed_sampler.h"
#include "worker/data/global_cursor.h"
#include "worker/data/job_data.h"
#include "worker/models/model.h"
#include "worker/models/models.h"
#include "worker/models/optimizer.h"
#include "worker/replicas/replica_group.h"
#include "worker/replicas/replica_membership.h"
#include "worker/replicas/replica_session.h"
#include "worker/train/trainer.h"

namespace trainyard {
namespace {

using namespace std::chrono_literals;

// Sample i is [i] with target i.
class IndexDataset final : public Dataset {
 public:
  explicit IndexDataset(int64_t n) : n_(n) {}
  int64_t size() const override { return n_; }
  Batch Get(const std::vector<int64_t>& indices) const override {
    at::Tensor t = at::tensor(indices, at::kLong);
    return {t.to(at::kFloat).unsqueeze(1), t};
  }

 private:
  int64_t n_;
};

std::vector<int64_t> Targets(const Batch& b) {
  return std::vector<int64_t>(b.targets.data_ptr<int64_t>(), b.targets.data_ptr<int64_t>() + b.targets.numel());
}

TEST(GlobalCursor, IsDistributedSamplersOrderForAConstantWorld) {
  for (const int64_t n : {12, 60, 96}) {
    for (const int32_t world : {1, 2, 3, 4}) {
      if (n % world != 0) continue;  // DistributedSampler pads such epochs
      for (const int64_t batch : {1, 3, 4}) {
        for (const bool shuffle : {false, true}) {
          GlobalCursorSampler cursor(n, shuffle, 7);
          for (int32_t r = 0; r < world; ++r) {
            DistributedSampler sampler(n, r, world, shuffle, 7);
            std::vector<int64_t> want;
            for (int64_t epoch = 0; epoch < 3; ++epoch) {
              const std::vector<int64_t> e = sampler.Indices(epoch);
              want.insert(want.end(), e.begin(), e.end());
            }
            std::vector<int64_t> got;
            for (int64_t g = 0; static_cast<int64_t>(got.size()) < static_cast<int64_t>(want.size());
                 g += world * batch) {
              for (int64_t p : GlobalCursorSampler::Positions(g, r, world, batch)) got.push_back(cursor.IndexAt(p));
            }
            got.resize(want.size());
            EXPECT_EQ(got, want) << "n " << n << " world " << world << " batch " << batch << " rank " << r;
          }
        }
      }
    }
  }
}

TEST(GlobalCursor, LoaderBatchesAreTheShardLoadersWhenTheWorldDividesTheEpoch) {
  const int64_t n = 48;
  auto data = std::make_shared<IndexDataset>(n);
  for (const int32_t world : {2, 3}) {
    for (int32_t r = 0; r < world; ++r) {
      DataLoader shard(data, DistributedSampler(n, r, world, true, 3), 4);
      DataLoader cursor(data, DistributedSampler(n, r, world, true, 3), 4);
      cursor.UseGlobalCursor(1 << 20);
      cursor.SetMembers(r, world);
      for (int step = 0; step < 30; ++step) {  // several epochs
        ASSERT_EQ(Targets(cursor.Next()), Targets(shard.Next())) << "world " << world << " rank " << r;
        cursor.CommitReads();
      }
      EXPECT_EQ(cursor.cursor(), 30 * world * 4);
    }
  }
}

TEST(GlobalCursor, ReadsMoveTheCursorOnlyWhenCommitted) {
  auto data = std::make_shared<IndexDataset>(20);
  DataLoader l(data, DistributedSampler(20, 0, 1, false, 0), 2);
  l.UseGlobalCursor(20);
  l.SetMembers(1, 2);
  EXPECT_EQ(Targets(l.Next()), (std::vector<int64_t>{1, 3}));
  l.RollbackReads();  // a dropped step
  EXPECT_EQ(l.cursor(), 0);
  EXPECT_EQ(Targets(l.Next()), (std::vector<int64_t>{1, 3}));
  l.CommitReads();
  EXPECT_EQ(l.cursor(), 4);
  EXPECT_EQ(l.committed_positions(), (std::vector<int64_t>{1, 3}));
  l.SetMembers(0, 3);  // a new membership: 3 members from position 4
  EXPECT_EQ(Targets(l.Next()), (std::vector<int64_t>{4, 7}));
  l.CommitReads();
  l.SetCursor(16);  // the job's last step: what is left, no more
  EXPECT_EQ(Targets(l.Next()), (std::vector<int64_t>{16, 19}));
  l.CommitReads();
  EXPECT_EQ(l.cursor(), 20);
}

TEST(MembershipView, MailboxKeepsEpochsAndWaits) {
  MembershipMailbox box;
  EXPECT_FALSE(box.WaitNewer(0, std::chrono::steady_clock::now() + 10ms));
  std::thread offer([&] { box.Offer({2, {0, 1}, "127.0.0.1", 1, "rank 2 lost"}); });
  auto m = box.WaitNewer(1, std::chrono::steady_clock::now() + 30s);
  offer.join();
  ASSERT_TRUE(m);
  EXPECT_EQ(m->epoch, 2);
  EXPECT_EQ(m->IndexOf(1), 1);
  EXPECT_EQ(m->IndexOf(2), -1);
  EXPECT_EQ(m->StorePrefix(), "m2/");
  box.Offer({3, {0, 1, 2}, "127.0.0.1", 1, "rank 2 joined"});
  EXPECT_EQ(box.latest_epoch(), 3);
  EXPECT_EQ(box.WaitFor(2, std::chrono::steady_clock::now())->ranks.size(), 2u);
  box.Forget(2);
  EXPECT_FALSE(box.WaitFor(2, std::chrono::steady_clock::now()));
  box.Offer({2, {0}, "127.0.0.1", 1, "late"});  // an epoch already taken stays gone
  EXPECT_FALSE(box.WaitFor(2, std::chrono::steady_clock::now()));
  EXPECT_EQ(box.Latest()->epoch, 3);
}

// What the replicas report, as the coordinator and the checks see it.
struct Reports {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::pair<int32_t, ReplicaReport>> events;
  std::vector<ReplicaCommit> commits;

  void Add(int32_t r, const ReplicaReport& e) {
    std::lock_guard<std::mutex> lock(mu);
    events.emplace_back(r, e);
    cv.notify_all();
  }
  void Add(const ReplicaCommit& c) {
    std::lock_guard<std::mutex> lock(mu);
    commits.push_back(c);
    cv.notify_all();
  }
  // Waits until `pred` holds (under the lock); false after 60 s.
  template <typename Pred>
  bool Await(Pred pred) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, 60s, pred);
  }
  int Count(int32_t r, ReplicaReport::Kind kind) {
    int n = 0;
    for (const auto& [rank_of, e] : events) n += rank_of == r && e.kind == kind ? 1 : 0;
    return n;
  }
  int CommitsIn(int32_t r, int64_t epoch) {
    int n = 0;
    for (const ReplicaCommit& c : commits) n += c.rank == r && c.epoch == epoch ? 1 : 0;
    return n;
  }
};

// One trainer's reporter, forwarding to the shared record.
struct RankReporter : ReplicaReporter {
  RankReporter(Reports* all, int32_t rank) : all_(all), rank_(rank) {}
  bool WantsCommits() const override { return true; }
  void OnReplica(const ReplicaReport& e) override { all_->Add(rank_, e); }
  void OnCommit(const ReplicaCommit& c) override { all_->Add(c); }

 private:
  Reports* all_;
  int32_t rank_;
};

constexpr int kReplicas = 3;
// Every fault-free step trains the whole dataset (3 x 32 = 96 samples):
// smooth training, so the final losses can be compared.
constexpr int64_t kBatch = 32;

// The replica tests run once per transport of the gradients: Gloo, and
// shared memory (ranks as threads share a host).
class Replicas : public ::testing::TestWithParam<IntraHostTransport> {
 protected:
  bool shm() const { return GetParam() != IntraHostTransport::kProcessGroup; }
};

JobSpec ReplicaSpec(IntraHostTransport transport) {
  JobSpec s = Mlp(kBatch, 1);
  s.ddp.intra_host_transport = transport;
  s.num_processes = kReplicas;
  s.distributed_type = DistributedType::kDdp;
  s.fault_tolerance.mode = FaultToleranceMode::kReplica;
  s.optimizer.lr = 0.1;
  s.optimizer.weight_decay = 0.05;  // the loss levels off above zero, where losses compare
  s.data.num_samples = kReplicas * kBatch;
  s.max_steps = 300;  // long enough for the loss to level off
  return s;
}

ReplicaOptions Options(int32_t rank, ReplicaReporter* reporter) {
  ReplicaOptions o = ReplicaOptionsFromEnvironment(rank);  // TRAINYARD_REPLICA_HASH=1 logs every commit
  o.group_timeout = 30s;
  o.membership_timeout = 60s;
  o.reporter = reporter;
  return o;
}

// What a rank's control stream fills: its requests and its memberships.
struct Inbox {
  TrainerControl control;
  MembershipMailbox mailbox;
  MembershipMailbox& memberships() { return mailbox; }
};

// The replica mode's guard over `inbox`'s memberships.
std::unique_ptr<StepGuard> Session(const JobSpec& spec, const ReplicaOptions& options, Inbox* inbox) {
  return std::make_unique<ReplicaSession>(spec, options, &inbox->mailbox, DistContext{});
}

MembershipView Members(int64_t epoch, std::vector<int32_t> ranks, const ReplicaStore& first, const std::string& why) {
  return {epoch, std::move(ranks), "127.0.0.1", first.port(), why};
}

// Mean loss of the model over the whole dataset.
double FullLoss(const JobSpec& spec, Trainer& t) {
  JobSpec all = spec;
  all.data.batch_size = spec.data.num_samples;
  all.data.shuffle = false;
  JobData d = MakeJobData(all, {spec.model.input_size}, 0, 1);
  const Batch b = d.train->Next();
  torch::NoGradGuard no_grad;
  return torch::nn::functional::cross_entropy(t.model().forward(b.inputs), b.targets).item<double>();
}

struct RunOutcome {
  std::map<int32_t, double> loss;    // final full-dataset loss by launch rank
  std::map<int32_t, uint64_t> hash;  // final parameters by launch rank
};

// Every commit: per rank the committed step never goes back; the members of
// each (epoch, step) hold bitwise-equal parameters (FSDP: the ranks holding
// the same shard, launch rank modulo `unit`); every global position of
// [0, total) was trained exactly once.
void CheckCommits(const std::vector<ReplicaCommit>& commits, int64_t total, int32_t unit = 1) {
  std::map<int32_t, int64_t> last_step;
  std::map<std::tuple<int64_t, int64_t, int32_t>, std::set<uint64_t>> hashes;
  std::map<std::pair<int64_t, int64_t>, std::vector<int64_t>> positions;
  for (const ReplicaCommit& c : commits) {
    auto it = last_step.find(c.rank);
    if (it != last_step.end()) EXPECT_GT(c.step, it->second) << "rank " << c.rank << " went back";
    last_step[c.rank] = c.step;
    hashes[{c.epoch, c.step, c.rank % unit}].insert(c.hash);
    auto& p = positions[{c.epoch, c.step}];
    p.insert(p.end(), c.positions.begin(), c.positions.end());
  }
  for (const auto& [key, h] : hashes) {
    EXPECT_EQ(h.size(), 1u) << "epoch " << std::get<0>(key) << " step " << std::get<1>(key) << " shard "
                            << std::get<2>(key) << ": replicas differ";
  }
  std::vector<int64_t> trained;
  for (const auto& [key, p] : positions) trained.insert(trained.end(), p.begin(), p.end());
  std::sort(trained.begin(), trained.end());
  std::vector<int64_t> want(static_cast<size_t>(total));
  std::iota(want.begin(), want.end(), 0);
  EXPECT_EQ(trained, want) << "some sample position was trained twice or never";
}

RunOutcome FaultFree(const JobSpec& spec, Reports* reports) {
  std::vector<std::unique_ptr<ReplicaStore>> stores;
  std::vector<std::unique_ptr<Inbox>> controls;
  std::vector<std::unique_ptr<RankReporter>> reporters;
  for (int r = 0; r < kReplicas; ++r) {
    stores.push_back(std::make_unique<ReplicaStore>());
    controls.push_back(std::make_unique<Inbox>());
    reporters.push_back(std::make_unique<RankReporter>(reports, r));
    controls[r]->memberships().Offer(Members(1, {0, 1, 2}, *stores[0], "start"));
  }
  RunOutcome out;
  std::mutex mu;
  at::set_num_threads(1);
  RunThreads(kReplicas, [&](int r) {
    Trainer t(spec, Session(spec, Options(r, reporters[r].get()), controls[r].get()), nullptr, &controls[r]->control);
    const TrainResult res = t.Run();
    EXPECT_FALSE(res.stopped);
    const double loss = FullLoss(spec, t);
    std::lock_guard<std::mutex> lock(mu);
    out.loss[r] = loss;
    out.hash[r] = HashTensors(t.model().parameters());
  });
  return out;
}

TEST_P(Replicas, FaultFreeRunIsPlainDdp) {
  const JobSpec spec = ReplicaSpec(GetParam());
  Reports reports;
  const RunOutcome out = FaultFree(spec, &reports);
  CheckCommits(reports.commits, spec.max_steps * kReplicas * kBatch);
  EXPECT_EQ(out.hash.at(0), out.hash.at(1));
  EXPECT_EQ(out.hash.at(0), out.hash.at(2));
  for (const ReplicaCommit& c : reports.commits) EXPECT_EQ(c.members, kReplicas);
  EXPECT_EQ(static_cast<int64_t>(reports.commits.size()), spec.max_steps * kReplicas);
}

// Replica 2 dies after kDeath steps; the survivors go on as epoch 2; after
// they committed a few steps there, a replacement for rank 2 joins as
// epoch 3 and heals from them.
// Ranks as threads share a process: in shared memory the survivors see
// rank 2 gone only at the group timeout (10 s here; a rank's process that
// ends is seen within a millisecond, ShmCollectivesTest in ddp_test).
TEST_P(Replicas, SurvivorsGoOnAndAReplacementHeals) {
  constexpr int64_t kDeath = 7;
  const JobSpec spec = ReplicaSpec(GetParam());
  const auto options = [&](int32_t rank, ReplicaReporter* reporter) {
    ReplicaOptions o = Options(rank, reporter);
    if (shm()) o.group_timeout = 10s;
    return o;
  };
  const int64_t total = spec.max_steps * kReplicas * kBatch;
  Reports fault_free_reports;
  const RunOutcome fault_free = FaultFree(spec, &fault_free_reports);

  Reports reports;
  std::vector<std::unique_ptr<ReplicaStore>> stores;
  std::vector<std::unique_ptr<Inbox>> controls;
  std::vector<std::unique_ptr<RankReporter>> reporters;
  for (int r = 0; r <= kReplicas; ++r) {  // [3]: the replacement of rank 2
    stores.push_back(std::make_unique<ReplicaStore>());
    controls.push_back(std::make_unique<Inbox>());
    reporters.push_back(std::make_unique<RankReporter>(&reports, r == kReplicas ? 2 : r));
  }
  for (int r = 0; r < kReplicas; ++r) controls[r]->memberships().Offer(Members(1, {0, 1, 2}, *stores[0], "start"));
  RunOutcome out;
  std::map<int32_t, int64_t> steps;
  std::mutex mu;
  auto finish = [&](int32_t rank, Trainer& t) {
    const double loss = FullLoss(spec, t);
    std::lock_guard<std::mutex> lock(mu);
    out.loss[rank] = loss;
    out.hash[rank] = HashTensors(t.model().parameters());
  };
  at::set_num_threads(1);
  std::thread coordinator([&] {
    // The survivors find their group broken; the coordinator gives them a
    // membership of their own.
    ASSERT_TRUE(reports.Await([&] {
      return reports.Count(0, ReplicaReport::Kind::kGroupBroken) > 0 &&
             reports.Count(1, ReplicaReport::Kind::kGroupBroken) > 0;
    }));
    for (int r : {0, 1}) controls[r]->memberships().Offer(Members(2, {0, 1}, *stores[0], "rank 2 lost"));
    ASSERT_TRUE(reports.Await([&] { return reports.CommitsIn(0, 2) >= 3 && reports.CommitsIn(1, 2) >= 3; }));
    // The replacement has connected: everyone's next membership.
    for (int r : {0, 1, 3}) controls[r]->memberships().Offer(Members(3, {0, 1, 2}, *stores[0], "rank 2 joined"));
  });
  RunThreads(kReplicas + 1, [&](int r) {
    if (r == 2) {  // trains kDeath steps, then its process "dies": groups and store gone
      {
        Trainer t(spec, Session(spec, options(2, reporters[2].get()), controls[2].get()), nullptr,
                  &controls[2]->control);
        for (int64_t i = 0; i < kDeath; ++i) t.Step();
      }
      stores[2].reset();
      return;
    }
    if (r == 3) {  // the replacement, started once the survivors trained alone
      ASSERT_TRUE(reports.Await([&] { return reports.CommitsIn(0, 2) >= 3; }));
      Trainer t(spec, Session(spec, options(2, reporters[3].get()), controls[3].get()), nullptr, &controls[3]->control);
      EXPECT_FALSE(t.Run().stopped);
      finish(2, t);
      return;
    }
    Trainer t(spec, Session(spec, options(r, reporters[r].get()), controls[r].get()), nullptr, &controls[r]->control);
    EXPECT_FALSE(t.Run().stopped);
    EXPECT_GT(t.step(), spec.max_steps);  // steps with two members train fewer samples
    {
      std::lock_guard<std::mutex> lock(mu);
      steps[r] = t.step();
    }
    finish(r, t);
  });
  coordinator.join();

  CheckCommits(reports.commits, total);
  // Each survivor broke once, committed first in epochs 2 and 3; the
  // replacement healed in epoch 3.
  int healed = 0;
  for (const auto& [rank, e] : reports.events) {
    if (e.kind == ReplicaReport::Kind::kCommitted && rank == 2 && e.epoch == 3) {
      EXPECT_TRUE(e.healed);
      EXPECT_GT(e.heal_bytes, 0);
      ++healed;
    }
  }
  EXPECT_EQ(healed, 1);
  for (int r : {0, 1}) {
    EXPECT_EQ(reports.Count(r, ReplicaReport::Kind::kGroupBroken), 1);
    EXPECT_EQ(reports.Count(r, ReplicaReport::Kind::kCommitted), 3);  // epochs 1, 2, 3
  }
  // Every replica ends where the fault-free run ends, bitwise the same.
  for (const ReplicaCommit& c : reports.commits) {
    if (c.epoch == 3) EXPECT_EQ(c.members, 3);
  }
  std::map<int32_t, int64_t> final_cursor;
  for (const ReplicaCommit& c : reports.commits) final_cursor[c.rank] = c.cursor;
  for (int r = 0; r < kReplicas; ++r) EXPECT_EQ(final_cursor[r], total) << "rank " << r;
  EXPECT_EQ(out.hash.at(0), out.hash.at(1));
  EXPECT_EQ(out.hash.at(0), out.hash.at(2));
  const double want = fault_free.loss.at(0);
  for (int r = 0; r < kReplicas; ++r) {
    EXPECT_NEAR(out.loss.at(r), want, 0.01 * want) << "rank " << r << " vs the fault-free run";
  }
  std::printf(
      "final loss: fault-free %.5f, with a death and a heal %.5f; steps %lld (fault-free %lld), %d in epoch 2\n", want,
      out.loss.at(0), static_cast<long long>(steps.at(0)), static_cast<long long>(spec.max_steps),
      reports.CommitsIn(0, 2));
}

// A shrink: a membership that leaves rank 1 out, offered while both train.
// Both switch after the same step; rank 1 leaves (LEFT, Run ends stopped)
// with nothing lost, and rank 0 trains the rest alone.
TEST_P(Replicas, AMemberLeftOutLeavesAtAStepBoundary) {
  JobSpec spec = ReplicaSpec(GetParam());
  spec.num_processes = 2;
  spec.max_steps = 40;
  const int64_t total = spec.max_steps * 2 * kBatch;
  Reports reports;
  std::vector<std::unique_ptr<ReplicaStore>> stores;
  std::vector<std::unique_ptr<Inbox>> controls;
  std::vector<std::unique_ptr<RankReporter>> reporters;
  for (int r = 0; r < 2; ++r) {
    stores.push_back(std::make_unique<ReplicaStore>());
    controls.push_back(std::make_unique<Inbox>());
    reporters.push_back(std::make_unique<RankReporter>(&reports, r));
    controls[r]->memberships().Offer(Members(1, {0, 1}, *stores[0], "start"));
  }
  std::thread coordinator([&] {
    ASSERT_TRUE(reports.Await([&] { return reports.CommitsIn(1, 1) >= 5; }));
    for (int r : {0, 1}) controls[r]->memberships().Offer(Members(2, {0}, *stores[0], "rank 1 scaled away"));
  });
  std::map<int32_t, TrainResult> results;
  std::mutex mu;
  at::set_num_threads(1);
  RunThreads(2, [&](int r) {
    Trainer t(spec, Session(spec, Options(r, reporters[r].get()), controls[r].get()), nullptr, &controls[r]->control);
    const TrainResult res = t.Run();
    std::lock_guard<std::mutex> lock(mu);
    results[r] = res;
  });
  coordinator.join();
  EXPECT_FALSE(results.at(0).stopped);
  EXPECT_TRUE(results.at(1).stopped);
  EXPECT_EQ(reports.Count(1, ReplicaReport::Kind::kLeft), 1);
  EXPECT_EQ(reports.Count(0, ReplicaReport::Kind::kLeft), 0);
  EXPECT_EQ(reports.Count(0, ReplicaReport::Kind::kGroupBroken), 0);
  CheckCommits(reports.commits, total);
  // Rank 1 left right after a step both committed.
  int64_t last1 = 0;
  for (const ReplicaCommit& c : reports.commits) {
    if (c.rank == 1) last1 = c.step;
  }
  EXPECT_EQ(results.at(1).final_step, last1);
}

// FSDP HYBRID_SHARD: two shard groups of two ranks, each a replica. The
// second shard group dies after kDeath steps (both its ranks' groups and
// stores go, as when the coordinator takes a lost rank's shard-mate out
// with it); the first trains alone as epoch 2; then a new shard group joins
// as epoch 3 and heals shard by shard from the first (ranks 0 -> 2, 1 -> 3).
TEST(FsdpReplicas, AShardGroupDiesAndANewOneHealsFromTheOther) {
  constexpr int64_t kDeath = 5;
  constexpr int kRanks = 4;
  JobSpec spec = ReplicaSpec(IntraHostTransport::kProcessGroup);
  spec.num_processes = kRanks;
  spec.distributed_type = DistributedType::kFsdp;
  spec.fsdp.sharding_strategy = ShardingStrategy::kHybridShard;
  spec.fsdp.ranks_per_node = 2;
  spec.data.num_samples = kRanks * kBatch;
  spec.max_steps = 40;
  ASSERT_EQ(spec.ranks_per_replica(), 2);
  const int64_t total = spec.max_steps * kRanks * kBatch;

  Reports reports;
  std::vector<std::unique_ptr<ReplicaStore>> stores;
  std::vector<std::unique_ptr<Inbox>> controls;
  std::vector<std::unique_ptr<RankReporter>> reporters;
  for (int r = 0; r < kRanks + 2; ++r) {  // [4], [5]: the replacements of ranks 2 and 3
    stores.push_back(std::make_unique<ReplicaStore>());
    controls.push_back(std::make_unique<Inbox>());
    reporters.push_back(std::make_unique<RankReporter>(&reports, r < kRanks ? r : r - 2));
  }
  for (int r = 0; r < kRanks; ++r) controls[r]->memberships().Offer(Members(1, {0, 1, 2, 3}, *stores[0], "start"));
  std::thread coordinator([&] {
    ASSERT_TRUE(reports.Await([&] {
      return reports.Count(0, ReplicaReport::Kind::kGroupBroken) > 0 &&
             reports.Count(1, ReplicaReport::Kind::kGroupBroken) > 0;
    }));
    for (int r : {0, 1}) controls[r]->memberships().Offer(Members(2, {0, 1}, *stores[0], "rank 3 lost"));
    ASSERT_TRUE(reports.Await([&] { return reports.CommitsIn(0, 2) >= 3 && reports.CommitsIn(1, 2) >= 3; }));
    for (int r : {0, 1, 4, 5}) {
      controls[r]->memberships().Offer(Members(3, {0, 1, 2, 3}, *stores[0], "ranks 2,3 joined"));
    }
  });
  at::set_num_threads(1);
  RunThreads(kRanks + 2, [&](int r) {
    const int32_t launch_rank = r < kRanks ? r : r - 2;
    if (r == 2 || r == 3) {
      {
        Trainer t(spec, Session(spec, Options(r, reporters[r].get()), controls[r].get()), nullptr,
                  &controls[r]->control);
        for (int64_t i = 0; i < kDeath; ++i) t.Step();
      }
      stores[r].reset();
      return;
    }
    if (r >= kRanks) ASSERT_TRUE(reports.Await([&] { return reports.CommitsIn(0, 2) >= 3; }));
    Trainer t(spec, Session(spec, Options(launch_rank, reporters[r].get()), controls[r].get()), nullptr,
              &controls[r]->control);
    EXPECT_FALSE(t.Run().stopped) << "rank " << launch_rank;
  });
  coordinator.join();

  CheckCommits(reports.commits, total, 2);
  for (int r : {2, 3}) {
    int healed = 0;
    for (const auto& [rank, e] : reports.events) {
      if (e.kind == ReplicaReport::Kind::kCommitted && rank == r && e.epoch == 3) {
        EXPECT_TRUE(e.healed) << "rank " << r;
        EXPECT_GT(e.heal_bytes, 0) << "rank " << r;
        ++healed;
      }
    }
    EXPECT_EQ(healed, 1) << "rank " << r;
  }
  for (int r : {0, 1}) {
    EXPECT_EQ(reports.Count(r, ReplicaReport::Kind::kGroupBroken), 1);
    EXPECT_EQ(reports.Count(r, ReplicaReport::Kind::kCommitted), 3);  // epochs 1, 2, 3
  }
  // Every rank ends at the end of the data; the replicas of each shard hold
  // bitwise-equal shards.
  std::map<int32_t, const ReplicaCommit*> last;
  for (const ReplicaCommit& c : reports.commits) last[c.rank] = &c;
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(last.at(r)->cursor, total) << "rank " << r;
  EXPECT_EQ(last.at(0)->hash, last.at(2)->hash);
  EXPECT_EQ(last.at(1)->hash, last.at(3)->hash);
  EXPECT_NE(last.at(0)->hash, last.at(1)->hash) << "two different shards";
}

INSTANTIATE_TEST_SUITE_P(Transports, Replicas,
                         ::testing::Values(IntraHostTransport::kProcessGroup, IntraHostTransport::kSharedMemory),
                         [](const ::testing::TestParamInfo<IntraHostTransport>& info) {
                           return info.param == IntraHostTransport::kProcessGroup ? "gloo" : "shm";
                         });

// An epoch whose members share a host trains through shared memory when
// asked to (the agreement rides it: no control group), else through Gloo
// with a control group of its own; the world group is Gloo either way.
TEST(ReplicaGroupTest, SharedMemoryWhenAskedAndOnOneHost) {
  for (const bool shared : {true, false}) {
    ReplicaStore store;
    const MembershipView m{1, {0, 1}, "127.0.0.1", store.port(), "start"};
    std::vector<std::unique_ptr<ReplicaGroup>> groups(2);
    RunThreads(2, [&](int r) { groups[r] = std::make_unique<ReplicaGroup>(m, r, "127.0.0.1", 30s, shared); });
    for (int r = 0; r < 2; ++r) {
      const DistContext c = groups[r]->context();
      ASSERT_TRUE(c.process_group) << "rank " << r;
      EXPECT_EQ(c.process_group->getBackendName(), "gloo");
      EXPECT_EQ(c.shm != nullptr, shared) << "rank " << r;
      EXPECT_EQ(static_cast<bool>(c.control_group), !shared) << "rank " << r;
    }
    if (!shared) continue;
    // The epoch's shared memory sums like any allreduce.
    std::vector<at::Tensor> sums(2);
    RunThreads(2, [&](int r) {
      sums[r] = torch::full({5}, static_cast<float>(r + 1));
      groups[r]->shm()->AllreduceSum(sums[r]);
    });
    EXPECT_TRUE(torch::equal(sums[0], torch::full({5}, 3.0f)));
    EXPECT_TRUE(torch::equal(sums[1], sums[0]));
  }
}

// The heal over a real 2-rank Gloo group: the member one step ahead (the
// step in flight when the group broke) is the source and every member ends
// with its parameters; a member claiming more than one step past a member
// that trained with it is refused, and no state moves.
TEST(HealTest, TakesTheStepInFlightAndRefusesAClaimFurtherAhead) {
  JobSpec spec;
  spec.model.hidden = {8};
  spec.optimizer.kind = OptimizerKind::kAdamW;
  for (const int64_t ahead : {int64_t{1}, int64_t{4}}) {
    auto store = c10::make_intrusive<c10d::HashStore>();
    std::vector<std::shared_ptr<Model>> models(2);
    std::vector<std::string> errors(2);
    std::vector<HealResult> results(2);
    RunThreads(2, [&](int r) {
      auto pg = MakeProcessGroup(Backend::kGloo, store, r, 2, "127.0.0.1", 30s);
      models[r] = BuildModel(spec.model, spec.seed);
      if (r == 1) {
        torch::NoGradGuard no_grad;
        for (at::Tensor& p : models[r]->parameters()) p.add_(0.5);
      }
      auto optimizer = MakeOptimizer(spec.optimizer, models[r]->parameters());
      TrainingState st;
      st.spec = &spec;
      st.rank = r;
      st.world_size = 2;
      st.process_group = pg;
      st.model = models[r].get();
      st.optimizer = optimizer.get();
      try {
        results[r] = Heal(st, pg, r == 0 ? 5 : 5 + ahead, 40);
      } catch (const HealRefused& e) {
        errors[r] = e.what();
      }
    });
    const std::vector<at::Tensor> p0 = models[0]->parameters(), p1 = models[1]->parameters();
    if (ahead == 1) {
      EXPECT_EQ(errors, (std::vector<std::string>{"", ""}));
      for (int r = 0; r < 2; ++r) {
        EXPECT_EQ(results[r].step, 6) << "rank " << r;
        EXPECT_EQ(results[r].source, 1) << "rank " << r;
      }
      for (size_t i = 0; i < p0.size(); ++i) EXPECT_TRUE(torch::equal(p0[i], p1[i])) << "parameter " << i;
    } else {
      for (int r = 0; r < 2; ++r) {
        EXPECT_NE(errors[r].find("group rank 1 claims step 9 but group rank 0 is at step 5"), std::string::npos)
            << "rank " << r << ": " << errors[r];
      }
      EXPECT_FALSE(torch::equal(p0[0], p1[0])) << "state moved on a refused heal";
    }
  }
}

// What a member received is checked against the source's digest: a rank
// whose tensors differ from the source's after the broadcast (changed on
// the way) throws, naming the source; the source and a faithful copy pass.
TEST(HealTest, ADigestChecksWhatArrived) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::string> errors(3);
  RunThreads(3, [&](int r) {
    auto pg = MakeProcessGroup(Backend::kGloo, store, r, 3, "127.0.0.1", 30s);
    std::vector<at::Tensor> state = {torch::arange(1000, at::kFloat), torch::ones({3, 3}, at::kDouble)};
    if (r == 2) state[0][517] = -1.0f;  // one value changed on the way to rank 2
    try {
      CheckStateDigest(pg, state, 0);
    } catch (const StateDigestMismatch& e) {
      errors[r] = e.what();
    }
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
  EXPECT_NE(errors[2].find("received from group rank 0 does not match the digest it sent"), std::string::npos)
      << errors[2];
}

}  // namespace
}  // namespace trainyard
