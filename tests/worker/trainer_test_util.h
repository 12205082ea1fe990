// Ranks as threads, each with a Trainer built as the worker builds it (Gloo
// process group, FSDP groups) — for tests of the training loop; a small MLP
// job and a sink of each step's metrics, shared by the trainer, models and
// data tests.
#ifndef TRAINYARD_TESTS_WORKER_TRAINER_TEST_UTIL_H_
#define TRAINYARD_TESTS_WORKER_TRAINER_TEST_UTIL_H_

#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/worker/dist_test_util.h"
#include "worker/base/device.h"
#include "worker/collectives/collectives.h"
#include "worker/collectives/dist_setup.h"
#include "worker/collectives/process_group.h"
#include "worker/collectives/shm_collectives.h"
#include "worker/train/trainer.h"

namespace trainyard {

// Runs fn(rank, trainer) on `world` threads, each with a Trainer built as
// the worker builds it (the spec's backend, FSDP groups). `devices`, when
// given, names each rank's device (threads share one environment, so
// LOCAL_RANK cannot tell them apart).
inline void RunTrainers(const JobSpec& spec, int world, const std::function<void(int, Trainer&)>& fn,
                        MetricsSink* rank0_sink = nullptr, TrainerControl* rank0_control = nullptr,
                        const std::vector<c10::Device>& devices = {}, const std::string& snapshot_dir = "") {
  at::set_num_threads(1);
  auto store = c10::make_intrusive<c10d::HashStore>();
  RunThreads(world, [&](int r) {
    if (!devices.empty()) UseDevice(devices[r]);  // current for this thread before NCCL starts
    // As the worker: DDP over shared memory unless the spec says not.
    DistSetup dist;
    if (world > 1) dist = SetUpGroups(spec, store, r, world, "127.0.0.1", std::chrono::seconds(60));
    DistContext context = dist.context();
    if (!devices.empty()) context.device = devices[r];
    context.snapshot_dir = snapshot_dir;
    Trainer t(spec, r, world, context, r == 0 ? rank0_sink : nullptr, r == 0 ? rank0_control : nullptr);
    fn(r, t);
  });
}

// A small MLP job by SGD with momentum for 3 steps over the process group,
// no final checkpoint.
inline JobSpec Mlp(int64_t batch, int accum) {
  JobSpec s;
  s.model.hidden = {32, 16};
  s.data.num_samples = 512;
  s.data.batch_size = batch;
  s.gradient_accumulation_steps = accum;
  s.optimizer.kind = OptimizerKind::kSgd;
  s.optimizer.lr = 0.1;
  s.optimizer.momentum = 0.9;
  s.max_steps = 3;
  s.ddp.intra_host_transport = IntraHostTransport::kProcessGroup;
  s.checkpoint.save_final = false;
  return s;
}

// Mean of the first and of the last three losses.
inline std::pair<double, double> FirstLast(const std::vector<double>& loss) {
  const size_t n = loss.size();
  return {(loss[0] + loss[1] + loss[2]) / 3, (loss[n - 1] + loss[n - 2] + loss[n - 3]) / 3};
}

// Each step's learning rate and held-out loss by step, and the losses in order.
struct Lrs : MetricsSink {
  std::map<int64_t, double> lr, eval;
  std::vector<double> loss;
  void OnStep(const StepMetrics& m) override {
    lr[m.step] = m.learning_rate;
    eval[m.step] = m.eval_loss;
    loss.push_back(m.loss);
  }
};

}  // namespace trainyard

#endif  // TRAINYARD_TESTS_WORKER_TRAINER_TEST_UTIL_H_
