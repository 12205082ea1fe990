// Trainctl: the commands of the `trainctl` CLI, over one gRPC channel to the
// coordinator. Each command prints to the given streams and returns the
// process exit code: 0 success; 1 the job ended other than as asked
// (watch: not SUCCEEDED; cancel: not CANCELLED); 2 the request failed (server
// unreachable, or it refused the request). Not thread-safe.
#ifndef TRAINYARD_CLIENT_TRAINCTL_H_
#define TRAINYARD_CLIENT_TRAINCTL_H_

#include <chrono>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

namespace trainyard {

// kCsv: `trainctl history` only.
enum class OutputFormat { kTable, kJson, kCsv };

struct TrainctlOptions {
  std::string server = "127.0.0.1:50051";
  std::chrono::seconds rpc_timeout{30};
  OutputFormat output = OutputFormat::kTable;
  // Sent as "authorization: Bearer <token>" on every call (empty: none).
  std::string token;
  // PEM of the CA that signed the server's certificate: TLS (empty: plain).
  std::string ca_pem;
  // For a server that requires client certificates (mutual TLS).
  std::string cert_pem, key_pem;
};

class Trainctl {
 public:
  Trainctl(TrainctlOptions options, std::ostream& out, std::ostream& err);
  ~Trainctl();

  // Submits the spec in `file`; with `accelerate_config_file`, also that
  // Accelerate config (YAML), whose keys win over the spec's.
  // `sets`: "KEY=VALUE" overrides of the spec's fields (ApplySpecOverrides).
  int Submit(const std::string& file, bool watch, const std::string& accelerate_config_file = "",
             const std::vector<std::string>& sets = {});
  // torchrun's and `ray job submit`'s shape: runs `script` (a Python file
  // on the server's host) with `args` as a job of `nproc` ranks named
  // `name` (default: the script's name), then watches it when `watch`.
  // `sets` as Submit's.
  int Run(const std::string& script, const std::vector<std::string>& args, int nproc, const std::string& name,
          bool watch, const std::vector<std::string>& sets = {});
  // Every job (in `state_filter`, when given), newest first, as kubectl
  // and squeue show them, following the server's pages; at most `limit` of
  // them (0: all): the newest. `all_users`: everyone's jobs (admins; group
  // members where the server allows it), not only the caller's.
  // `name_contains`: only jobs whose name holds it; `owner`: only that
  // user's jobs (among everyone's: it implies `all_users`).
  int List(const std::string& state_filter, int64_t limit = 0, bool all_users = false,
           const std::string& name_contains = "", const std::string& owner = "");
  // Removes ended jobs from the server's records (`trainctl delete`, as
  // kubectl's): each job's record, events, checkpoint entries and history.
  // Their files (checkpoints, logs) stay on disk. Every id is tried; 2 when
  // one was refused (not ended, not the caller's, unknown).
  int Delete(const std::vector<std::string>& ids);
  // The waiting jobs in the order they start: position, owner, priority,
  // estimated start and why each waits.
  int Queue(bool all_users = false);
  // A running job's ranks come a page at a time (`rank_page_size`, 0: the
  // server's 256, from `rank_page_token`); `all_ranks`: every page.
  int Get(const std::string& id, int rank_page_size = 0, const std::string& rank_page_token = "",
          bool all_ranks = false);
  // `printed_state` (a v1::JobState; 0: none): the state the caller has
  // just printed, whose line the watch does not repeat.
  int Watch(const std::string& id, int printed_state = 0);
  // With `checkpoint`, the job saves a checkpoint at its next step boundary
  // and then stops.
  int Cancel(const std::string& id, bool wait, bool checkpoint = false);
  // Grows or shrinks a running elastic job to `num_processes` ranks; with
  // `wait`, returns once exactly that many train together (within
  // `wait_for`; 1 when it did not).
  int Scale(const std::string& id, int num_processes, bool wait, std::chrono::seconds wait_for);
  // type: "auto" (the job's own), "full" or "sharded". With `wait`, returns
  // when the checkpoint is complete and prints its path (within `wait_for`).
  int Checkpoint(const std::string& id, const std::string& type, bool wait, std::chrono::seconds wait_for);
  int Checkpoints(const std::string& id);
  // Starts an ended job again from `from` (or its latest checkpoint) with
  // num_processes (0: as before); with `watch`, follows it.
  int Resume(const std::string& id, const std::string& from, int num_processes, bool watch);
  // Prints what workers of a launcher: external job need to join it: the
  // token (secret) and world size, with the command to run on each host.
  int JoinInfo(const std::string& id);
  // `trainctl logs`, as `kubectl logs`: one attempt's log (0: the latest)
  // or every attempt's, its last `tail_lines` lines (-1: all it got), at
  // most `limit_bytes` from its end (0: the server's 1 MiB); `follow` prints
  // what the rank writes until the job ends.
  struct LogsOptions {
    int rank = 0;
    int attempt = 0;
    bool all_attempts = false;
    bool follow = false;
    int64_t tail_lines = -1;
    int64_t limit_bytes = 0;
  };
  int Logs(const std::string& id, const LogsOptions& options);
  // Asks every rank of a running job for its flight recorder (waiting up to
  // `wait` for their answers) and prints which rank is behind and at which
  // collective, then each rank's phase and its last `last_collectives`.
  int Diagnose(const std::string& id, std::chrono::milliseconds wait, int last_collectives);
  // A job's series (`series`: these only; empty: all) across its attempts,
  // with its events: a summary per series and the events (table), every
  // point as series,step,unix_millis,value (csv), or all of it (json).
  // Several jobs: csv gains a first column, job; json is a list; the
  // table prints each job's under a "==> ID <==" line.
  int History(const std::vector<std::string>& ids, const std::vector<std::string>& series);

  // Sweeps (client/trainctl_sweep.cc). Submit says what it submitted (its
  // id alone with `quiet`), and with `watch` follows it until it ends (0:
  // SUCCEEDED). Cancel stops every trial (all but the best so far with
  // `keep_best`) and, with `wait`, returns once their jobs ended; a sweep
  // that had ended is 1 with a message.
  int SweepSubmit(const std::string& file, bool watch, bool quiet = false);
  int SweepWatch(const std::string& id);
  int SweepGet(const std::string& id);
  int SweepList(bool all_users);
  int SweepCancel(const std::string& id, bool keep_best, bool wait = true);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainyard

#endif  // TRAINYARD_CLIENT_TRAINCTL_H_
