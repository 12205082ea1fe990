// Admission: everything a job must pass on this server before it is queued,
// and the spec it then runs with. Admit runs the whole submit check, in
// this order: the spec parses and is valid (with its Accelerate config);
// the launcher it names is here and available, and this host has the slots
// or GPUs a local job needs; the queue has room; the server is not
// stopping; the caller may submit at the priority class it names and has
// queued fewer jobs than their quota; every path it names lies under the
// allowed roots (resolved in the spec); the model is one this engine
// trains. A resumed job passes the same checks on its stored spec.
//
// Immutable after construction; safe to call from any thread.
#ifndef TRAINYARD_SERVER_JOBS_ADMISSION_H_
#define TRAINYARD_SERVER_JOBS_ADMISSION_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/job_spec.h"
#include "common/llama_config.h"
#include "common/policy.h"
#include "server/auth/caller.h"
#include "server/jobs/job_manager_options.h"
#include "server/jobs/launchers.h"
#include "server/launch/launcher.h"

namespace trainyard {

struct AdmissionOptions {
  int slots = 1;  // CPU slots of this host
  int gpus = 0;   // ranks of CUDA jobs this host takes at once (its GPUs x --ranks-per-gpu)
  // Where a job's checkpoints go when its spec names no project_dir:
  // <state_dir>/jobs/<id>.
  std::string state_dir;
  // Paths a job may name lie under one of these (absolute).
  std::vector<std::string> allowed_roots;
  // The Python of script jobs whose spec names none.
  std::string script_python = "python3";
  SpecLimits limits;
  // Jobs waiting in the queue at most.
  int max_queued_jobs = 50000;
  // Hosts notify.urls may name; empty: any not on the local network
  // (common/webhook_url.h).
  std::vector<std::string> notify_allowed_hosts;
  // The owner of job `id` ("" when unknown): a user's job may resume from
  // a checkpoint in the directory of another job of theirs (a PBT copy
  // resumes its source's). Unset: only its own directory.
  std::function<std::string(const std::string& id)> owner_of;
};

// The admission options of a JobManager's (paths made absolute; default
// roots: the state directory and the working directory).
AdmissionOptions AdmissionOptionsOf(const JobManagerOptions& o);

// The server as a submission finds it.
struct AdmissionState {
  const Policy& policy;
  const Launchers& launchers;
  int queued = 0;            // jobs waiting
  int queued_of_caller = 0;  // of them, the caller's
  bool shutting_down = false;
};

// A job admitted: its spec (paths resolved, launcher chosen), its priority,
// and notes for its events (the Accelerate config's warnings).
struct Admitted {
  JobSpec spec;
  int64_t priority = 0;
  std::vector<std::string> notes;
};

// What admission parses and reads for a submission before the server's
// lock is taken (Admission::ReadFiles), so that a large spec or a slow or
// hostile file costs that one request and stalls no other: the spec itself,
// parsed once (with its Accelerate config's notes), and a llama model's
// config.json (unset: nothing to read, or the spec is refused before).
struct AdmissionFiles {
  std::optional<absl::StatusOr<JobSpec>> spec;
  std::vector<std::string> notes;
  std::optional<absl::StatusOr<LlamaConfig>> llama_config;
  // ResolvePaths' answer for `spec` (whose paths it resolved), when
  // ReadFiles was given the job's id and launchers.
  std::optional<absl::Status> paths;
};

class Admission {
 public:
  explicit Admission(AdmissionOptions options) : options_(std::move(options)) {}

  // The whole submit check of a job `by` submits as `job_id`. Unavailable
  // when the server is shutting down (not a refusal of the job); any other
  // error says which spec field or rule refuses it.
  // `files`: what ReadFiles parsed and read for it (null: parse and read now).
  absl::StatusOr<Admitted> Admit(const std::string& spec_text, const std::string& accelerate_config, const Caller& by,
                                 const std::string& job_id, const AdmissionState& now,
                                 const AdmissionFiles* files = nullptr) const;
  // Parses the spec and reads the files Admit checks for this submission
  // (bounded, non-blocking: common/paths.h ReadBoundedFile), with none of the
  // server's state: call it without the server's lock. A spec that does not
  // parse, or names its model's config outside the caller's roots, reads
  // nothing (Admit refuses it). With `launchers`, it also resolves the
  // spec's paths for `job_id` (ResolvePaths: the file system's answers, a
  // user's directories among them, are waited for here, not under the lock).
  AdmissionFiles ReadFiles(const std::string& spec_text, const std::string& accelerate_config, const Caller& by,
                           const std::string& job_id = "", const Launchers* launchers = nullptr) const;

  // Whether the caller's job may run as the account the policy gives them:
  // scripts of users without a unix_user need the policy's shared_account;
  // jobs of users with one start on this host (the local launcher).
  absl::Status CheckAccount(const JobSpec& spec, const Policy& policy, const Caller& by,
                            const Launcher::Traits& traits) const;
  // Whether this server can run `spec` at all, with `launchers`.
  absl::Status CheckResources(const JobSpec& spec, const Launchers& launchers) const;
  // The directories the caller's jobs may name paths under: a user's of the
  // policy are their roots (none: no path at all); anyone else's, the
  // server's --allowed-root directories (by default its state directory
  // and working directory).
  std::vector<std::string> RootsOf(const Caller& by) const;
  // Resolves every path `spec` names (checkpoint.project_dir, defaulting
  // under the state directory; the files it reads; a resume source) to an
  // absolute path beneath the caller's roots (RootsOf; ResolveUnderRoots),
  // or says which field is outside. A user of the policy never names a path
  // in the server's state directory but in the job's own directory
  // (<state>/jobs/<job_id>). A script run on this host must exist.
  absl::Status ResolvePaths(JobSpec& spec, const std::string& job_id, const Launcher::Traits& traits,
                            const Caller& by = {}) const;
  // What can be known of the model before a worker starts: a llama model's
  // config.json (read after ResolvePaths) is one this engine trains, and
  // the job's context fits it. Ranks that join may see files this host
  // does not: an unreadable config is theirs to report.
  absl::Status CheckModel(const JobSpec& spec, const Launcher::Traits& traits, const AdmissionFiles* files = nullptr,
                          const std::vector<std::string>& roots = {}) const;

  // The spec a resumed job runs with: its stored spec, with `num_processes`
  // (0: keep) and resuming from `from` (a checkpoint directory; empty: the
  // latest complete one), checked again as a new submission is. Reads
  // files (config.json, the checkpoint's manifest): call it without the
  // server's lock.
  absl::StatusOr<JobSpec> ForResume(const std::string& stored_spec_json, const std::string& job_id,
                                    const std::string& from, int32_t num_processes, const Launchers& launchers,
                                    const Caller& by = {}) const;

  const AdmissionOptions& options() const { return options_; }
  const SpecLimits& limits() const { return options_.limits; }

 private:
  // `path` resolved beneath the caller's roots (and, for a user of the
  // policy, out of the state directory but for the job's own directory).
  // `read_only`: a path the job only reads (resume_from), which may also
  // lie in the directory of another job of the same owner.
  absl::StatusOr<std::string> ResolveFor(const std::string& path, const std::string& job_id, const Caller& by,
                                         bool read_only = false) const;

  const AdmissionOptions options_;
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_JOBS_ADMISSION_H_
