#include "server/jobs/admission.h"

#include "common/webhook_url.h"

#include <filesystem>

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/accelerate_config.h"
#include "common/checkpoint_dir.h"
#include "common/llama_config.h"
#include "common/paths.h"
#include "server/auth/access.h"

namespace trainyard {

AdmissionOptions AdmissionOptionsOf(const JobManagerOptions& o) {
  std::error_code ec;
  const std::string state_dir = std::filesystem::absolute(o.state_dir, ec).lexically_normal().string();
  return {o.slots,
          o.gpus * o.ranks_per_gpu,
          state_dir,
          o.allowed_roots.empty() ? std::vector<std::string>{state_dir, std::filesystem::current_path(ec).string()}
                                  : o.allowed_roots,
          o.script_python,
          o.limits,
          o.max_queued_jobs,
          o.notify_allowed_hosts};
}

absl::StatusOr<Admitted> Admission::Admit(const std::string& spec_text, const std::string& accelerate_config,
                                          const Caller& by, const std::string& job_id, const AdmissionState& now,
                                          const AdmissionFiles* files) const {
  Admitted a;
  absl::StatusOr<JobSpec> spec = absl::UnknownError("not parsed");
  if (files != nullptr && files->spec) {
    spec = *files->spec;
    a.notes = files->notes;
  } else {
    spec = ParseJobSpecWithAccelerateConfig(spec_text, accelerate_config, options_.limits, &a.notes);
  }
  if (!spec.ok()) return spec.status();
  if (spec->launcher == LauncherKind::kDefault) spec->launcher = now.launchers.default_kind();
  if (auto s = CheckResources(*spec, now.launchers); !s.ok()) return s;
  for (size_t i = 0; i < spec->notify.urls.size(); ++i) {
    auto url = ParseWebhookUrl(spec->notify.urls[i]);
    if (!url.ok()) continue;  // the parser said so already
    if (absl::Status s = CheckWebhookHost(url->host, options_.notify_allowed_hosts); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("notify.urls[", i, "]: ", s.message()));
    }
  }
  if (now.queued >= options_.max_queued_jobs) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the queue already holds ", now.queued, " jobs (the limit); try again later"));
  }
  if (now.shutting_down) return absl::UnavailableError("the server is shutting down");
  absl::StatusOr<int64_t> priority = PriorityFor(now.policy, by, spec->priority);
  if (!priority.ok()) return priority.status();
  if (auto s = CheckQueuedJobs(now.policy, by, now.queued_of_caller); !s.ok()) return s;
  const Launcher::Traits traits = now.launchers.TraitsOf(*spec);
  if (auto s = CheckAccount(*spec, now.policy, by, traits); !s.ok()) return s;
  if (files != nullptr && files->paths) {
    if (!files->paths->ok()) return *files->paths;  // resolved in ReadFiles, without the lock
  } else if (auto s = ResolvePaths(*spec, job_id, traits, by); !s.ok()) {
    return s;
  }
  if (auto s = CheckModel(*spec, traits, files, RootsOf(by)); !s.ok()) return s;
  for (std::string& w : a.notes) w = "accelerate config: " + w;
  a.spec = *std::move(spec);
  a.priority = *priority;
  return a;
}

absl::Status Admission::CheckAccount(const JobSpec& spec, const Policy& policy, const Caller& by,
                                     const Launcher::Traits& traits) const {
  if (by.unix_user.empty()) {
    // On a server that runs its users' jobs as their own accounts, a user
    // without one would run as the server's (root): only where the operator
    // said users share it.
    if (!by.user.empty() && !by.admin && !policy.shared_account && policy.SwitchesAccounts()) {
      return absl::PermissionDeniedError(absl::StrCat(
          by.Describe(),
          " has no unix_user in the server's policy, and this server runs its users' jobs as their own accounts: "
          "theirs would run as the server's own (an operator maps the user to one with unix_user, names an "
          "unprivileged account for everyone without one with default_unix_user, or sets shared_account: true)"));
    }
    // A script is anyone's code: under users, it runs as the server's own
    // account only where the operator said users share one.
    if (!spec.script.empty() && !by.user.empty() && !by.admin && !policy.shared_account) {
      return absl::PermissionDeniedError(
          absl::StrCat("spec field 'script': ", by.Describe(),
                       " has no unix_user in the server's policy, and scripts run as their owner's own account (an "
                       "operator may map the user to one, or set shared_account: true to run every such user's scripts "
                       "as the server's account)"));
    }
    return absl::OkStatus();
  }
  if (!traits.on_this_host) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec field 'launcher': ", by.Describe(), " runs jobs as account ", by.unix_user,
                     ", which only the local launcher does on this server (its ranks start on this host)"));
  }
  return absl::OkStatus();
}

absl::Status Admission::CheckResources(const JobSpec& spec, const Launchers& launchers) const {
  const LauncherKind kind = launchers.KindOf(spec);
  Launcher* launcher = launchers.Get(kind);
  if (launcher == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec field 'launcher': ", LauncherKindName(kind), " is not available on this server"));
  }
  if (auto s = launcher->Available(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("spec field 'launcher': ", s.message()));
  }
  if (spec.replicas() && !launcher->traits().replaces_ranks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "spec field 'fault_tolerance.mode': replica fault tolerance runs under the local, slurm and external "
        "launchers; launcher ",
        LauncherKindName(kind), " cannot replace one rank alone (use fault_tolerance.mode whole_group)"));
  }
  if (spec.elastic.enabled() && !launcher->traits().on_this_host) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec field 'elastic.min_processes': elastic jobs run under the "
                     "local launcher, whose slots the scheduler grows and shrinks them "
                     "by; launcher ",
                     LauncherKindName(kind), " has none"));
  }
  if (!launcher->traits().on_this_host) return absl::OkStatus();  // the cluster's scheduler (or nobody) decides
  if (spec.slurm.nodes > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec field 'slurm.nodes': ", spec.slurm.nodes,
                     " nodes need launcher slurm or external; the local launcher runs on one host"));
  }
  if (spec.device == Device::kCuda) {
    if (spec.num_processes > options_.gpus) {
      return absl::InvalidArgumentError(absl::StrCat(
          "spec field 'device': cuda needs one GPU per process (", spec.num_processes, "); this server has ",
          options_.gpus,
          options_.gpus == 0 ? " (no GPU found; --gpus N sets the count)" : " (--gpus times --ranks-per-gpu)",
          ". device: cpu runs on CPU slots"));
    }
    return absl::OkStatus();
  }
  if (spec.num_processes > options_.slots) {
    return absl::InvalidArgumentError(absl::StrCat("spec field 'num_processes': ", spec.num_processes,
                                                   " exceeds this server's ", options_.slots,
                                                   " slots (start the server with --slots N to allow more)"));
  }
  return absl::OkStatus();
}

std::vector<std::string> Admission::RootsOf(const Caller& by) const {
  if (!by.user.empty() && !by.admin) return by.roots;
  return by.roots.empty() ? options_.allowed_roots : by.roots;
}

absl::StatusOr<std::string> Admission::ResolveFor(const std::string& path, const std::string& job_id, const Caller& by,
                                                  bool read_only) const {
  std::vector<std::string> roots = RootsOf(by);
  const bool user = !by.user.empty() && !by.admin;
  std::string own = absl::StrCat(options_.state_dir, "/jobs/", job_id);
  if (user && read_only && options_.owner_of) {
    // Another job of the same owner: <state_dir>/jobs/<id>/...
    std::error_code ec;
    const std::string jobs_dir = std::filesystem::weakly_canonical(options_.state_dir + "/jobs", ec).string() + "/";
    const std::string canonical = std::filesystem::weakly_canonical(path, ec).string();
    if (!ec && canonical.rfind(jobs_dir, 0) == 0) {
      const std::string other =
          canonical.substr(jobs_dir.size(), canonical.find('/', jobs_dir.size()) - jobs_dir.size());
      if (!other.empty() && other != job_id && options_.owner_of(other) == by.user) {
        own = jobs_dir + other;
      }
    }
  }
  // The job's own directory first: it is no root to name in a refusal (a
  // refused job's directory is never made), nor is the server's flag the
  // way to widen a policy user's roots.
  absl::StatusOr<std::string> resolved = absl::NotFoundError("");
  if (user) resolved = ResolveUnderRoots(path, {own});
  if (!resolved.ok()) {
    resolved = user ? ResolveUnderRoots(path, roots,
                                        absl::StrCat("an operator may add a directory to the roots of user ", by.user,
                                                     " in the server's policy file"))
                    : ResolveUnderRoots(path, roots);
  }
  if (!resolved.ok()) {
    if (user && by.roots.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": ", by.Describe(),
                                                     " has no roots in the server's policy: their jobs may name no "
                                                     "path (an operator gives them roots: [DIR...])"));
    }
    return resolved.status();
  }
  if (user && IsPathUnder(*resolved, options_.state_dir) && !IsPathUnder(*resolved, own)) {
    return absl::InvalidArgumentError(absl::StrCat(path, " lies in the server's state directory (", options_.state_dir,
                                                   "), which no user's job may name"));
  }
  return resolved;
}

namespace {

// What writes the file a spec field names, for the error that it is missing.
std::string MakerHint(const JobSpec& spec, std::string_view field) {
  if (field == "model.kind" && spec.model.kind == ModelKind::kTorchScript) {
    return " (save one with torch.jit.script(module).save(PATH); examples/export_torchscript.py does)";
  }
  if (field == "model.init_from" && spec.model.kind != ModelKind::kLlama) {
    return " (a safetensors file or directory; examples/make_finetune_inputs.py writes one)";
  }
  if (field == "data.kind" && spec.data.kind == DataKind::kTensors) {
    return " (safetensors files of tensors; examples/make_finetune_inputs.py writes them)";
  }
  if (field == "data.kind" && spec.data.kind == DataKind::kImageFolder) {
    return " (a folder of one folder of images per class; examples/make_image_folder.py makes one)";
  }
  if (field == "model.config" || field == "model.init_from") {
    return " (a Hugging Face model directory; examples/make_llama_inputs.py makes a small one)";
  }
  return "";
}

}  // namespace

absl::Status Admission::ResolvePaths(JobSpec& spec, const std::string& job_id, const Launcher::Traits& traits,
                                     const Caller& by) const {
  CheckpointSpec& c = spec.checkpoint;
  // The default project directory is the server's choice, under its state
  // directory (a resumed job's is its own directory again).
  const std::string own = absl::StrCat(options_.state_dir, "/jobs/", job_id);
  std::error_code ec;
  const bool chosen_here = c.project_dir.empty() || std::filesystem::weakly_canonical(c.project_dir, ec) ==
                                                        std::filesystem::weakly_canonical(own, ec);
  if (chosen_here) c.project_dir = own;
  auto dir =
      chosen_here ? ResolveUnderRoots(c.project_dir, {options_.state_dir}) : ResolveFor(c.project_dir, job_id, by);
  if (!dir.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("spec field 'checkpoint.project_dir': ", dir.status().message()));
  }
  c.project_dir = *dir;
  // The files a job reads.
  for (auto [field, path] : {std::pair<const char*, std::string*>{"model.kind", &spec.model.path},
                             {"model.config", &spec.model.config},
                             {"model.init_from", &spec.model.init_from},
                             {"data.kind", &spec.data.path},
                             {"data.eval_path", &spec.data.eval_path}}) {
    if (path->empty()) continue;
    auto resolved = ResolveFor(*path, job_id, by);
    if (!resolved.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("spec field '", field, "': ", resolved.status().message()));
    }
    *path = *resolved;
    // The local launcher's ranks read them on this host: a missing one is
    // refused now, with what makes it, not found after launch.
    if (traits.on_this_host && !std::filesystem::exists(*path, ec)) {
      return absl::InvalidArgumentError(absl::StrCat("spec field '", field, "': ", *path,
                                                     " does not exist on this host, where the local launcher ",
                                                     "runs the job", MakerHint(spec, field)));
    }
  }
  if (!spec.script.empty()) {
    for (auto [field, path] : {std::pair<const char*, std::string*>{"script.path", &spec.script.path},
                               {"script.working_dir", &spec.script.working_dir}}) {
      if (path->empty()) continue;
      auto resolved = ResolveFor(*path, job_id, by);
      if (!resolved.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("spec field '", field, "': ", resolved.status().message()));
      }
      *path = *resolved;
    }
    // The local launcher runs the script on this host: a missing one is
    // refused now, not found at launch (other launchers' hosts may differ).
    std::error_code ec;
    if (traits.on_this_host && !std::filesystem::is_regular_file(spec.script.path, ec)) {
      return absl::InvalidArgumentError(
          absl::StrCat("spec field 'script.path': ", spec.script.path,
                       std::filesystem::exists(spec.script.path, ec) ? " is not a regular file" : " does not exist",
                       " on this host, where the local launcher runs the script"));
    }
    if (spec.script.python.empty()) spec.script.python = options_.script_python;
  }
  if (!c.resume_from.empty() && c.resume_from != "latest") {
    auto from = ResolveFor(c.resume_from, job_id, by, /*read_only=*/true);
    if (!from.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("spec field 'checkpoint.resume_from': ", from.status().message()));
    }
    c.resume_from = *from;
  }
  return absl::OkStatus();
}

AdmissionFiles Admission::ReadFiles(const std::string& spec_text, const std::string& accelerate_config,
                                    const Caller& by, const std::string& job_id, const Launchers* launchers) const {
  AdmissionFiles files;
  files.spec = ParseJobSpecWithAccelerateConfig(spec_text, accelerate_config, options_.limits, &files.notes);
  if (launchers != nullptr && files.spec->ok()) {
    JobSpec& resolved = **files.spec;
    if (resolved.launcher == LauncherKind::kDefault) resolved.launcher = launchers->default_kind();
    files.paths = ResolvePaths(resolved, job_id, launchers->TraitsOf(resolved), by);
  }
  const absl::StatusOr<JobSpec>& spec = *files.spec;
  if (!spec.ok() || spec->model.kind != ModelKind::kLlama) return files;
  const std::vector<std::string> roots = RootsOf(by);
  auto source = ResolveUnderRoots(LlamaConfigSource(spec->model), roots);
  if (!source.ok()) return files;
  files.llama_config = ReadLlamaConfig(*source, roots);
  return files;
}

absl::Status Admission::CheckModel(const JobSpec& spec, const Launcher::Traits& traits, const AdmissionFiles* files,
                                   const std::vector<std::string>& roots) const {
  if (spec.model.kind != ModelKind::kLlama) return absl::OkStatus();
  const char* field = spec.model.config.empty() ? "model.init_from" : "model.config";
  absl::StatusOr<LlamaConfig> config = files != nullptr && files->llama_config
                                           ? *files->llama_config
                                           : ReadLlamaConfig(LlamaConfigSource(spec.model), roots);
  if (!config.ok()) {
    if (absl::IsNotFound(config.status()) && traits.ranks_join) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("spec field '", field, "': ", config.status().message()));
  }
  if (auto s = CheckLlamaContext(*config, spec.model.context); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("spec field 'model.context': ", s.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<JobSpec> Admission::ForResume(const std::string& stored_spec_json, const std::string& job_id,
                                             const std::string& from, int32_t num_processes, const Launchers& launchers,
                                             const Caller& by) const {
  const SpecLimits& limits = options_.limits;
  auto spec = ParseJobSpec(stored_spec_json, limits);
  if (!spec.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("stored spec no longer valid: ", spec.status().message()));
  }
  if (num_processes < 0) {
    return absl::InvalidArgumentError(absl::StrCat("num_processes must be >= 1 (0: keep), got ", num_processes));
  }
  if (num_processes > 0) spec->num_processes = num_processes;
  if (auto s = ValidateJobSpec(*spec, limits); !s.ok()) return s;
  if (auto s = CheckResources(*spec, launchers); !s.ok()) return s;
  spec->checkpoint.resume_from = from.empty() ? "latest" : from;
  const Launcher::Traits traits = launchers.TraitsOf(*spec);
  if (auto s = ResolvePaths(*spec, job_id, traits, by); !s.ok()) return s;
  if (auto s = CheckModel(*spec, traits, nullptr, RootsOf(by)); !s.ok()) return s;
  if (!from.empty()) {
    auto info = CheckCheckpoint(spec->checkpoint.resume_from, /*verify=*/false);
    if (!info.ok()) return absl::InvalidArgumentError(std::string(info.status().message()));
  }
  return spec;
}

}  // namespace trainyard
