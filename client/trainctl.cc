#include "client/trainctl.h"
#include "client/trainctl_impl.h"

#include <grpcpp/grpcpp.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "client/job_format.h"
#include "common/credentials.h"
#include "common/flight_record.h"
#include "common/job_state.h"
#include "common/spec/spec_overrides.h"
#include "common/wire_convert.h"
#include "trainyard/v1/trainyard.grpc.pb.h"

namespace trainyard {

using nlohmann::ordered_json;

// True when a TCP connection to "host:port" (or "[v6]:port") opens within
// `timeout`: something listens there.
bool TcpReachable(const std::string& target, std::chrono::milliseconds timeout) {
  std::string host, port;
  if (!target.empty() && target.front() == '[') {
    const size_t close = target.find(']');
    if (close == std::string::npos || close + 1 >= target.size() || target[close + 1] != ':') return false;
    host = target.substr(1, close - 1);
    port = target.substr(close + 2);
  } else {
    const size_t colon = target.rfind(':');
    if (colon == std::string::npos) return false;
    host = target.substr(0, colon);
    port = target.substr(colon + 1);
  }
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0) return false;
  bool ok = false;
  for (addrinfo* a = found; a != nullptr && !ok; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
      ok = true;
    } else if (errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      int error = 0;
      socklen_t len = sizeof(error);
      ok = poll(&p, 1, static_cast<int>(timeout.count())) == 1 &&
           getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) == 0 && error == 0;
    }
    close(fd);
  }
  freeaddrinfo(found);
  return ok;
}

Trainctl::Trainctl(TrainctlOptions options, std::ostream& out, std::ostream& err)
    : impl_(std::make_unique<Impl>(std::move(options), out, err)) {}
Trainctl::~Trainctl() = default;

int Trainctl::Submit(const std::string& file, bool watch, const std::string& accelerate_config_file,
                     const std::vector<std::string>& sets) {
  Impl& s = *impl_;
  std::optional<std::string> text = s.ReadSpecFile(file);
  if (!text) return 2;
  absl::StatusOr<std::string> spec = ApplySpecOverrides(*text, sets);
  if (!spec.ok()) {
    s.err << "trainctl: " << file << ": " << spec.status().message() << "\n";
    return 2;
  }
  // ApplySpecOverrides writes the mapping as block YAML: a top-level key
  // starts a line.
  if (spec->rfind("sweep:", 0) == 0 || spec->find("\nsweep:") != std::string::npos) {
    s.err << "trainctl: " << file << " has a sweep: section: submit it with `trainctl sweep submit " << file << "`\n";
    return 2;
  }
  v1::SubmitJobRequest req;
  req.set_spec(*spec);
  req.set_source_name(file);
  if (!accelerate_config_file.empty()) {
    std::ifstream config(accelerate_config_file, std::ios::binary);
    if (!config) {
      s.err << "trainctl: cannot read the accelerate config " << accelerate_config_file << ": " << std::strerror(errno)
            << "\n";
      return 2;
    }
    std::error_code ec;
    if (std::filesystem::is_directory(accelerate_config_file, ec)) {
      s.err << "trainctl: cannot read the accelerate config " << accelerate_config_file << ": it is a directory\n";
      return 2;
    }
    std::stringstream text;
    text << config.rdbuf();
    if (text.str().find_first_not_of(" \t\r\n") == std::string::npos) {
      s.err << "trainctl: the accelerate config " << accelerate_config_file
            << " is empty (run `accelerate config` to write one)\n";
      return 2;
    }
    req.set_accelerate_config(text.str());
  }
  v1::SubmitJobResponse resp;
  grpc::Status st = s.Call(&v1::JobService::Stub::SubmitJob, req, &resp, std::nullopt, Resend::kOnlyUnsent);
  if (!st.ok()) return s.Fail(st);
  if (s.options.output == OutputFormat::kJson && !watch) {
    s.PrintJob(resp.job());
  } else {
    s.out << "submitted " << resp.job().id() << " (" << resp.job().name() << "): " << StateName(resp.job().state())
          << "\n";
  }
  return watch ? Watch(resp.job().id()) : 0;
}

int Trainctl::Run(const std::string& script, const std::vector<std::string>& args, int nproc, const std::string& name,
                  bool watch, const std::vector<std::string>& sets) {
  Impl& s = *impl_;
  std::error_code ec;
  const std::filesystem::path path = std::filesystem::absolute(script, ec);
  if (ec || !std::filesystem::is_regular_file(path, ec)) {
    s.err << "trainctl: " << script << ": no such file (the server's host runs it: give its path there)\n";
    return 2;
  }
  std::string job_name = name;
  if (job_name.empty()) {  // the script's name, as a job's name may be
    for (char c : path.stem().string()) {
      job_name.push_back(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' ? c : '_');
    }
    if (job_name.empty()) job_name = "script";
  }
  const nlohmann::ordered_json spec = {{"name", job_name.substr(0, 128)},
                                       {"num_processes", nproc},
                                       {"script", {{"path", path.string()}, {"args", args}}}};
  absl::StatusOr<std::string> text = ApplySpecOverrides(spec.dump(), sets);
  if (!text.ok()) {
    s.err << "trainctl: " << text.status().message() << "\n";
    return 2;
  }
  v1::SubmitJobRequest req;
  req.set_spec(*text);
  req.set_source_name(path.string());
  v1::SubmitJobResponse resp;
  if (grpc::Status st = s.Call(&v1::JobService::Stub::SubmitJob, req, &resp, std::nullopt, Resend::kOnlyUnsent);
      !st.ok()) {
    return s.Fail(st);
  }
  s.out << "submitted " << resp.job().id() << " (" << resp.job().name() << "): " << StateName(resp.job().state())
        << "\n";
  return watch ? Watch(resp.job().id()) : 0;
}

int Trainctl::List(const std::string& state_filter, int64_t limit, bool all_users, const std::string& name_contains,
                   const std::string& owner) {
  Impl& s = *impl_;
  v1::ListJobsRequest req;
  req.set_all_users(all_users || !owner.empty());
  req.set_newest_first(true);
  if (!state_filter.empty()) {
    auto st = ParseJobState(state_filter);
    if (!st) {
      s.err << "trainctl: unknown state '" << state_filter << "'; accepted: " << NamesOf(kJobStateNames) << "\n";
      return 2;
    }
    req.add_states(ToProto(*st));
  }
  // JSON shows each job's spec, as `get` does; the table does not need it.
  req.set_view(s.options.output == OutputFormat::kJson ? v1::JOB_VIEW_FULL : v1::JOB_VIEW_BASIC);
  v1::ListJobsResponse resp;
  do {
    v1::ListJobsResponse page;
    grpc::Status st = s.Call(&v1::JobService::Stub::ListJobs, req, &page);
    if (!st.ok()) return s.Fail(st);
    for (v1::Job& j : *page.mutable_jobs()) {
      if (limit > 0 && resp.jobs_size() >= limit) break;
      if (!owner.empty() && j.owner() != owner) continue;
      if (!name_contains.empty() && j.name().find(name_contains) == std::string::npos) continue;
      *resp.add_jobs() = std::move(j);
    }
    req.set_page_token(page.next_page_token());
  } while (!req.page_token().empty() && (limit <= 0 || resp.jobs_size() < limit));
  if (s.options.output == OutputFormat::kJson) {
    ordered_json arr = ordered_json::array();
    for (const auto& j : resp.jobs()) arr.push_back(JobJson(j));
    s.out << arr.dump(2) << "\n";
    return 0;
  }
  s.out << std::left << std::setw(14) << "ID" << std::setw(20) << "NAME" << std::setw(11) << "STATE" << std::right
        << std::setw(6) << "PROCS" << std::setw(16) << "STEP" << std::setw(11) << "LOSS" << std::setw(12) << "SAMPLES/S"
        << "  CREATED\n";
  for (const auto& j : resp.jobs()) {
    std::ostringstream step;
    step << j.step();
    if (j.max_steps() > 0) step << "/" << j.max_steps();
    const std::string loss = FormatMetric(j.loss(), j.step() > 0);
    s.out << std::left << std::setw(14) << j.id() << std::setw(20) << j.name().substr(0, 19) << std::setw(11)
          << StateName(j.state()) << std::right << std::setw(6) << j.num_processes() << std::setw(16) << step.str()
          << std::setw(11) << loss << std::setw(12) << FormatRate(j.samples_per_second()) << "  "
          << FormatTime(j.created_unix_millis()) << "\n";
  }
  return 0;
}

int Trainctl::Queue(bool all_users) {
  Impl& s = *impl_;
  v1::GetQueueRequest req;
  req.set_all_users(all_users);
  v1::GetQueueResponse resp;
  grpc::Status st = s.Call(&v1::JobService::Stub::GetQueue, req, &resp);
  if (!st.ok()) return s.Fail(st);
  // Every page, as kubectl lists in chunks; the first page's usage.
  while (!resp.next_page_token().empty()) {
    req.set_page_token(resp.next_page_token());
    v1::GetQueueResponse page;
    if (st = s.Call(&v1::JobService::Stub::GetQueue, req, &page); !st.ok()) return s.Fail(st);
    for (auto& e : *page.mutable_entries()) *resp.add_entries() = std::move(e);
    resp.set_next_page_token(page.next_page_token());
  }
  if (s.options.output == OutputFormat::kJson) {
    s.out << QueueJson(resp).dump(2) << "\n";
  } else {
    PrintQueueTable(resp, s.out);
  }
  return 0;
}

int Trainctl::Get(const std::string& id, int rank_page_size, const std::string& rank_page_token, bool all_ranks) {
  Impl& s = *impl_;
  v1::GetJobRequest req;
  req.set_id(id);
  req.set_rank_page_size(all_ranks && rank_page_size == 0 ? 1000 : rank_page_size);
  req.set_rank_page_token(rank_page_token);
  v1::GetJobResponse resp;
  grpc::Status st = s.Call(&v1::JobService::Stub::GetJob, req, &resp);
  if (!st.ok()) return s.Fail(st);
  // --all-ranks: the other pages' ranks and places added to the first's.
  while (all_ranks && !resp.next_rank_page_token().empty()) {
    req.set_rank_page_token(resp.next_rank_page_token());
    v1::GetJobResponse page;
    if (st = s.Call(&v1::JobService::Stub::GetJob, req, &page); !st.ok()) return s.Fail(st);
    for (auto& r : *page.mutable_job()->mutable_ranks()) *resp.mutable_job()->add_ranks() = std::move(r);
    for (auto& p : *page.mutable_job()->mutable_places()) *resp.mutable_job()->add_places() = std::move(p);
    resp.set_next_rank_page_token(page.next_rank_page_token());
  }
  s.PrintJob(resp.job());
  if (!resp.next_rank_page_token().empty()) {
    s.err << "trainctl: more of its " << resp.job().num_processes() << " ranks: trainctl get " << id
          << " --rank-page-token " << resp.next_rank_page_token() << " (or --all-ranks)\n";
  }
  return 0;
}

int Trainctl::Cancel(const std::string& id, bool wait, bool checkpoint) {
  Impl& s = *impl_;
  v1::CancelJobRequest req;
  req.set_id(id);
  req.set_checkpoint(checkpoint);
  v1::CancelJobResponse resp;
  grpc::Status st = s.Call(&v1::JobService::Stub::CancelJob, req, &resp);
  if (!st.ok()) return s.Fail(st);
  if (!wait || IsTerminalProto(resp.job().state())) {
    s.out << resp.job().id() << ": " << StateName(resp.job().state()) << " — "
          << (IsTerminalProto(resp.job().state()) ? Shown(resp.job().reason()) : "stopping") << "\n";
    return 0;
  }
  if (checkpoint && resp.job().state() != v1::RUNNING) {
    s.out << id << ": " << StateName(resp.job().state())
          << ", no step of this attempt has run: nothing to checkpoint; cancelling, waiting for its workers to stop\n";
  } else {
    s.out << id
          << (checkpoint ? ": checkpointing, then stopping; waiting for its workers\n"
                         : ": cancelling, waiting for its workers to stop\n");
  }
  int rc = Watch(id, resp.job().state());  // not the state it is leaving again
  if (rc == 2) return rc;
  auto final_state = Impl::LastState(s, id);
  return final_state == v1::CANCELLED ? 0 : 1;
}

int Trainctl::Delete(const std::vector<std::string>& ids) {
  Impl& s = *impl_;
  int rc = 0;
  for (const std::string& id : ids) {
    v1::DeleteJobRequest req;
    req.set_id(id);
    v1::DeleteJobResponse resp;
    if (grpc::Status st = s.Call(&v1::JobService::Stub::DeleteJob, req, &resp); !st.ok()) {
      rc = s.Fail(st);
      continue;
    }
    s.out << id << ": deleted (its record, events, checkpoint entries and history); its files stay on disk\n";
  }
  return rc;
}

int Trainctl::Checkpoint(const std::string& id, const std::string& type, bool wait, std::chrono::seconds wait_for) {
  Impl& s = *impl_;
  v1::CheckpointJobRequest req;
  req.set_id(id);
  req.set_type(ToProto(ValueOf(kCheckpointTypeNames, type).value_or(CheckpointType::kAuto)));
  req.set_wait(wait);
  v1::CheckpointJobResponse resp;
  grpc::Status st = s.Call(&v1::JobService::Stub::CheckpointJob, req, &resp, wait ? wait_for : s.options.rpc_timeout,
                           Resend::kOnlyUnsent);
  if (const v1::JobState state = wait && st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED
                                     ? Impl::LastState(s, id)
                                     : v1::JOB_STATE_UNSPECIFIED;
      state == v1::QUEUED || state == v1::STARTING || state == v1::RECOVERING) {
    s.err << "trainctl: timed out after " << wait_for.count() << " s waiting for job " << id << " to run (it is "
          << StateName(state) << "); no checkpoint was requested\n";
    return 1;
  } else if (state != v1::JOB_STATE_UNSPECIFIED) {
    // The server answers: the checkpoint did not come within --wait.
    s.err << "trainctl: timed out after " << wait_for.count() << " s waiting for job " << id
          << "'s checkpoint (it may still come: `trainctl checkpoints " << id << "`; --wait-timeout waits longer)\n";
    return 1;
  }
  if (!st.ok()) return s.Fail(st);
  if (!wait) {
    s.out << id << ": checkpoint requested (request " << resp.request_id() << "); `trainctl checkpoints " << id
          << "` lists it when done\n";
    return 0;
  }
  if (s.options.output == OutputFormat::kJson) {
    s.out << CheckpointJson(resp.checkpoint()).dump(2) << "\n";
  } else {
    s.out << resp.checkpoint().path() << "\n";
  }
  return 0;
}

int Trainctl::Checkpoints(const std::string& id) {
  Impl& s = *impl_;
  v1::ListCheckpointsRequest req;
  req.set_id(id);
  v1::ListCheckpointsResponse resp;
  grpc::Status st = s.Call(&v1::JobService::Stub::ListCheckpoints, req, &resp);
  if (!st.ok()) return s.Fail(st);
  if (s.options.output == OutputFormat::kJson) {
    ordered_json all = ordered_json::array();
    for (const auto& c : resp.checkpoints()) all.push_back(CheckpointJson(c));
    s.out << all.dump(2) << "\n";
    return 0;
  }
  s.out << std::left << std::setw(6) << "N" << std::setw(8) << "STEP" << std::setw(9) << "TYPE" << std::setw(11)
        << "TRIGGER" << std::setw(8) << "RESULT" << std::setw(12) << "BYTES" << std::setw(9) << "SECONDS"
        << std::setw(21) << "TIME"
        << "PATH / ERROR\n";
  for (const auto& c : resp.checkpoints()) {
    std::ostringstream secs;
    secs << std::fixed << std::setprecision(2) << c.seconds();
    s.out << std::left << std::setw(6) << (c.ok() ? std::to_string(c.index()) : "-") << std::setw(8) << c.step()
          << std::setw(9) << CheckpointTypeName(FromProto(c).type) << std::setw(11) << c.trigger() << std::setw(8)
          << (c.ok() ? "ok" : "FAILED") << std::setw(12) << c.bytes() << std::setw(9) << secs.str() << std::setw(21)
          << FormatTime(c.unix_millis()) << (c.ok() ? c.path() : c.error()) << "\n";
  }
  return 0;
}

int Trainctl::Scale(const std::string& id, int num_processes, bool wait, std::chrono::seconds wait_for) {
  Impl& s = *impl_;
  v1::ScaleJobRequest req;
  req.set_id(id);
  req.set_num_processes(num_processes);
  v1::ScaleJobResponse resp;
  grpc::Status st = s.Call(&v1::JobService::Stub::ScaleJob, req, &resp);
  if (!st.ok()) return s.Fail(st);
  s.out << id << ": scaling to " << num_processes << (num_processes == 1 ? " rank\n" : " ranks\n");
  if (!wait) return 0;
  // Done when the members are ranks 0..n-1 and nobody is leaving or joining.
  const auto deadline = std::chrono::steady_clock::now() + wait_for;
  for (;;) {
    v1::GetJobRequest get;
    get.set_id(id);
    v1::GetJobResponse job;
    st = s.Call(&v1::JobService::Stub::GetJob, get, &job);
    if (!st.ok()) return s.Fail(st);
    const v1::Replicas& r = job.job().replicas();
    if (IsTerminalProto(job.job().state())) {
      s.err << "trainctl: job " << id << " ended (" << StateName(job.job().state()) << ") while scaling\n";
      return 1;
    }
    if (r.live_size() == num_processes && r.size() == num_processes && r.leaving_size() == 0 && r.healing_size() == 0) {
      s.out << id << ": " << num_processes << (num_processes == 1 ? " rank trains" : " ranks train")
            << " together (membership " << r.epoch() << ")\n";
      return 0;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      s.err << "trainctl: job " << id << " did not reach " << num_processes << " ranks within " << wait_for.count()
            << " s: " << r.live_size() << " live, " << r.leaving_size() << " leaving, " << r.healing_size()
            << " healing (`trainctl get " << id << "`)\n";
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

int Trainctl::Resume(const std::string& id, const std::string& from, int num_processes, bool watch) {
  Impl& s = *impl_;
  v1::ResumeJobRequest req;
  req.set_id(id);
  req.set_from(from);
  req.set_num_processes(num_processes);
  v1::ResumeJobResponse resp;
  grpc::Status st = s.Call(&v1::JobService::Stub::ResumeJob, req, &resp, std::nullopt, Resend::kOnlyUnsent);
  if (!st.ok()) return s.Fail(st);
  s.out << resp.job().id() << ": " << StateName(resp.job().state()) << " — " << Shown(resp.job().reason()) << "\n";
  return watch ? Watch(id, resp.job().state()) : 0;
}

int Trainctl::JoinInfo(const std::string& id) {
  Impl& s = *impl_;
  v1::GetJoinInfoRequest req;
  req.set_id(id);
  v1::GetJoinInfoResponse resp;
  grpc::Status st = s.Call(&v1::JobService::Stub::GetJoinInfo, req, &resp);
  if (!st.ok()) return s.Fail(st);
  if (s.options.output == OutputFormat::kJson) {
    nlohmann::json j = {{"job_id", resp.job_id()},
                        {"token", resp.token()},
                        {"world_size", resp.world_size()},
                        {"attempt", resp.attempt()},
                        {"coordinator_addr", resp.coordinator_addr()}};
    s.out << j.dump(2) << "\n";
    return 0;
  }
  s.out << "job " << resp.job_id() << ": " << resp.world_size() << " ranks (attempt " << resp.attempt() << ")\n"
        << "On each host, for each of its ranks R:\n"
        << "  TRAINYARD_WORKER_TOKEN=" << resp.token() << " trainyard-worker --join " << resp.job_id() << " --server "
        << resp.coordinator_addr() << " --rank R\n"
        << "(without --rank a worker takes TRAINYARD_RANK, SLURM_PROCID, RANK or JOB_COMPLETION_INDEX from its "
           "environment)\n";
  return 0;
}

int Trainctl::Diagnose(const std::string& id, std::chrono::milliseconds wait, int last_collectives) {
  Impl& s = *impl_;
  v1::DiagnoseJobRequest req;
  req.set_id(id);
  req.set_timeout_ms(static_cast<int32_t>(wait.count()));
  v1::DiagnoseJobResponse resp;
  grpc::Status st = s.Call(&v1::JobService::Stub::DiagnoseJob, req, &resp, wait + s.options.rpc_timeout);
  if (!st.ok()) return s.Fail(st);
  const double now = static_cast<double>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
  auto seconds_since = [&](int64_t micros) { return std::max(0.0, (now - static_cast<double>(micros)) / 1e6); };
  if (s.options.output == OutputFormat::kJson) {
    ordered_json j;
    j["job_id"] = id;
    j["attempt"] = resp.attempt();
    j["verdict"] = resp.verdict();
    j["behind_ranks"] = std::vector<int32_t>(resp.behind_ranks().begin(), resp.behind_ranks().end());
    j["silent_ranks"] = std::vector<int32_t>(resp.silent_ranks().begin(), resp.silent_ranks().end());
    j["ranks"] = ordered_json::array();
    for (const v1::FlightRecord& r : resp.ranks()) {
      ordered_json o;
      o["rank"] = r.rank();
      o["step"] = r.step();
      o["phase"] = r.phase();
      o["phase_seconds"] = seconds_since(r.phase_since_unix_micros());
      if (!r.python_stack().empty()) o["python_stack"] = r.python_stack();
      o["collectives"] = ordered_json::array();
      for (const v1::CollectiveRecord& c : r.collectives()) {
        o["collectives"].push_back({{"seq", c.seq()},
                                    {"group", c.group()},
                                    {"op", c.op()},
                                    {"bytes", c.bytes()},
                                    {"start_unix_micros", c.start_unix_micros()},
                                    {"end_unix_micros", c.end_unix_micros()}});
      }
      j["ranks"].push_back(std::move(o));
    }
    s.out << j.dump(2) << "\n";
    return 0;
  }
  s.out << "job " << id << " (attempt " << resp.attempt() << "): " << resp.verdict() << "\n";
  for (const v1::FlightRecord& r : resp.ranks()) {
    std::ostringstream since;
    since << std::fixed << std::setprecision(1) << seconds_since(r.phase_since_unix_micros()) << " s";
    // A script rank whose steps nobody reports (script.progress reads rank 0's).
    const std::string step = r.step() == kStepUnknown ? "-" : std::to_string(r.step());
    s.out << "rank " << r.rank() << ": " << r.phase() << " after step " << step << " for " << since.str() << "\n";
    if (!r.python_stack().empty()) {
      std::istringstream stack(r.python_stack());
      for (std::string line; std::getline(stack, line);) s.out << "  " << line << "\n";
    }
    const int n = r.collectives_size();
    for (int i = std::max(0, n - last_collectives); i < n; ++i) {
      const v1::CollectiveRecord& c = r.collectives(i);
      std::ostringstream took;
      took << std::fixed << std::setprecision(3);
      if (c.end_unix_micros() != 0) {
        took << "took " << static_cast<double>(c.end_unix_micros() - c.start_unix_micros()) / 1e6 << " s";
      } else {
        took << "RUNNING for " << seconds_since(c.start_unix_micros()) << " s";
      }
      s.out << "  " << std::left << std::setw(14) << c.group() << "#" << std::setw(8) << c.seq() << std::setw(22)
            << c.op() << std::setw(14) << (std::to_string(c.bytes()) + " B") << took.str() << "\n";
    }
  }
  for (int32_t r : resp.silent_ranks()) s.out << "rank " << r << ": no answer\n";
  return 0;
}

}  // namespace trainyard
