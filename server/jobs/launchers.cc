#include "server/jobs/launchers.h"

#include <filesystem>

#include "absl/strings/str_cat.h"

namespace trainyard {

Launcher* Launchers::Get(LauncherKind kind) const {
  auto it = launchers_.find(kind);
  return it == launchers_.end() ? nullptr : it->second;
}

Launcher::Traits Launchers::TraitsOf(const JobSpec& spec) const {
  Launcher* l = Get(KindOf(spec));
  return l == nullptr ? Launcher::Traits{} : l->traits();
}

LaunchRequest Launchers::RequestFor(const ActiveJob& job, const Launcher::Traits& traits,
                                    const LaunchContext& context) {
  const JobRecord& r = job.record;
  LaunchRequest req;
  req.job_id = r.id;
  req.attempt = r.attempt;
  req.world_size = r.num_processes;
  req.master_addr = job.attempt->place().master_addr;
  req.master_port = job.attempt->place().master_port;
  req.coordinator_addr = traits.on_this_host ? context.coordinator_addr : context.remote_coordinator_addr;
  req.token = r.worker_token;
  req.log_dir = context.log_dir;
  req.threads_per_process = job.spec.threads_per_process;
  req.job_name = job.spec.name;
  req.cuda = job.spec.device == Device::kCuda;
  req.gpus = context.gpus;
  req.preemptible = job.spec.preemptible;
  req.preemption_grace_s = job.spec.preemption_grace_s;
  req.slurm = job.spec.slurm;
  req.exclude_nodes.assign(job.lost_nodes.begin(), job.lost_nodes.end());
  req.replica_store = job.spec.replicas();
  req.start_ranks = job.attempt->supervisor().running(job.attempt->world_size());
  req.default_project =
      std::filesystem::path(job.spec.checkpoint.project_dir) == std::filesystem::path(context.log_dir).parent_path();
  return req;
}

namespace {

// The request with the job's account resolved (by name, now: a uid that
// changed since the submission is the account's new one).
absl::StatusOr<LaunchRequest> WithAccount(const ActiveJob& job, LaunchRequest req) {
  if (job.record.run_as.empty()) return req;
  absl::StatusOr<UnixAccount> a = LookupUnixAccount(job.record.run_as);
  if (!a.ok()) return absl::FailedPreconditionError(absl::StrCat("the job's account: ", a.status().message()));
  req.run_as = *std::move(a);
  return req;
}

}  // namespace

absl::Status Launchers::Launch(const ActiveJob& job, const LaunchContext& context) const {
  Launcher* l = Get(KindOf(job.spec));
  if (l == nullptr) return absl::FailedPreconditionError("no launcher");
  absl::StatusOr<LaunchRequest> req = WithAccount(job, RequestFor(job, l->traits(), context));
  if (!req.ok()) return req.status();
  return l->Launch(*req);
}

absl::Status Launchers::LaunchRank(const ActiveJob& job, const LaunchContext& context, int32_t rank) const {
  Launcher* l = Get(KindOf(job.spec));
  if (l == nullptr) return absl::FailedPreconditionError("no launcher");
  absl::StatusOr<LaunchRequest> req = WithAccount(job, RequestFor(job, l->traits(), context));
  if (!req.ok()) return req.status();
  return l->LaunchRank(*req, rank);
}

std::string Launchers::ExternalIdOf(const ActiveJob& job) const {
  Launcher* l = Get(KindOf(job.spec));
  return l == nullptr ? "" : l->ExternalId(job.record.id, job.record.attempt);
}

void Launchers::Adopt(const ActiveJob& job, const LaunchContext& context) const {
  if (Launcher* l = Get(KindOf(job.spec))) l->Adopt(RequestFor(job, l->traits(), context));
}

void Launchers::Stop(const ActiveJob& job) const {
  if (Launcher* l = Get(KindOf(job.spec))) l->Stop(job.record.id, job.record.attempt);
}

}  // namespace trainyard
