// Trainctl's state and the pieces every command uses: the stub, the
// request deadline and token, how an RPC failure is told, a job's state.
// Private to client/trainctl*.cc.
#ifndef TRAINYARD_CLIENT_TRAINCTL_IMPL_H_
#define TRAINYARD_CLIENT_TRAINCTL_IMPL_H_

#include <grpcpp/grpcpp.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>

#include "client/job_format.h"
#include "client/trainctl.h"
#include "common/credentials.h"
#include "trainyard/v1/trainyard.grpc.pb.h"

namespace trainyard {

// True when a TCP connection to "host:port" (or "[v6]:port") opens within
// `timeout`: something listens there.
bool TcpReachable(const std::string& target, std::chrono::milliseconds timeout);

struct Trainctl::Impl {
  TrainctlOptions options;
  std::ostream& out;
  std::ostream& err;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::JobService::Stub> stub;

  Impl(TrainctlOptions o, std::ostream& out_, std::ostream& err_) : options(std::move(o)), out(out_), err(err_) {
    // Logs come in answers of up to 16 MiB (--limit-bytes); gRPC's default
    // limit on what a client receives is 4 MiB.
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(32 << 20);
    channel = grpc::CreateCustomChannel(options.server,
                                        ClientCredentials(options.ca_pem, options.cert_pem, options.key_pem), args);
    stub = v1::JobService::NewStub(channel);
  }

  // Every call carries the bearer token, when there is one.
  void Authorize(grpc::ClientContext* ctx) const {
    if (!options.token.empty()) ctx->AddMetadata("authorization", "Bearer " + options.token);
  }

  // One unary call to the server with the token and a deadline `timeout`
  // from now (--timeout's when not given): s.Call(&v1::JobService::Stub::GetJob, req, &resp).
  template <typename Request, typename Response>
  grpc::Status Call(grpc::Status (v1::JobService::Stub::*rpc)(grpc::ClientContext*, const Request&, Response*),
                    const Request& req, Response* resp,
                    std::optional<std::chrono::milliseconds> timeout = std::nullopt) const {
    grpc::ClientContext ctx;
    Authorize(&ctx);
    ctx.set_deadline(std::chrono::system_clock::now() + timeout.value_or(options.rpc_timeout));
    return (stub.get()->*rpc)(&ctx, req, resp);
  }

  // The text of a spec file; nullopt (said on err) when it cannot be read.
  std::optional<std::string> ReadSpecFile(const std::string& file) {
    std::ifstream in(file, std::ios::binary);
    if (!in) {
      err << "trainctl: cannot read " << file << ": " << std::strerror(errno) << "\n";
      return std::nullopt;
    }
    std::error_code ec;
    if (std::filesystem::is_directory(file, ec)) {
      err << "trainctl: cannot read " << file << ": it is a directory\n";
      return std::nullopt;
    }
    if (file.size() > 3 && file.compare(file.size() - 3, 3, ".py") == 0) {
      err << "trainctl: " << file << " is a Python script, not a job spec: run it as a job with `trainctl run "
          << "--nproc-per-node N " << file << " -- ARGS`, or write a spec with `script: {path: " << file
          << "}` (docs/scripts.md)\n";
      return std::nullopt;
    }
    std::stringstream buf;
    buf << in.rdbuf();
    return buf.str();
  }

  // Prints an RPC failure the way a person needs it; returns the exit code.
  int Fail(const grpc::Status& s) {
    if (s.error_code() == grpc::StatusCode::UNAVAILABLE || s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      // Something listens there, yet TLS calls fail: the handshake did (the
      // server closes the connection on a client certificate it does not
      // trust, and the client on a server certificate --ca does not sign).
      if (!options.ca_pem.empty() && TcpReachable(options.server, std::chrono::seconds(2))) {
        err << "trainctl: the TLS handshake with the trainyard server at " << options.server << " failed ("
            << s.error_message() << "). The server is listening: check that --ca names the CA of its certificate"
            << (options.cert_pem.empty() ? ", and whether it requires a client certificate (--cert, --key)"
                                         : ", and that it trusts the CA that signed --cert")
            << ".\n";
        return 2;
      }
      err << "trainctl: cannot reach the trainyard server at " << options.server << " (" << s.error_message()
          << "). Is trainyard-server running? Set --server or TRAINYARD_SERVER.\n";
      return 2;
    }
    static const char* kNames[] = {
        "OK",        "CANCELLED",      "UNKNOWN",           "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
        "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
        "ABORTED",   "OUT_OF_RANGE",   "UNIMPLEMENTED",     "INTERNAL",           "UNAVAILABLE",
        "DATA_LOSS", "UNAUTHENTICATED"};
    int code = static_cast<int>(s.error_code());
    err << "trainctl: " << (code >= 0 && code <= 16 ? kNames[code] : "ERROR") << ": " << s.error_message() << "\n";
    return 2;
  }

  void PrintJob(const v1::Job& j) {
    if (options.output == OutputFormat::kJson) {
      out << JobJson(j).dump(2) << "\n";
      return;
    }
    out << "id:           " << j.id() << "\n"
        << "name:         " << Shown(j.name()) << "\n"
        << "state:        " << StateName(j.state()) << "\n"
        << "reason:       " << Shown(j.reason()) << "\n"
        << "processes:    " << j.num_processes() << "\n"
        << "step:         " << j.step() << (j.max_steps() > 0 ? " / " + std::to_string(j.max_steps()) : "") << "\n"
        << "loss:         "
        << (j.step() > 0 ? FormatMetric(j.loss()) + " (first " + FormatMetric(j.first_loss()) + ")" : "-") << "\n"
        << "samples/s:    " << FormatRate(j.samples_per_second()) << "\n"
        << "attempt:      " << j.attempt() << "\n"
        << "created:      " << FormatTime(j.created_unix_millis()) << "\n"
        << "started:      " << FormatTime(j.started_unix_millis()) << "\n"
        << "ended:        " << FormatTime(j.ended_unix_millis()) << "\n";
    if (j.failed_rank() >= 0) out << "failed rank:  " << j.failed_rank() << "\n";
    if (!j.slurm_job_id().empty()) out << "slurm job:    " << j.slurm_job_id() << "\n";
    if (!j.owner().empty()) {
      out << "owner:        " << j.owner() << (j.group().empty() ? "" : " (group " + j.group() + ")") << "\n"
          << "priority:     " << j.priority() << "\n";
    }
    PrintReplicas(j, out);
    PrintRanks(j, out);
    if (j.events_size() > 0) {
      out << "events:\n";
      for (const auto& e : j.events()) {
        out << "  " << FormatTime(e.unix_millis()) << "  " << std::left << std::setw(10) << StateName(e.state())
            << std::right << " " << Shown(e.reason()) << "\n";
      }
    }
  }

  int FinalCode(const v1::Job& j) { return j.state() == v1::SUCCEEDED ? 0 : 1; }

  static v1::JobState LastState(Impl& s, const std::string& id) {
    v1::GetJobRequest req;
    req.set_id(id);
    v1::GetJobResponse resp;
    if (!s.Call(&v1::JobService::Stub::GetJob, req, &resp).ok()) return v1::JOB_STATE_UNSPECIFIED;
    return resp.job().state();
  }
};

}  // namespace trainyard

#endif  // TRAINYARD_CLIENT_TRAINCTL_IMPL_H_
