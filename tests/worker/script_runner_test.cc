// ScriptRunner with real Python scripts (the system's python3 and the
// repository's `trainyard` package): the rank's environment, steps the
// script reports, a checkpoint it saves on request (sealed and reported),
// preemption (should_stop, exit 0 -> preempted), a stop (the script is ended),
// a Python error (the traceback's last line is the reason), a Python that
// does not exist (a usage error naming it), a script that reports nothing.
#include "worker/script_runner.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "common/checkpoint_dir.h"
#include "tests/test_util.h"

namespace trainyard {
namespace {

namespace fs = std::filesystem;

struct Recorder : MetricsSink {
  std::mutex mu;
  std::vector<StepMetrics> steps;
  std::vector<CheckpointEvent> checkpoints;
  void OnStep(const StepMetrics& m) override {
    std::lock_guard<std::mutex> lock(mu);
    steps.push_back(m);
  }
  void OnCheckpoint(const CheckpointEvent& c) override {
    std::lock_guard<std::mutex> lock(mu);
    checkpoints.push_back(c);
  }
};

class ScriptRunnerTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = dir_.path() + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
  JobSpec Spec(const std::string& script) {
    JobSpec spec;
    spec.script.path = script;
    spec.script.python = "/usr/bin/python3";
    spec.script.env["SCRIPT_SETTING"] = "42";
    spec.num_processes = 2;
    spec.checkpoint.project_dir = dir_.path() + "/project";
    return spec;
  }
  ScriptRank Where() {
    ScriptRank w;
    w.job_id = "job-test";
    w.rank = 0;
    w.world_size = 2;
    w.local_world_size = 2;
    w.master_port = 29555;
    w.attempt = 3;
    w.package_dir = std::string(TRAINYARD_SOURCE_DIR) + "/python";
    return w;
  }
  ScriptResult Run(const JobSpec& spec, TrainerControl* control = nullptr) {
    ScriptOptions o;
    o.stop_grace = std::chrono::milliseconds(2000);
    ScriptRunner runner(spec, Where(), ScriptEnvironment(spec, Where(), {{"ACCELERATE_MIXED_PRECISION", "no"}}), &rec_,
                        control, o);
    return runner.Run();
  }
  TempDir dir_;
  Recorder rec_;
};

TEST_F(ScriptRunnerTest, TheRankGetsTorchrunsAndAccelerateEnvironment) {
  const std::string out = dir_.path() + "/env.txt";
  const JobSpec spec = Spec(Write("env.py",
                                  "import os\n"
                                  "with open('" +
                                      out +
                                      "', 'w') as f:\n"
                                      "    for k in sorted(os.environ): f.write(k + '=' + os.environ[k] + '\\n')\n"));
  const ScriptResult r = Run(spec);
  ASSERT_EQ(r.outcome, WorkerOutcome::kSucceeded) << r.error;
  std::map<std::string, std::string> env;
  std::ifstream in(out);
  for (std::string line; std::getline(in, line);) env[line.substr(0, line.find('='))] = line.substr(line.find('=') + 1);
  for (const auto& [k, v] : std::map<std::string, std::string>{{"RANK", "0"},
                                                               {"LOCAL_RANK", "0"},
                                                               {"WORLD_SIZE", "2"},
                                                               {"LOCAL_WORLD_SIZE", "2"},
                                                               {"GROUP_RANK", "0"},
                                                               {"ROLE_RANK", "0"},
                                                               {"ROLE_NAME", "default"},
                                                               {"MASTER_ADDR", "127.0.0.1"},
                                                               {"MASTER_PORT", "29555"},
                                                               {"TORCHELASTIC_RESTART_COUNT", "2"},
                                                               {"TORCHELASTIC_RUN_ID", "job-test"},
                                                               {"ACCELERATE_MIXED_PRECISION", "no"},
                                                               {"SCRIPT_SETTING", "42"},
                                                               {"TRAINYARD_JOB_ID", "job-test"}}) {
    EXPECT_EQ(env[k], v) << k;
  }
  EXPECT_EQ(env.count("TRAINYARD_WORKER_TOKEN"), 0u) << "the worker's secret stays with the worker";
  EXPECT_EQ(env["PYTHONPATH"].rfind(std::string(TRAINYARD_SOURCE_DIR) + "/python", 0), 0u) << env["PYTHONPATH"];
  EXPECT_EQ(env["TRAINYARD_CHECKPOINT_DIR"], dir_.path() + "/project/checkpoints");
  EXPECT_FALSE(r.reported);
}

TEST_F(ScriptRunnerTest, ReportedStepsAndARequestedCheckpoint) {
  // Reports steps until a checkpoint is asked for, saves it, reports one
  // more step and ends.
  const JobSpec spec = Spec(Write("train.py", R"(import os, time, trainyard
step = 0
while step < 500:
    step += 1
    trainyard.report(step, samples=8, loss=1.0 / step, accuracy=0.5)
    kind = trainyard.checkpoint_requested()
    if kind:
        path = trainyard.checkpoint_dir(step)
        os.makedirs(path)
        with open(os.path.join(path, "model.bin"), "wb") as f:
            f.write(b"x" * 1000)
        trainyard.checkpoint_saved(path, step)
        trainyard.report(step + 1, samples=8, loss=0.5)
        break
    time.sleep(0.01)
)"));
  TrainerControl control;
  std::thread ask([&] {
    WaitFor(
        [&] {
          std::lock_guard<std::mutex> lock(rec_.mu);
          return rec_.steps.size() >= 3;
        },
        std::chrono::seconds(30));
    control.RequestCheckpoint({CheckpointType::kFull, 77, false});
  });
  const ScriptResult r = Run(spec, &control);
  ask.join();
  ASSERT_EQ(r.outcome, WorkerOutcome::kSucceeded) << r.error;
  ASSERT_GE(rec_.steps.size(), 4u);
  EXPECT_EQ(rec_.steps[0].step, 1);
  EXPECT_EQ(rec_.steps[0].samples, 8);
  EXPECT_DOUBLE_EQ(rec_.steps[1].loss, 0.5);
  EXPECT_GT(rec_.steps[2].samples_per_second, 0) << "samples over the time between reports";
  ASSERT_EQ(rec_.checkpoints.size(), 1u);
  const CheckpointEvent& c = rec_.checkpoints[0];
  EXPECT_TRUE(c.ok) << c.error;
  EXPECT_EQ(c.request_id, 77);
  EXPECT_EQ(c.trigger, "request");
  EXPECT_EQ(c.index, 0);
  EXPECT_EQ(c.bytes, 1000);
  EXPECT_EQ(c.step, rec_.steps[rec_.steps.size() - 2].step);
  // Sealed: a complete checkpoint a restart resumes from.
  EXPECT_TRUE(CheckCheckpoint(c.path, /*verify=*/true).ok());
  EXPECT_EQ(r.last_step, rec_.steps.back().step);
}

TEST_F(ScriptRunnerTest, PreemptionTellsTheScriptToSaveAndStop) {
  const JobSpec spec = Spec(Write("preempt.py", R"(import os, time, trainyard
step = 0
while True:
    step += 1
    trainyard.report(step, samples=1, loss=1.0)
    if trainyard.should_stop():
        path = trainyard.checkpoint_dir(step)
        os.makedirs(path)
        open(os.path.join(path, "state"), "w").write(str(step))
        trainyard.checkpoint_saved(path, step)
        break
    time.sleep(0.01)
)"));
  TrainerControl control;
  std::thread preempt([&] {
    WaitFor(
        [&] {
          std::lock_guard<std::mutex> lock(rec_.mu);
          return !rec_.steps.empty();
        },
        std::chrono::seconds(30));
    control.RequestPreemption();
  });
  const ScriptResult r = Run(spec, &control);
  preempt.join();
  EXPECT_EQ(r.outcome, WorkerOutcome::kPreempted) << r.error;
  ASSERT_EQ(rec_.checkpoints.size(), 1u);
  EXPECT_TRUE(rec_.checkpoints[0].ok) << rec_.checkpoints[0].error;
  EXPECT_EQ(rec_.checkpoints[0].trigger, "preemption");
}

TEST_F(ScriptRunnerTest, AStopEndsAScriptThatDoesNotListen) {
  const JobSpec spec = Spec(Write("deaf.py",
                                  "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                                  "open('" +
                                      dir_.path() +
                                      "/started', 'w').close()\n"
                                      "while True: time.sleep(0.1)\n"));
  TrainerControl control;
  std::thread stop([&] {
    WaitFor([&] { return fs::exists(dir_.path() + "/started"); }, std::chrono::seconds(30));
    control.RequestStop();
  });
  const auto start = std::chrono::steady_clock::now();
  const ScriptResult r = Run(spec, &control);
  stop.join();
  EXPECT_EQ(r.outcome, WorkerOutcome::kStopped) << r.error;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20)) << "SIGKILL after the grace";
}

TEST_F(ScriptRunnerTest, APythonErrorIsTheReason) {
  const ScriptResult r = Run(Spec(Write("broken.py", "import trainyard\nraise ValueError('bad learning rate')\n")));
  EXPECT_EQ(r.outcome, WorkerOutcome::kFailed);
  EXPECT_NE(r.error.find("broken.py exited with code 1: ValueError: bad learning rate"), std::string::npos) << r.error;
}

TEST_F(ScriptRunnerTest, APythonThatDoesNotExistIsNamed) {
  JobSpec spec = Spec(Write("ok.py", "pass\n"));
  spec.script.python = "/nonexistent/bin/python9";
  const ScriptResult r = Run(spec);
  EXPECT_EQ(r.outcome, WorkerOutcome::kUsage);
  EXPECT_NE(r.error.find("/nonexistent/bin/python9"), std::string::npos) << r.error;
}

TEST_F(ScriptRunnerTest, AMissingScriptIsNamed) {
  const ScriptResult r = Run(Spec(dir_.path() + "/missing.py"));
  EXPECT_EQ(r.outcome, WorkerOutcome::kFailed);
  EXPECT_NE(r.error.find("missing.py is not a file"), std::string::npos) << r.error;
}

}  // namespace
}  // namespace trainyard
