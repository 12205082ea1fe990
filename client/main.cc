// trainctl: submit, list, inspect, watch, cancel, checkpoint, resume,
// diagnose and read logs of jobs.
#include <CLI/CLI.hpp>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include "client/trainctl.h"
#include "common/command_line.h"
#include "common/leader_hint.h"
#include "common/paths.h"

namespace {

// A check whose limits the option's description says in words: CLI11's own
// text of it ("INT:INT in [0 - 1099511627776]") is left out of --help.
CLI::Validator Quiet(CLI::Validator check) {
  check.description("");
  return check;
}

}  // namespace

int main(int argc, char** argv) {
  trainyard::TrainctlOptions o;
  if (const char* env = std::getenv("TRAINYARD_SERVER"); env != nullptr && *env != '\0') o.server = env;
  std::string output = "table";
  int timeout_s = static_cast<int>(o.rpc_timeout.count());

  CLI::App app{"trainctl: control a trainyard-server"};
  app.require_subcommand(1);
  // Global options go before or after the subcommand, as kubectl's do:
  // `trainctl get JOB -o json` and `trainctl -o json get JOB`.
  app.fallthrough();
  app.add_option("--server", o.server,
                 "Server address; several, comma-separated, for coordinators of which one leads (env "
                 "TRAINYARD_SERVER)")
      ->type_name("HOST:PORT[,HOST:PORT...]")
      ->capture_default_str();
  app.add_option("-o,--output", output, "Output format")
      ->type_name("FORMAT")
      ->check(CLI::IsMember({"table", "json", "csv"}))
      ->capture_default_str();
  app.add_option("--timeout", timeout_s, "Deadline of each request, 1 to 3600 seconds")
      ->type_name("SECONDS")
      ->capture_default_str()
      ->check(Quiet(CLI::Range(1, 3600)));

  std::string file, id, state;
  bool watch = false, no_wait = false;
  int rank = 0;

  auto* submit = app.add_subcommand("submit", "Submit a job spec (YAML or JSON)");
  submit->add_option("FILE", file, "Job spec file")->type_name("")->required();
  submit->add_flag("-w,--watch", watch, "Watch the job until it ends");
  std::string accelerate_config;
  submit
      ->add_option("--accelerate-config", accelerate_config,
                   "Hugging Face Accelerate config (YAML, as `accelerate config` writes it) applied to the spec")
      ->type_name("FILE");
  std::vector<std::string> sets;
  submit
      ->add_option("--set", sets,
                   "Override a field of the spec: KEY=VALUE, KEY dotted (data.batch_size=32), "
                   "VALUE as YAML; repeat for several")
      ->type_name("KEY=VALUE")
      ->take_all();
  int submit_nproc = 0;
  submit->add_option("--num-processes", submit_nproc, "World size (the spec's num_processes), as torchrun's")
      ->type_name("N")
      ->check(Quiet(CLI::PositiveNumber));
  // torchrun's shape: trainctl run --nproc-per-node 2 train.py -- ARGS.
  auto* run = app.add_subcommand("run",
                                 "Run a Python script as a job (as torchrun): run [--nproc-per-node N] "
                                 "SCRIPT [-- ARGS...]; watches it until it ends");
  int run_nproc = 1;
  std::string run_name;
  bool run_no_watch = false;
  run->add_option("--nproc-per-node,--nproc_per_node,--num-processes", run_nproc, "Ranks (the job's num_processes)")
      ->type_name("N")
      ->capture_default_str()
      ->check(Quiet(CLI::PositiveNumber));
  run->add_option("--name", run_name, "The job's name (default: the script's)")->type_name("NAME");
  run->add_flag("--no-watch", run_no_watch, "Return once submitted");
  run->add_option("--set", sets, "Override a field of the job's spec (as submit --set)")
      ->type_name("KEY=VALUE")
      ->take_all();
  // SCRIPT and everything after it are the script's: nothing falls through
  // to the global options (give those before `run`).
  run->prefix_command();
  run->fallthrough(false);
  auto* list = app.add_subcommand("list", "List jobs");
  list->add_option("--state", state, "Only jobs in this state (QUEUED, RUNNING, SUCCEEDED, FAILED, ...)")
      ->type_name("STATE");
  int64_t list_limit = 0;
  bool all_users = false;
  list->add_flag("-A,--all-users", all_users, "Every user's jobs (admins; your groups' where the server allows it)");
  auto* queue = app.add_subcommand("queue", "Show the waiting jobs in the order they start, with why each waits");
  queue->add_flag("-A,--all-users", all_users, "Every user's waiting jobs, not only yours");
  list->add_option("--limit", list_limit, "The newest N jobs only (default: all, newest first)")
      ->type_name("N")
      ->check(Quiet(CLI::NonNegativeNumber));
  std::string list_name, list_owner;
  list->add_option("--name", list_name, "Only jobs whose name contains this")->type_name("SUBSTRING");
  list->add_option("--owner", list_owner, "Only this user's jobs (among everyone's: implies -A)")->type_name("USER");
  auto* get = app.add_subcommand("get", "Show one job");
  get->add_option("ID", id, "Job id")->type_name("")->required();
  int rank_page_size = 0;
  std::string rank_page_token;
  bool all_ranks = false;
  get->add_option("--rank-page-size", rank_page_size,
                  "Ranks of a running job to show (0: the server's 256; at most 1000 a page)")
      ->type_name("N")
      ->check(Quiet(CLI::NonNegativeNumber));
  get->add_option("--rank-page-token", rank_page_token, "Show the ranks from this token on (printed after a page)")
      ->type_name("TOKEN");
  get->add_flag("--all-ranks", all_ranks, "Show every rank of a running job (all pages)");
  auto* watch_cmd = app.add_subcommand("watch", "Follow a job's progress until it ends");
  watch_cmd->add_option("ID", id, "Job id")->type_name("")->required();
  auto* cancel = app.add_subcommand("cancel", "Cancel a job and wait until its workers stopped");
  cancel->add_option("ID", id, "Job id")->type_name("")->required();
  cancel->add_flag("--no-wait", no_wait, "Return as soon as the cancel was accepted");
  bool with_checkpoint = false;
  cancel->add_flag("--checkpoint", with_checkpoint, "Save a checkpoint at the next step boundary, then stop");
  std::vector<std::string> delete_ids;
  auto* delete_cmd =
      app.add_subcommand("delete",
                         "Remove ended jobs from the list: their records, events, checkpoint entries and history "
                         "(their files stay on disk)");
  delete_cmd->add_option("ID", delete_ids, "Job ids")->type_name("")->required();
  int scale_to = 0, scale_wait_s = 300;
  bool scale_no_wait = false;
  auto* scale = app.add_subcommand(
      "scale", "Grow or shrink a running elastic job (elastic.min_processes) and wait until that many ranks train");
  scale->add_option("ID", id, "Job id")->type_name("")->required();
  scale->add_option("N", scale_to, "Ranks to run with, between elastic.min_processes and num_processes")
      ->type_name("")
      ->required()
      ->check(Quiet(CLI::PositiveNumber));
  scale->add_flag("--no-wait", scale_no_wait, "Return as soon as the change was accepted");
  scale->add_option("--timeout-s", scale_wait_s, "How long to wait for the new size")
      ->type_name("SECONDS")
      ->capture_default_str()
      ->check(Quiet(CLI::PositiveNumber));
  std::string ckpt_type = "auto", from;
  bool wait = false;
  int wait_s = 3600, nproc = 0;
  auto* checkpoint = app.add_subcommand("checkpoint", "Save a checkpoint of a running job; training continues");
  checkpoint->add_option("ID", id, "Job id")->type_name("")->required();
  checkpoint->add_option("--type", ckpt_type, "full, sharded, or auto (the job's checkpoint.type)")
      ->type_name("TYPE")
      ->check(CLI::IsMember(std::vector<std::string>{"auto", "full", "sharded"}))
      ->capture_default_str();
  checkpoint->add_flag("--wait", wait,
                       "Wait until the job runs (if it is still starting), then until the checkpoint is complete; "
                       "print its path");
  checkpoint->add_option("--wait-timeout", wait_s, "Seconds --wait waits at most (1 to 3600)")
      ->type_name("SECONDS")
      ->check(Quiet(CLI::Range(1, 3600)))
      ->capture_default_str();
  auto* checkpoints = app.add_subcommand("checkpoints", "List a job's checkpoints (step, type, path, bytes, time)");
  checkpoints->add_option("ID", id, "Job id")->type_name("")->required();
  auto* resume = app.add_subcommand("resume", "Start an ended job again from a checkpoint");
  resume->add_option("ID", id, "Job id")->type_name("")->required();
  resume->add_option("--from", from, "Checkpoint directory (default: the job's latest complete checkpoint)")
      ->type_name("DIR");
  resume->add_option("--num-processes", nproc, "World size of the resumed job (default: as before; at most 65536)")
      ->type_name("N")
      ->check(Quiet(CLI::Range(1, 1 << 16)));
  resume->add_flag("-w,--watch", watch, "Watch the job until it ends");
  auto* join_info =
      app.add_subcommand("join-info", "Print the worker token and join command of a launcher: external job");
  join_info->add_option("ID", id, "Job id")->type_name("")->required();
  auto* logs = app.add_subcommand("logs", "Print a rank's worker log");
  logs->add_option("ID", id, "Job id")->type_name("")->required();
  trainyard::Trainctl::LogsOptions logs_options;
  logs->add_option("-r,--rank", logs_options.rank, "Rank")->type_name("N")->capture_default_str();
  auto* attempt = logs->add_option("--attempt", logs_options.attempt, "Attempt (1, 2, ...; default: the latest)")
                      ->type_name("N")
                      ->check(Quiet(CLI::Range(1, 1 << 20)));
  logs->add_flag("--all-attempts", logs_options.all_attempts, "Every attempt's log, oldest first")->excludes(attempt);
  logs->add_flag("-f,--follow", logs_options.follow, "Keep printing what the rank writes until the job ends");
  logs->add_option("--tail", logs_options.tail_lines, "Lines from the end (default: all that is fetched)")
      ->type_name("LINES")
      ->check(Quiet(CLI::Range(int64_t{0}, int64_t{1} << 40)));
  logs->add_option("--limit-bytes", logs_options.limit_bytes,
                   "Bytes from the end at most (default: the server's, 1 MiB; at most 16 MiB)")
      ->type_name("BYTES");
  auto* diagnose = app.add_subcommand(
      "diagnose", "Ask a running job's ranks for their last collectives: which rank is behind, at which collective");
  diagnose->add_option("ID", id, "Job id")->type_name("")->required();
  double diagnose_wait_s = 5;
  diagnose->add_option("--wait", diagnose_wait_s, "Seconds to wait for the ranks' answers (0.1 to 60)")
      ->type_name("SECONDS")
      ->check(Quiet(CLI::Range(0.1, 60.0)))
      ->capture_default_str();
  int last_collectives = 8;
  diagnose->add_option("--collectives", last_collectives, "Collectives to print per rank, newest last")
      ->type_name("N")
      ->check(Quiet(CLI::NonNegativeNumber))
      ->capture_default_str();

  auto* history = app.add_subcommand(
      "history", "A job's series (loss, throughput, ...) across its attempts, with its events; -o csv or json");
  history->add_option("ID", id, "Job id")->type_name("");
  std::vector<std::string> history_jobs;
  history->add_option("--jobs", history_jobs, "Several jobs, side by side; -o csv adds a job column")
      ->type_name("ID,ID,...")
      ->delimiter(',');
  std::vector<std::string> history_series;
  history->add_option("--series", history_series, "These series only (loss, eval_loss, samples_per_second, ...)")
      ->type_name("NAME,NAME,...")
      ->delimiter(',');

  auto* sweep = app.add_subcommand("sweep", "Hyperparameter sweeps: submit, get, list, cancel");
  sweep->require_subcommand(1);
  std::string sweep_file, sweep_id;
  bool sweep_watch = false, keep_best = false, sweep_quiet = false, sweep_no_wait = false;
  auto* sweep_submit = sweep->add_subcommand("submit", "Submit a job spec with a sweep: section");
  sweep_submit->add_option("FILE", sweep_file, "Sweep spec file")->type_name("")->required();
  sweep_submit->add_flag("-w,--watch", sweep_watch, "Follow the sweep until it ends");
  sweep_submit->add_flag("-q,--quiet", sweep_quiet, "Print the sweep's id alone");
  auto* sweep_get = sweep->add_subcommand("get", "Show a sweep and its trials");
  sweep_get->add_option("ID", sweep_id, "Sweep id")->type_name("")->required();
  auto* sweep_watch_cmd = sweep->add_subcommand("watch", "Follow a sweep until it ends");
  sweep_watch_cmd->add_option("ID", sweep_id, "Sweep id")->type_name("")->required();
  auto* sweep_list = sweep->add_subcommand("list", "List sweeps");
  sweep_list->add_flag("-A,--all-users", all_users, "Everyone's sweeps (admins)");
  auto* sweep_cancel = sweep->add_subcommand(
      "cancel", "Cancel a sweep: every trial still queued or running, and wait until their workers stopped");
  sweep_cancel->add_option("ID", sweep_id, "Sweep id")->type_name("")->required();
  sweep_cancel->add_flag("--keep-best", keep_best, "Leave the best trial so far running");
  sweep_cancel->add_flag("--no-wait", sweep_no_wait, "Return as soon as the cancel was accepted");

  std::string token_file, ca_file;
  app.add_option("--token-file", token_file, "File with the server's bearer token (env TRAINYARD_TOKEN)")
      ->type_name("FILE");
  app.add_option("--ca", ca_file, "CA certificate (PEM) of a TLS server")->type_name("FILE");
  std::string cert_file, key_file;
  app.add_option("--cert", cert_file, "Client certificate (PEM) for a mutual-TLS server")->type_name("FILE");
  app.add_option("--key", key_file, "Client private key (PEM)")->type_name("FILE");
  if (const int rc = trainyard::ParseCommandLine(app, argc, argv, "trainctl"); rc >= 0) return rc;
  if (const char* env = std::getenv("TRAINYARD_TOKEN"); env != nullptr) o.token = env;
  if (!token_file.empty() && !trainyard::ReadFileToString(token_file, &o.token)) {
    std::cerr << "trainctl: cannot read --token-file " << token_file << "\n";
    return 2;
  }
  while (!o.token.empty() && std::isspace(static_cast<unsigned char>(o.token.back()))) o.token.pop_back();
  if (!ca_file.empty() && !trainyard::ReadFileToString(ca_file, &o.ca_pem)) {
    std::cerr << "trainctl: cannot read --ca " << ca_file << "\n";
    return 2;
  }
  if ((!cert_file.empty() && !trainyard::ReadFileToString(cert_file, &o.cert_pem)) ||
      (!key_file.empty() && !trainyard::ReadFileToString(key_file, &o.key_pem))) {
    std::cerr << "trainctl: cannot read --cert/--key\n";
    return 2;
  }
  if (absl::StatusOr<std::vector<std::string>> servers = trainyard::SplitAddresses(o.server); !servers.ok()) {
    std::cerr << "trainctl: --server (or TRAINYARD_SERVER): " << servers.status().message() << "\n";
    return 2;
  }
  if (o.ca_pem.empty() && !o.cert_pem.empty()) {
    std::cerr << "trainctl: --cert needs --ca (the server's CA)\n";
    return 2;
  }
  if (output == "csv" && !*history) {
    std::cerr << "trainctl: -o csv is for `trainctl history`; other commands print table or json\n";
    return 2;
  }
  o.output = output == "json"  ? trainyard::OutputFormat::kJson
             : output == "csv" ? trainyard::OutputFormat::kCsv
                               : trainyard::OutputFormat::kTable;
  o.rpc_timeout = std::chrono::seconds(timeout_s);

  // A sweep's id where a job's is expected: say which command takes it.
  for (auto [command, name] : {std::pair{get, "get"}, std::pair{cancel, "cancel"}, std::pair{watch_cmd, "watch"}}) {
    if (*command && id.rfind("sweep-", 0) == 0) {
      std::cerr << "trainctl: " << id << " is a sweep, not a job: `trainctl sweep " << name << " " << id << "`\n";
      return 2;
    }
  }
  if (submit_nproc > 0) sets.insert(sets.begin(), "num_processes=" + std::to_string(submit_nproc));

  trainyard::Trainctl ctl(o, std::cout, std::cerr);
  if (*submit) return ctl.Submit(file, watch, accelerate_config, sets);
  if (*run) {
    std::vector<std::string> rest = run->remaining();
    if (!rest.empty() && rest.front() == "--") rest.erase(rest.begin());
    if (rest.empty()) {
      std::cerr << "trainctl: run needs a script: trainctl run [--nproc-per-node N] SCRIPT [-- ARGS...]\n";
      return 2;
    }
    const std::string script = rest.front();
    rest.erase(rest.begin());
    if (!rest.empty() && rest.front() == "--") rest.erase(rest.begin());
    return ctl.Run(script, rest, run_nproc, run_name, !run_no_watch, sets);
  }
  if (*list) return ctl.List(state, list_limit, all_users, list_name, list_owner);
  if (*delete_cmd) return ctl.Delete(delete_ids);
  if (*queue) return ctl.Queue(all_users);
  if (*get) return ctl.Get(id, rank_page_size, rank_page_token, all_ranks);
  if (*watch_cmd) return ctl.Watch(id);
  if (*cancel) return ctl.Cancel(id, !no_wait, with_checkpoint);
  if (*scale) return ctl.Scale(id, scale_to, !scale_no_wait, std::chrono::seconds(scale_wait_s));
  if (*checkpoint) return ctl.Checkpoint(id, ckpt_type, wait, std::chrono::seconds(wait_s));
  if (*checkpoints) return ctl.Checkpoints(id);
  if (*resume) return ctl.Resume(id, from, nproc, watch);
  if (*logs) return ctl.Logs(id, logs_options);
  if (*join_info) return ctl.JoinInfo(id);
  if (*history) {
    if (!id.empty()) history_jobs.insert(history_jobs.begin(), id);
    if (history_jobs.empty()) {
      std::cerr << "trainctl: history needs a job id (or --jobs A,B,C)\n";
      return 2;
    }
    return ctl.History(history_jobs, history_series);
  }
  if (*sweep_submit) return ctl.SweepSubmit(sweep_file, sweep_watch, sweep_quiet);
  if (*sweep_get) return ctl.SweepGet(sweep_id);
  if (*sweep_watch_cmd) return ctl.SweepWatch(sweep_id);
  if (*sweep_list) return ctl.SweepList(all_users);
  if (*sweep_cancel) return ctl.SweepCancel(sweep_id, keep_best, !sweep_no_wait);
  if (*diagnose) {
    return ctl.Diagnose(id, std::chrono::milliseconds(static_cast<int64_t>(diagnose_wait_s * 1000)), last_collectives);
  }
  return 2;
}
