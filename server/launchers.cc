#include "server/launchers.h"

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
  req.master_addr = job.attempt->master_addr();
  req.master_port = job.attempt->master_port();
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
  req.replica_store = job.spec.replicas();
  if (const Membership* m = job.attempt->membership()) req.start_ranks = m->running();
  return req;
}

absl::Status Launchers::Launch(const ActiveJob& job, const LaunchContext& context) const {
  Launcher* l = Get(KindOf(job.spec));
  if (l == nullptr) return absl::FailedPreconditionError("no launcher");
  return l->Launch(RequestFor(job, l->traits(), context));
}

absl::Status Launchers::LaunchRank(const ActiveJob& job, const LaunchContext& context, int32_t rank) const {
  Launcher* l = Get(KindOf(job.spec));
  if (l == nullptr) return absl::FailedPreconditionError("no launcher");
  return l->LaunchRank(RequestFor(job, l->traits(), context), rank);
}

void Launchers::Adopt(const ActiveJob& job, const LaunchContext& context) const {
  if (Launcher* l = Get(KindOf(job.spec))) l->Adopt(RequestFor(job, l->traits(), context));
}

void Launchers::Stop(const ActiveJob& job) const {
  if (Launcher* l = Get(KindOf(job.spec))) l->Stop(job.record.id, job.record.attempt);
}

}  // namespace trainyard
