// ScriptOutcome: how a script's end reads as its rank's outcome, for each
// way it can end (exit code, signal) and what the worker did (a stop, a
// preemption passed on) or heard (a checkpoint, the package's hello).
#include "worker/script/script_outcome.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>

#include "tests/test_util.h"

namespace trainyard {
namespace {

ChildExit Exited(int code) { return {ChildExit::How::kExited, code, 0}; }
ChildExit Killed(int sig) { return {ChildExit::How::kSignaled, -1, sig}; }

ScriptResult Outcome(const ScriptEnd& end) {
  ScriptResult r;
  ScriptOutcome(end, r);
  return r;
}

TEST(ScriptOutcomeTest, ExitZeroSucceedsOrStops) {
  EXPECT_EQ(Outcome({.script_path = "t.py", .exit = Exited(0)}).outcome, WorkerOutcome::kSucceeded);
  // Told to save and stop (cancel --checkpoint), it saved and returned.
  EXPECT_EQ(Outcome({.exit = Exited(0), .stop_told = true}).outcome, WorkerOutcome::kStopped);
  const ScriptResult preempted = Outcome({.exit = Exited(0), .preempted = true, .checkpoints = 1, .last_step = 7});
  EXPECT_EQ(preempted.outcome, WorkerOutcome::kPreempted);
  EXPECT_EQ(preempted.error, "preempted at step 7; the script saved a checkpoint");
}

TEST(ScriptOutcomeTest, AFailureSaysWhy) {
  const ScriptResult raised =
      Outcome({.script_path = "t.py", .exit = Exited(1), .last_stderr_line = "last", .raised = "ValueError: lr"});
  EXPECT_EQ(raised.outcome, WorkerOutcome::kFailed);
  EXPECT_EQ(raised.error, "script t.py exited with code 1: ValueError: lr") << "the exception before stderr";
  EXPECT_EQ(Outcome({.script_path = "t.py", .exit = Exited(2), .last_stderr_line = "boom"}).error,
            "script t.py exited with code 2: boom");
  const ScriptResult killed = Outcome({.script_path = "t.py", .exit = Killed(SIGSEGV), .last_stderr_line = "x"});
  EXPECT_EQ(killed.outcome, WorkerOutcome::kFailed);
  EXPECT_NE(killed.error.find("script t.py was killed by signal 11"), std::string::npos) << killed.error;
  EXPECT_NE(killed.error.find("last stderr line before the signal: x"), std::string::npos) << killed.error;
}

TEST(ScriptOutcomeTest, WhatTheWorkerOrderedDecides) {
  // Ended by the worker's stop, whatever its way out.
  EXPECT_EQ(Outcome({.exit = Killed(SIGKILL), .stopping = true}).outcome, WorkerOutcome::kStopped);
  EXPECT_EQ(Outcome({.exit = Exited(130), .stopping = true}).outcome, WorkerOutcome::kStopped);
  // A preemption passed on: ended by SIGTERM, or leaving with an error when
  // it could not save (no package).
  const ScriptResult term = Outcome({.exit = Killed(SIGTERM), .preempted = true, .last_step = 3});
  EXPECT_EQ(term.outcome, WorkerOutcome::kPreempted);
  EXPECT_EQ(term.error, "preempted at step 3; the script ended on SIGTERM without saving a checkpoint");
  EXPECT_EQ(Outcome({.exit = Exited(1), .preempted = true}).outcome, WorkerOutcome::kPreempted);
  // With the package, an error after the preemption is its own failure.
  EXPECT_EQ(Outcome({.exit = Exited(1), .preempted = true, .talked = true}).outcome, WorkerOutcome::kFailed);
}

TEST(ScriptOutcomeTest, TheRaisedExceptionFromTorchsErrorFile) {
  TempDir dir;
  const std::string nested = dir.path() + "/nested.json", flat = dir.path() + "/flat.json";
  std::ofstream(nested) << R"({"message": {"message": "ValueError: bad", "extraInfo": {}}})";
  std::ofstream(flat) << R"({"message": "RuntimeError: worse"})";
  EXPECT_EQ(RaisedException(nested), "ValueError: bad");
  EXPECT_EQ(RaisedException(flat), "RuntimeError: worse");
  EXPECT_EQ(RaisedException(dir.path() + "/missing.json"), "");
}

}  // namespace
}  // namespace trainyard
