#include "server/launch/slurm_batch.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/worker_outcome.h"

namespace trainyard {

std::string SlurmJobName(const std::string& job_id, int32_t attempt) {
  return absl::StrCat("trainyard-", job_id, "-a", attempt);
}

std::string SlurmRankJobName(const std::string& job_id, int32_t attempt, int32_t rank, int32_t n) {
  return absl::StrCat("trainyard-", job_id, "-a", attempt, "-r", rank, "-", n);
}

std::string RankExitFile(const std::string& log_dir, int32_t rank, int32_t n) {
  return n == 0 ? absl::StrCat(log_dir, "/rank-", rank, ".exit")
                : absl::StrCat(log_dir, "/rank-", rank, "-", n, ".exit");
}

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::string RankWrapperScript() {
  return "#!/bin/sh\n"
         "# One rank of a trainyard job: runs the worker, forwards INT/TERM to it and\n"
         "# records its exit code for trainyard-server.\n"
         "rank=${TRAINYARD_RANK:-$SLURM_PROCID}\n"
         "\"$@\" &\n"
         "pid=$!\n"
         "echo \"${SLURMD_NODENAME:-$(hostname)} $pid\" > \"$TRAINYARD_EXIT_DIR/rank-$rank.pid\"\n"
         "trap 'kill -INT $pid 2>/dev/null' INT\n"
         "trap 'kill -TERM $pid 2>/dev/null' TERM\n"
         "while :; do\n"
         "  wait $pid; rc=$?\n"
         "  kill -0 $pid 2>/dev/null || break\n"
         "done\n"
         "f=\"${TRAINYARD_EXIT_FILE:-$TRAINYARD_EXIT_DIR/rank-$SLURM_PROCID.exit}\"\n"
         "echo $rc > \"$f.tmp\" && mv \"$f.tmp\" \"$f\"\n"
         "exit $rc\n";
}

std::string BatchScript(const LaunchRequest& r, const std::string& rank_script, const std::string& worker_binary,
                        const std::vector<std::string>& extra_worker_args, BatchRanks ranks) {
  std::vector<std::string> worker = {
      rank_script,     worker_binary,
      "--job",         r.job_id,
      "--world-size",  std::to_string(r.world_size),
      "--attempt",     std::to_string(r.attempt),
      "--master-port", std::to_string(r.master_port),
      "--server",      r.coordinator_addr,
      "--threads",     std::to_string(r.threads_per_process),
  };
  if (!r.master_addr.empty()) {
    worker.push_back("--master-addr");
    worker.push_back(r.master_addr);
  }
  if (r.replica_store) worker.push_back("--replica-store");
  for (const auto& a : extra_worker_args) worker.push_back(a);
  std::vector<std::string> quoted;
  for (const auto& a : worker) quoted.push_back(ShellQuote(a));
  std::string name = r.job_name;
  std::replace(name.begin(), name.end(), '\n', ' ');
  const bool one = ranks.rank >= 0;
  std::string env = absl::StrCat("export TRAINYARD_EXIT_DIR=", ShellQuote(r.log_dir), "\n");
  if (one) {
    absl::StrAppend(&env, "export TRAINYARD_RANK=", ranks.rank, "\n",
                    "export TRAINYARD_EXIT_FILE=", ShellQuote(RankExitFile(r.log_dir, ranks.rank, ranks.n)), "\n");
  }
  return absl::StrCat(
      "#!/bin/sh\n", "# trainyard job ", r.job_id, " attempt ", r.attempt, " (", name, ")",
      one ? absl::StrCat(", replacement ", ranks.n, " of rank ", ranks.rank) : "", ", submitted by trainyard-server.\n",
      one ? "# One task: the rank is TRAINYARD_RANK.\n"
          : "# One task per rank: rank = SLURM_PROCID, rendezvous on the step's first node.\n",
      env, "srun --kill-on-bad-exit=0 ", r.replica_store ? "--no-kill " : "", r.cuda ? "--gpus-per-task=1 " : "",
      "--open-mode=append --output=",
      ShellQuote(one ? absl::StrCat(r.log_dir, "/rank-", ranks.rank, ".log") : r.log_dir + "/rank-%t.log"), " \\\n  ",
      absl::StrJoin(quoted, " "), "\n", "rc=$?\n",
      "# A failed step may have lost a node. A batch job that ends by itself then\n"
      "# holds its healthy nodes until Slurm marks the lost one down; cancelled, it\n"
      "# lets them go at once. trainyard-server cancels it once it knows how every\n"
      "# rank ended: wait for that, a while at most.\n",
      "# Not after a preemption (every rank checkpointed and exited ", kExitPreempted, "): nothing was lost.\n",
      "if [ \"$rc\" -ne 0 ] && [ \"$rc\" -ne ", kExitPreempted, " ]; then\n", "  sleep ", kFailedStepLingerSeconds,
      " &\n  pid=$!\n", "  trap 'kill \"$pid\" 2>/dev/null; exit \"$rc\"' INT TERM\n", "  wait \"$pid\"\n", "fi\n",
      "exit \"$rc\"\n");
}

int64_t SignalLeadSeconds(const LaunchRequest& r) {
  return std::clamp<int64_t>(static_cast<int64_t>(r.preemption_grace_s), 1, 65535);
}

std::vector<std::string> SbatchArgs(const LaunchRequest& r, const SlurmLauncherOptions& o, const std::string& sbatch,
                                    const std::string& script, BatchRanks ranks) {
  const bool one = ranks.rank >= 0;
  const int32_t tasks = one ? 1 : r.world_size;
  const int32_t nodes = one ? 1 : std::max(1, r.slurm.nodes);
  std::vector<std::string> args = {
      sbatch, "--parsable",
      "--job-name=" +
          (one ? SlurmRankJobName(r.job_id, r.attempt, ranks.rank, ranks.n) : SlurmJobName(r.job_id, r.attempt)),
      absl::StrCat("--ntasks=", tasks), absl::StrCat("--nodes=", nodes),
      absl::StrCat("--cpus-per-task=", r.threads_per_process), "--output=" + r.log_dir + "/slurm-%j.out",
      // Workers checkpoint and exit on SIGTERM: give them the grace before
      // the time limit (preemption sends SIGTERM too).
      absl::StrCat("--signal=TERM@", SignalLeadSeconds(r)), r.preemptible ? "--requeue" : "--no-requeue"};
  // Replicas go on when a node is lost: the allocation is not ended.
  if (r.replica_store) args.push_back("--no-kill");
  // Ranks spread evenly: a HYBRID shard group is a node's ranks.
  if (nodes > 1 && tasks % nodes == 0) args.push_back(absl::StrCat("--ntasks-per-node=", tasks / nodes));
  // Each rank a GPU of its own: the node's GPUs, one per task (srun
  // --gpus-per-task=1), so CUDA_VISIBLE_DEVICES holds the rank's alone.
  if (r.cuda) args.push_back(absl::StrCat("--gres=gpu:", (tasks + nodes - 1) / nodes));
  const std::string partition = r.slurm.partition.empty() ? o.partition : r.slurm.partition;
  const std::string account = r.slurm.account.empty() ? o.account : r.slurm.account;
  if (!r.exclude_nodes.empty()) args.push_back("--exclude=" + absl::StrJoin(r.exclude_nodes, ","));
  if (!partition.empty()) args.push_back("--partition=" + partition);
  if (!account.empty()) args.push_back("--account=" + account);
  if (!r.slurm.qos.empty()) args.push_back("--qos=" + r.slurm.qos);
  if (!r.slurm.time_limit.empty()) args.push_back("--time=" + r.slurm.time_limit);
  if (!r.slurm.constraint.empty()) args.push_back("--constraint=" + r.slurm.constraint);
  for (const auto& a : o.extra_sbatch_args) args.push_back(a);
  for (const auto& a : r.slurm.extra_args) args.push_back(a);
  args.push_back(script);
  return args;
}

}  // namespace trainyard
