// SpecAdmission: the checks a valid spec (common/job_spec.h) passes on this
// server before it is queued — the launcher it names is here and available,
// this host has the slots or GPUs a local job needs, and every path it names
// lies under the allowed roots — and the paths resolved in the spec.
//
// Immutable after construction; safe to call from any thread.
#ifndef TRAINYARD_SERVER_SPEC_ADMISSION_H_
#define TRAINYARD_SERVER_SPEC_ADMISSION_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/job_spec.h"
#include "server/launcher.h"
#include "server/launchers.h"

namespace trainyard {

struct AdmissionOptions {
  int slots = 1;  // CPU slots of this host
  int gpus = 0;   // ranks of CUDA jobs this host takes at once (its GPUs x --ranks-per-gpu)
  // Where a job's checkpoints go when its spec names no project_dir:
  // <state_dir>/jobs/<id>.
  std::string state_dir;
  // Paths a job may name lie under one of these (absolute).
  std::vector<std::string> allowed_roots;
  LauncherKind default_launcher = LauncherKind::kLocal;
  // The Python of script jobs whose spec names none.
  std::string script_python = "python3";
};

class SpecAdmission {
 public:
  explicit SpecAdmission(AdmissionOptions options) : options_(std::move(options)) {}

  // The launcher that starts a job of `spec`.
  LauncherKind KindOf(const JobSpec& spec) const {
    return spec.launcher == LauncherKind::kDefault ? options_.default_launcher : spec.launcher;
  }
  // Whether this server can run `spec` at all, with `launchers`.
  absl::Status CheckResources(const JobSpec& spec, const Launchers& launchers) const;
  // Resolves every path `spec` names (checkpoint.project_dir, defaulting
  // under the state directory; the files it reads; a resume source) to an
  // absolute path under the allowed roots (`user_roots`, the submitting
  // user's, when given), or says which field is outside.
  absl::Status ResolvePaths(JobSpec& spec, const std::string& job_id,
                            const std::vector<std::string>& user_roots = {}) const;
  // What can be known of the model before a worker starts: a llama model's
  // config.json (read after ResolvePaths) is one this engine trains, and
  // the job's context fits it. An external job's workers may see files
  // this host does not: an unreadable config is theirs to report.
  absl::Status CheckModel(const JobSpec& spec) const;

  // The spec a resumed job runs with: its stored spec, with `num_processes`
  // (0: keep) and resuming from `from` (a checkpoint directory; empty: the
  // latest complete one), checked again as a new submission is.
  absl::StatusOr<JobSpec> ForResume(const std::string& stored_spec_json, const SpecLimits& limits,
                                    const std::string& job_id, const std::string& from, int32_t num_processes,
                                    const Launchers& launchers, const std::vector<std::string>& user_roots = {}) const;

  const AdmissionOptions& options() const { return options_; }

 private:
  const AdmissionOptions options_;
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_SPEC_ADMISSION_H_
