// ExternalLauncher: the launcher of `launcher: external` jobs. It starts no
// process: an attempt's ranks join by themselves (trainyard-worker --join
// with the job's token), and are stopped by a stop command down each
// connected rank's stream; ranks that are not connected are accounted for
// by Attempt::LostRanks. Nothing is adopted after a restart: the ranks
// reattach on their own.
//
// Called under the JobManager's mutex, like the streams it reaches.
#ifndef TRAINYARD_SERVER_LAUNCH_EXTERNAL_LAUNCHER_H_
#define TRAINYARD_SERVER_LAUNCH_EXTERNAL_LAUNCHER_H_

#include <functional>
#include <string>
#include <utility>

#include "common/worker_command.h"
#include "server/launch/launcher.h"

namespace trainyard {

class ExternalLauncher final : public Launcher {
 public:
  // Sends `command` down the stream of every connected rank of the job's
  // attempt (nothing when that attempt is not the job's current one).
  using Broadcast = std::function<void(const std::string& job_id, int32_t attempt, const WorkerCommand& command)>;
  explicit ExternalLauncher(Broadcast broadcast) : broadcast_(std::move(broadcast)) {}

  // A replacement (fault_tolerance.mode replica) joins by itself too: the
  // rank's next hello, from whatever runs it (an elastic agent, a pod's
  // restart policy).
  Traits traits() const override { return {.on_this_host = false, .ranks_join = true, .replaces_ranks = true}; }
  absl::Status Launch(const LaunchRequest&) override { return absl::OkStatus(); }
  absl::Status LaunchRank(const LaunchRequest&, int32_t) override { return absl::OkStatus(); }
  void Stop(const std::string& job_id, int32_t attempt) override {
    broadcast_(job_id, attempt, {WorkerCommand::Kind::kStop, "the attempt is stopping"});
  }
  int LiveProcesses(const std::string&) override { return 0; }
  void Adopt(const LaunchRequest&) override {}

 private:
  const Broadcast broadcast_;
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_LAUNCH_EXTERNAL_LAUNCHER_H_
