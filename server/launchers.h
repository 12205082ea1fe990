// Launchers: the launchers this server has, by kind, and how one attempt of
// a job is launched, adopted after a coordinator restart, and stopped
// through them. External jobs have no launcher: their ranks join by
// themselves and are stopped by a command down their streams.
//
// Not thread-safe: the JobManager calls it under its mutex (the launchers
// themselves are thread-safe and report exits from their own threads).
#ifndef TRAINYARD_SERVER_LAUNCHERS_H_
#define TRAINYARD_SERVER_LAUNCHERS_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/active_job.h"
#include "server/launcher.h"

namespace trainyard {

// Where an attempt's workers reach the coordinator and write their logs.
struct LaunchContext {
  std::string coordinator_addr;         // for workers on this host
  std::string remote_coordinator_addr;  // for workers on other hosts (Slurm)
  std::string log_dir;                  // <state_dir>/jobs/<id>/attempt-<n>
  std::vector<int> gpus;                // local CUDA jobs: one per rank
};

class Launchers {
 public:
  void Register(LauncherKind kind, Launcher* launcher) { launchers_[kind] = launcher; }
  // Null when this server has none of `kind` (always for kExternal).
  Launcher* Get(LauncherKind kind) const;

  // What the attempt's workers are told (REQUIRES: job.attempt).
  static LaunchRequest RequestFor(const ActiveJob& job, LauncherKind kind, const LaunchContext& context);
  // Starts the ranks of the job's attempt.
  absl::Status Launch(const ActiveJob& job, LauncherKind kind, const LaunchContext& context) const;
  // Follows the ranks of an attempt an earlier coordinator launched.
  void Adopt(const ActiveJob& job, LauncherKind kind, const LaunchContext& context) const;
  // Stops the attempt's workers: through its launcher, or (external jobs)
  // by a stop command down each connected rank's stream.
  void Stop(const ActiveJob& job, LauncherKind kind) const;

 private:
  std::map<LauncherKind, Launcher*> launchers_;
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_LAUNCHERS_H_
