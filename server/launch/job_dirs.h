// JobDirs: the directories a job's processes write under the server's state
// directory, made ready before its ranks start on this host. For a job that
// runs as its owner's account (LaunchRequest::run_as):
//   <state>/jobs/<id>/             the server's, 0711: others pass through
//                                  it to what is theirs, and list nothing
//   <state>/jobs/<id>/attempt-<n>/ the account's, 0700: its rank logs and
//                                  exit codes
//   <state>/jobs/<id>/checkpoints/ the account's, 0700, when the job keeps
//                                  its checkpoints in that default project
//                                  directory
// Nothing is followed through a symbolic link the account could have
// planted: an entry that is not a directory is refused, not used. Without
// an account the same directories are the server's (0711 and 0700), and the
// worker makes checkpoints/ itself.
#ifndef TRAINYARD_SERVER_LAUNCH_JOB_DIRS_H_
#define TRAINYARD_SERVER_LAUNCH_JOB_DIRS_H_

#include <string>

#include "absl/status/status.h"
#include "common/unix_account.h"

namespace trainyard {

// `log_dir`: <job dir>/attempt-<n>. `default_project`: the job's
// checkpoint.project_dir is <job dir>.
absl::Status PrepareJobDirs(const std::string& log_dir, bool default_project, const UnixAccount* account);

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_LAUNCH_JOB_DIRS_H_
