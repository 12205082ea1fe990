// Trainctl's state and the pieces every command uses: the stub, the
// request deadline and token, how an RPC failure is told, a job's state.
// Private to client/trainctl*.cc.
#ifndef TRAINYARD_CLIENT_TRAINCTL_IMPL_H_
#define TRAINYARD_CLIENT_TRAINCTL_IMPL_H_

#include <grpcpp/grpcpp.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "client/job_format.h"
#include "client/trainctl.h"
#include "common/credentials.h"
#include "common/leader_hint_grpc.h"
#include "trainyard/v1/trainyard.grpc.pb.h"

namespace trainyard {

// True when a TCP connection to "host:port" (or "[v6]:port") opens within
// `timeout`: something listens there.
bool TcpReachable(const std::string& target, std::chrono::milliseconds timeout);

// Whether a call may be sent to another coordinator after one that did not
// answer: kAnyFailure (reads, and calls whose repetition does no harm) after
// any UNAVAILABLE; kOnlyUnsent (SubmitJob and the like) only after a
// standby's answer or a connection that never opened — never after one whose
// outcome is unknown (the coordinator may have done it).
enum class Resend { kAnyFailure, kOnlyUnsent };

// How long a takeover may take, for a watch or a followed log that lost
// its coordinator: they look for the leader this long, then fail.
inline constexpr std::chrono::seconds kTakeoverWindow{60};

struct Trainctl::Impl {
  TrainctlOptions options;
  std::ostream& out;
  std::ostream& err;
  // The coordinators of --server (several: high availability, issue 65):
  // calls go to the one that leads, found as common/leader_hint.h says.
  std::vector<std::string> addresses;
  struct Endpoint {
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<v1::JobService::Stub> stub;
  };
  std::map<std::string, Endpoint> endpoints;
  std::string leader;  // the coordinator that last answered as leader (or that a standby named)
  // The last call's coordinators, when it went to more than one or a
  // standby answered, and none answered as leader: what each said.
  std::vector<std::string> tried;

  Impl(TrainctlOptions o, std::ostream& out_, std::ostream& err_) : options(std::move(o)), out(out_), err(err_) {
    absl::StatusOr<std::vector<std::string>> list = SplitAddresses(options.server);
    addresses = list.ok() ? *std::move(list) : std::vector<std::string>{options.server};  // main() checked it
    leader = addresses.front();
  }

  Endpoint& EndpointAt(const std::string& address) {
    Endpoint& e = endpoints[address];
    if (!e.channel) {
      // Logs come in answers of up to 16 MiB (--limit-bytes); gRPC's default
      // limit on what a client receives is 4 MiB.
      grpc::ChannelArguments args;
      args.SetMaxReceiveMessageSize(32 << 20);
      args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);  // a coordinator back is found within a second
      e.channel = grpc::CreateCustomChannel(address,
                                            ClientCredentials(options.ca_pem, options.cert_pem, options.key_pem), args);
      e.stub = v1::JobService::NewStub(e.channel);
    }
    return e;
  }
  v1::JobService::Stub* LeaderStub() { return EndpointAt(leader).stub.get(); }

  // Every call carries the bearer token, when there is one.
  void Authorize(grpc::ClientContext* ctx) const {
    if (!options.token.empty()) ctx->AddMetadata("authorization", "Bearer " + options.token);
  }

  // Whether `channel` connects by `deadline`: false as soon as its last
  // connection attempt failed (refused), not only at the deadline. Empty
  // when connected, else what went wrong. A channel whose attempt failed
  // stays in TRANSIENT_FAILURE while it tries again in the background
  // (gRPC's sticky failure, every second at most here): that state says
  // "cannot connect" at once, however quickly it followed CONNECTING.
  static std::string Reach(grpc::Channel* channel, std::chrono::system_clock::time_point deadline) {
    grpc_connectivity_state state = channel->GetState(/*try_to_connect=*/true);
    for (;;) {
      if (state == GRPC_CHANNEL_READY) return "";
      if (state == GRPC_CHANNEL_SHUTDOWN || state == GRPC_CHANNEL_TRANSIENT_FAILURE) return "cannot connect";
      if (!channel->WaitForStateChange(state, deadline)) return "no connection within the time allowed";
      state = channel->GetState(/*try_to_connect=*/true);
    }
  }

  // One unary call with the token and a deadline `timeout` from now
  // (--timeout's when not given), to the leader: s.Call(&v1::JobService::Stub::GetJob, req, &resp).
  // The coordinator that last answered as leader first, then the list in
  // its order; an UNAVAILABLE answer sends the call to the leader it names
  // (trailing metadata trainyard-leader), else to the next coordinator
  // (within what `resend` allows). The first answer other than UNAVAILABLE
  // is the call's. With one coordinator and no standby, exactly one try.
  template <typename Request, typename Response>
  grpc::Status Call(grpc::Status (v1::JobService::Stub::*rpc)(grpc::ClientContext*, const Request&, Response*),
                    const Request& req, Response* resp, std::optional<std::chrono::milliseconds> timeout = std::nullopt,
                    Resend resend = Resend::kAnyFailure) {
    tried.clear();
    const std::vector<std::string> order = TryOrder(addresses, leader);
    std::deque<std::string> queue(order.begin(), order.end());
    std::set<std::string> seen;
    grpc::Status last;
    bool standby_answered = false;
    const auto wait = timeout.value_or(options.rpc_timeout);
    while (!queue.empty()) {
      const std::string address = queue.front();
      queue.pop_front();
      if (!seen.insert(address).second) continue;
      Endpoint& e = EndpointAt(address);
      // With several to try, a coordinator that does not connect is passed
      // over (within 5 s: a host that is gone does not hold the call).
      if (order.size() > 1 || seen.size() > 1) {
        const std::string unreachable =
            Reach(e.channel.get(), std::chrono::system_clock::now() +
                                       std::min<std::chrono::milliseconds>(wait, std::chrono::seconds(5)));
        if (!unreachable.empty()) {
          tried.push_back(address + ": " + unreachable);
          last = grpc::Status(grpc::StatusCode::UNAVAILABLE, unreachable);
          continue;
        }
      }
      grpc::ClientContext ctx;
      Authorize(&ctx);
      ctx.set_deadline(std::chrono::system_clock::now() + wait);
      grpc::Status st = (e.stub.get()->*rpc)(&ctx, req, resp);
      if (st.error_code() != grpc::StatusCode::UNAVAILABLE) {
        leader = address;
        tried.clear();
        return st;
      }
      last = st;
      tried.push_back(address + ": " + st.error_message());
      const bool standby = IsStandbyAnswer(st);
      standby_answered = standby_answered || standby;
      // Sent to a coordinator that may have done it: not sent again.
      if (!standby && resend == Resend::kOnlyUnsent &&
          st.error_message().find("failed to connect to all addresses") == std::string::npos) {
        tried.clear();
        return st;
      }
      if (const std::string hint = LeaderHint(ctx); !hint.empty() && hint != address) {
        leader = hint;
        if (seen.count(hint) == 0) queue.push_front(hint);
      }
    }
    if (tried.size() <= 1 && !standby_answered) tried.clear();  // one coordinator: said as before
    return last;
  }

  // After a call or stream failed with `st`: true, after a pause, when a
  // takeover may explain it (UNAVAILABLE, with several coordinators or a
  // standby's answer) and kTakeoverWindow since the first such failure
  // (`*since`) has not passed; the caller then tries again.
  bool AwaitLeader(const grpc::Status& st, std::optional<std::chrono::steady_clock::time_point>* since) {
    if (st.error_code() != grpc::StatusCode::UNAVAILABLE || (addresses.size() < 2 && !IsStandbyAnswer(st))) {
      return false;
    }
    const auto now = std::chrono::steady_clock::now();
    if (!*since) *since = now;
    if (now - **since > kTakeoverWindow) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    return true;
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
    if (s.error_code() == grpc::StatusCode::UNAVAILABLE && !tried.empty()) {
      err << "trainctl: no trainyard server of " << options.server << " answered as the leader:\n";
      for (const std::string& t : tried) err << "  " << t << "\n";
      err << "Is trainyard-server running? Set --server or TRAINYARD_SERVER.\n";
      tried.clear();
      return 2;
    }
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
        << "name:         " << Shown(j.name()) << "\n";
    if (!j.sweep_id().empty()) {
      out << "sweep:        " << Shown(j.sweep_id()) << ", trial " << j.sweep_trial() << " (trainctl sweep get "
          << Shown(j.sweep_id()) << ")\n";
    }
    out << "state:        " << StateName(j.state()) << "\n"
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
