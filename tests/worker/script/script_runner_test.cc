// ScriptRunner with real Python scripts (the system's python3 and the
// repository's `trainyard` package): the rank's environment, steps the
// script reports, a checkpoint it saves on request (sealed and reported),
// preemption (should_stop, exit 0 -> preempted), a stop (the script is ended),
// a Python error (the traceback's last line is the reason), a Python that
// does not exist (a usage error naming it), a script that reports nothing.
#include "worker/script/script_runner.h"

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "common/checkpoint_dir.h"
#include "common/paths.h"
#include "tests/test_paths.h"
#include "tests/test_util.h"
#include "worker/base/flight_recorder.h"
#include "worker/script/script_outcome.h"

namespace trainyard {
namespace {

namespace fs = std::filesystem;

struct Recorder : MetricsSink {
  std::mutex mu;
  std::vector<StepMetrics> steps;
  std::vector<CheckpointEvent> checkpoints;
  std::vector<std::string> notes;
  void OnNote(const std::string& text) override {
    std::lock_guard<std::mutex> lock(mu);
    notes.push_back(text);
  }
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

// Issue 64: a request is saved for once, the steps after it save nothing,
// and a second request saves once more; so does a third with the second's
// number (a restarted coordinator numbers from 1 again): the worker told the
// script the second was answered.
TEST_F(ScriptRunnerTest, OneRequestOneCheckpoint) {
  const std::string done = dir_.path() + "/done";
  const JobSpec spec = Spec(Write("twice.py", R"(import os, time, trainyard
for step in range(1, 3001):
    trainyard.report(step, samples=1, loss=1.0)
    if trainyard.checkpoint_requested():
        path = trainyard.checkpoint_dir(step)
        os.makedirs(path)
        trainyard.checkpoint_saved(path, step)
    if os.path.exists(")" + done + R"("):
        break
    time.sleep(0.01)
)"));
  TrainerControl control;
  auto steps = [&] {
    std::lock_guard<std::mutex> lock(rec_.mu);
    return rec_.steps.empty() ? int64_t{0} : rec_.steps.back().step;
  };
  auto saved = [&] {
    std::lock_guard<std::mutex> lock(rec_.mu);
    return rec_.checkpoints.size();
  };
  std::thread ask([&] {
    for (int64_t id : {77, 78, 78}) {
      const size_t before = saved();
      const int64_t from = steps();
      WaitFor([&] { return steps() >= from + 3; }, std::chrono::seconds(30));
      control.RequestCheckpoint({CheckpointType::kFull, id, false});
      WaitFor([&] { return saved() > before; }, std::chrono::seconds(30));
      const int64_t at = steps();
      WaitFor([&] { return steps() >= at + 20; }, std::chrono::seconds(30));  // the steps after it
    }
    std::ofstream(done).close();
  });
  const ScriptResult r = Run(spec, &control);
  ask.join();
  ASSERT_EQ(r.outcome, WorkerOutcome::kSucceeded) << r.error;
  std::string at;
  for (const CheckpointEvent& c : rec_.checkpoints) at += " " + std::to_string(c.step);
  ASSERT_EQ(rec_.checkpoints.size(), 3u) << "saved at steps" << at;
  EXPECT_EQ(rec_.checkpoints[0].request_id, 77);
  EXPECT_EQ(rec_.checkpoints[1].request_id, 78);
  EXPECT_EQ(rec_.checkpoints[2].request_id, 78);
  for (const CheckpointEvent& c : rec_.checkpoints) EXPECT_TRUE(c.ok) << c.error;
}

// A script that imports trainyard after seconds of other imports (torch,
// Accelerate): a request that comes before it got there waits for it.
TEST_F(ScriptRunnerTest, ARequestBeforeTheImportWaitsForIt) {
  const std::string started = dir_.path() + "/started";
  const JobSpec spec = Spec(Write("late.py", "import time\nopen('" + started + R"(', 'w').close()
time.sleep(1)  # the imports before trainyard's
import os, trainyard
for step in range(1, 3001):
    trainyard.report(step, samples=1, loss=1.0)
    if trainyard.checkpoint_requested():
        path = trainyard.checkpoint_dir(step)
        os.makedirs(path)
        trainyard.checkpoint_saved(path, step)
        break
    time.sleep(0.01)
)"));
  TrainerControl control;
  std::thread ask([&] {
    WaitFor([&] { return fs::exists(started); }, std::chrono::seconds(30));
    control.RequestCheckpoint({CheckpointType::kFull, 7, false});
  });
  const ScriptResult r = Run(spec, &control);
  ask.join();
  ASSERT_EQ(r.outcome, WorkerOutcome::kSucceeded) << r.error;
  ASSERT_EQ(rec_.checkpoints.size(), 1u);
  EXPECT_TRUE(rec_.checkpoints[0].ok) << rec_.checkpoints[0].error;
  EXPECT_EQ(rec_.checkpoints[0].request_id, 7);
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

// Without an Accelerate config, several CPU processes are told
// ACCELERATE_USE_CPU (one MULTI_CPU group); one process, a config, or a GPU
// job are not. A config's CUDA_VISIBLE_DEVICES (gpu_ids) never overrides the
// launcher's; the rank has a torch error file of its own.
TEST_F(ScriptRunnerTest, WithoutAnAccelerateConfigCpuProcessesAreOneGroup) {
  JobSpec spec = Spec("train.py");
  auto env = ScriptEnvironment(spec, Where(), {});
  EXPECT_EQ(env["ACCELERATE_USE_CPU"], "True");
  EXPECT_EQ(env["TORCHELASTIC_ERROR_FILE"], ErrorFilePath(Where()));
  EXPECT_NE(env["TORCHELASTIC_ERROR_FILE"].find("job-test-attempt3-rank0"), std::string::npos);
  // In a directory of the worker's own, not at a name another account can guess and plant.
  const std::string dir = std::filesystem::path(env["TORCHELASTIC_ERROR_FILE"]).parent_path().string();
  EXPECT_NE(dir, std::filesystem::temp_directory_path().string());
  EXPECT_TRUE(IsOwnDirectory(dir, ::geteuid()).ok()) << IsOwnDirectory(dir, ::geteuid());
  struct stat st {};
  ASSERT_EQ(::stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  // A FIFO where the error file is read makes no reader wait.
  const std::string fifo = dir + "/fifo-error.json";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(RaisedException(fifo), "");
  ::unlink(fifo.c_str());
  EXPECT_EQ(ScriptEnvironment(spec, Where(), {{"ACCELERATE_MIXED_PRECISION", "no"}}).count("ACCELERATE_USE_CPU"), 0u)
      << "a config says it all";
  ScriptRank one = Where();
  one.world_size = 1;
  EXPECT_EQ(ScriptEnvironment(spec, one, {}).count("ACCELERATE_USE_CPU"), 0u) << "one process stays NO";
  spec.device = Device::kCuda;
  EXPECT_EQ(ScriptEnvironment(spec, Where(), {}).count("ACCELERATE_USE_CPU"), 0u);
  EXPECT_EQ(ScriptEnvironment(spec, Where(), {{"CUDA_VISIBLE_DEVICES", "3"}}).count("CUDA_VISIBLE_DEVICES"), 0u);
}

// A script that never imported trainyard cannot hear a checkpoint request:
// it is answered at once as failed, saying how to enable it.
TEST_F(ScriptRunnerTest, ACheckpointRequestAScriptCannotHearIsAnsweredAtOnce) {
  const JobSpec spec = Spec(Write("plain.py", "import time\nopen('" + dir_.path() +
                                                  "/started', 'w').close()\n"
                                                  "for _ in range(600): time.sleep(0.1)\n"));
  TrainerControl control;
  std::thread ask([&] {
    WaitFor([&] { return fs::exists(dir_.path() + "/started"); }, std::chrono::seconds(30));
    control.RequestCheckpoint({CheckpointType::kAuto, 7, false});
    WaitFor(
        [&] {
          std::lock_guard<std::mutex> lock(rec_.mu);
          return !rec_.checkpoints.empty();
        },
        std::chrono::seconds(10));
    control.RequestStop();
  });
  const ScriptResult r = Run(spec, &control);
  ask.join();
  EXPECT_EQ(r.outcome, WorkerOutcome::kStopped) << r.error;
  ASSERT_EQ(rec_.checkpoints.size(), 1u);
  EXPECT_FALSE(rec_.checkpoints[0].ok);
  EXPECT_TRUE(rec_.checkpoints[0].refused);  // not a failed save: the server answers FAILED_PRECONDITION
  EXPECT_EQ(rec_.checkpoints[0].request_id, 7);
  EXPECT_NE(rec_.checkpoints[0].error.find("has not imported trainyard"), std::string::npos)
      << rec_.checkpoints[0].error;
}

// The exception the script raised is the reason, from the torch error file
// the runner writes: here its first line, which the last stderr line (the
// message's second line) would not carry.
TEST_F(ScriptRunnerTest, TheRaisedExceptionIsTheReason) {
  const ScriptResult r = Run(Spec(Write("raises.py", "raise RuntimeError('the first line\\nthe second line')\n")));
  EXPECT_EQ(r.outcome, WorkerOutcome::kFailed);
  EXPECT_NE(r.error.find("exited with code 1: RuntimeError: the first line"), std::string::npos) << r.error;
}

// A script that returned does not die in the interpreter's teardown (a
// stand-in for Gloo's abort: an object that aborts when finalized); its
// atexit handlers still run and its exit code is kept.
TEST_F(ScriptRunnerTest, AFinishedScriptLeavesWithoutTheTeardown) {
  const std::string marker = dir_.path() + "/atexit-ran";
  const std::string text =
      "import atexit, os, sys\n"
      "class AbortsWhenFinalized:\n"
      "    def __del__(self): os.abort()\n"
      "bomb = AbortsWhenFinalized()\n"
      "atexit.register(lambda: open('" +
      marker +
      "', 'w').close())\n"
      "print('done')\n";
  const ScriptResult r = Run(Spec(Write("teardown.py", text)));
  EXPECT_EQ(r.outcome, WorkerOutcome::kSucceeded) << r.error;
  EXPECT_TRUE(fs::exists(marker)) << "atexit handlers run";
  // The same script run as `python script.py` does abort: the stand-in is real.
  const std::string cmd = "/usr/bin/python3 " + dir_.path() + "/teardown.py > /dev/null 2>&1";
  const int status = std::system(cmd.c_str());
  EXPECT_TRUE(WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGABRT)) << status;
  const ScriptResult failing = Run(Spec(Write("exits3.py", "import sys\nsys.exit(3)\n")));
  EXPECT_EQ(failing.outcome, WorkerOutcome::kFailed);
  EXPECT_NE(failing.error.find("exited with code 3"), std::string::npos) << failing.error;
}

// script.progress: a script that only prints its progress has its steps
// and loss read from rank 0's output, which still reaches the log.
TEST_F(ScriptRunnerTest, ProgressIsReadFromTheScriptsOutput) {
  JobSpec spec = Spec(Write("prints.py",
                            "for i in range(1, 6): print(f'iter {i}: loss {1.0 / i:.4f}', flush=True)\n"
                            "print('iter x: not a step')\n"));
  spec.script.progress = R"(iter (?P<step>\d+): loss (?P<loss>[.\d]+))";
  const ScriptResult r = Run(spec);
  EXPECT_EQ(r.outcome, WorkerOutcome::kSucceeded) << r.error;
  ASSERT_EQ(rec_.steps.size(), 5u);
  EXPECT_EQ(rec_.steps.back().step, 5);
  EXPECT_DOUBLE_EQ(rec_.steps.back().loss, 0.2);
  EXPECT_DOUBLE_EQ(rec_.steps.front().loss, 1.0);
  EXPECT_EQ(r.last_step, 5);
  // Steps read count as reported: no note says the progress is not known.
  for (const std::string& note : rec_.notes) EXPECT_EQ(note.find("without reporting"), std::string::npos) << note;

  // A script whose output the pattern never matches: its progress is not known.
  spec.script.path = Write("quiet.py", "print('done')\n");
  ASSERT_EQ(Run(spec).outcome, WorkerOutcome::kSucceeded);
  ASSERT_EQ(rec_.notes.size(), 1u);
  EXPECT_NE(rec_.notes[0].find("the script ended without reporting a step"), std::string::npos) << rec_.notes[0];
}

// report(step, total=N), as tqdm's total: the steps the script will run
// ride on its steps to the coordinator (the job's max_steps from then on).
TEST_F(ScriptRunnerTest, AReportedTotalRidesOnTheSteps) {
  const JobSpec spec = Spec(Write("total.py",
                                  "import trainyard\n"
                                  "trainyard.report(1)\n"
                                  "for step in range(2, 4): trainyard.report(step, total=3)\n"));
  ASSERT_EQ(Run(spec).outcome, WorkerOutcome::kSucceeded);
  ASSERT_EQ(rec_.steps.size(), 3u);
  EXPECT_EQ(rec_.steps[0].total_steps, 0) << "not said";
  EXPECT_EQ(rec_.steps[1].total_steps, 3);
  EXPECT_EQ(rec_.steps[2].total_steps, 3);
}

// The step a rank's flight record shows (`trainctl diagnose`): rank 0's as
// script.progress reads it; another rank's, whose output is not read, not
// known rather than 0.
TEST_F(ScriptRunnerTest, AFlightRecordShowsOnlyAStepThatIsKnown) {
  JobSpec spec = Spec(Write("prints.py", "for i in range(1, 4): print(f'iter {i}', flush=True)\n"));
  spec.script.progress = R"(iter (?P<step>\d+))";
  for (int rank : {0, 1}) {
    ScriptRank where = Where();
    where.rank = rank;
    FlightRecorder flight(rank);
    ScriptOptions o;
    o.flight_recorder = &flight;
    ScriptRunner runner(spec, where, ScriptEnvironment(spec, where, {}), &rec_, nullptr, o);
    ASSERT_EQ(runner.Run().outcome, WorkerOutcome::kSucceeded);
    EXPECT_EQ(flight.step(), rank == 0 ? 3 : kStepUnknown) << "rank " << rank;
  }
}

}  // namespace
}  // namespace trainyard
