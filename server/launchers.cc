#include "server/launchers.h"

namespace trainyard {

Launcher* Launchers::Get(LauncherKind kind) const {
  if (kind == LauncherKind::kExternal) return nullptr;
  auto it = launchers_.find(kind);
  return it == launchers_.end() ? nullptr : it->second;
}

LaunchRequest Launchers::RequestFor(const ActiveJob& job, LauncherKind kind, const LaunchContext& context) {
  const JobRecord& r = job.record;
  LaunchRequest req;
  req.job_id = r.id;
  req.attempt = r.attempt;
  req.world_size = r.num_processes;
  req.master_addr = job.attempt->master_addr();
  req.master_port = job.attempt->master_port();
  req.coordinator_addr = kind == LauncherKind::kLocal ? context.coordinator_addr : context.remote_coordinator_addr;
  req.token = r.worker_token;
  req.log_dir = context.log_dir;
  req.threads_per_process = job.spec.threads_per_process;
  req.job_name = job.spec.name;
  req.cuda = job.spec.device == Device::kCuda;
  req.gpus = context.gpus;
  req.preemptible = job.spec.preemptible;
  req.preemption_grace_s = job.spec.preemption_grace_s;
  req.slurm = job.spec.slurm;
  return req;
}

absl::Status Launchers::Launch(const ActiveJob& job, LauncherKind kind, const LaunchContext& context) const {
  Launcher* l = Get(kind);
  if (l == nullptr) return absl::FailedPreconditionError("no launcher");
  return l->Launch(RequestFor(job, kind, context));
}

void Launchers::Adopt(const ActiveJob& job, LauncherKind kind, const LaunchContext& context) const {
  if (Launcher* l = Get(kind)) l->Adopt(RequestFor(job, kind, context));
}

void Launchers::Stop(const ActiveJob& job, LauncherKind kind) const {
  if (kind == LauncherKind::kExternal) {
    // No process of ours: the workers stop on the command; ranks that are
    // not connected are accounted for by Attempt::LostRanks.
    if (job.attempt) job.attempt->Broadcast({WorkerCommand::Kind::kStop, "the attempt is stopping"});
    return;
  }
  if (Launcher* l = Get(kind)) l->Stop(job.record.id, job.record.attempt);
}

}  // namespace trainyard
