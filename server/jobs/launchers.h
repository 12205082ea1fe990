// Launchers: the launchers this server has, by kind, the kind a spec's job
// uses (its own, or the server's default), and how one attempt of a job is
// launched, adopted after a coordinator restart, and stopped through them.
// Every kind is a Launcher (external too: server/launch/external_launcher.h); what
// differs between them is in their Launcher::Traits.
//
// Not thread-safe: the JobManager calls it under its mutex (the launchers
// themselves report exits from their own threads).
#ifndef TRAINYARD_SERVER_JOBS_LAUNCHERS_H_
#define TRAINYARD_SERVER_JOBS_LAUNCHERS_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/jobs/active_job.h"
#include "server/launch/launcher.h"

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
  explicit Launchers(LauncherKind default_kind = LauncherKind::kLocal) : default_kind_(default_kind) {}

  void Register(LauncherKind kind, Launcher* launcher) { launchers_[kind] = launcher; }
  // Null when this server has none of `kind`.
  Launcher* Get(LauncherKind kind) const;

  // The kind that starts a job of `spec`: its own, or the default.
  LauncherKind KindOf(const JobSpec& spec) const {
    return spec.launcher == LauncherKind::kDefault ? default_kind_ : spec.launcher;
  }
  LauncherKind default_kind() const { return default_kind_; }
  // The traits of the launcher of `spec` (none registered: the defaults).
  Launcher::Traits TraitsOf(const JobSpec& spec) const;

  // The id the cluster's scheduler gave the job's attempt ("" for none):
  // Launcher::ExternalId.
  std::string ExternalIdOf(const ActiveJob& job) const;
  // What the attempt's workers are told (REQUIRES: job.attempt).
  static LaunchRequest RequestFor(const ActiveJob& job, const Launcher::Traits& traits, const LaunchContext& context);
  // Starts the ranks of the job's attempt.
  absl::Status Launch(const ActiveJob& job, const LaunchContext& context) const;
  // Starts rank `rank` of the job's attempt again (Launcher::LaunchRank).
  absl::Status LaunchRank(const ActiveJob& job, const LaunchContext& context, int32_t rank) const;
  // Follows the ranks of an attempt an earlier coordinator launched.
  void Adopt(const ActiveJob& job, const LaunchContext& context) const;
  // Stops the attempt's workers through its launcher.
  void Stop(const ActiveJob& job) const;

 private:
  const LauncherKind default_kind_;
  std::map<LauncherKind, Launcher*> launchers_;
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_JOBS_LAUNCHERS_H_
