#include "worker/control/control_client.h"

#include "common/placement.h"

#include <grpcpp/grpcpp.h>

#include <deque>
#include <future>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "common/credentials.h"
#include "common/join_retry.h"
#include "common/leader_hint_grpc.h"
#include "common/log.h"
#include "common/wire_convert.h"
#include "trainyard/v1/trainyard.grpc.pb.h"
#include "worker/base/flight_recorder.h"
#include "worker/control/coordinator_channels.h"

namespace trainyard {

// One stream to the coordinator; replaced after a reconnection.
struct Conn {
  bool finished = false;  // Finish() was called (guarded by the client's write_mu)
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReaderWriter<v1::WorkerMessage, v1::CoordinatorMessage>> stream;
};

// How a pass over the coordinators ended (Impl::OpenLeader).
enum class PassOutcome {
  kTaken,          // a leader (or the one coordinator) took this worker
  kRefused,        // the leader refused it: its status says why
  kNoLeader,       // every coordinator reached was a standby or a replaced leader
  kNoneConnected,  // no coordinator's channel was connected
};

struct ControlClient::Impl {
  ControlOptions options;
  TrainerControl* control = nullptr;
  // The coordinators of --server, in order. With several, the one that
  // leads is found: a standby answers UNAVAILABLE naming the leader
  // (common/leader_hint.h), and the worker goes there.
  std::vector<std::string> addresses;
  // Used by Connect, then by the reader thread only.
  std::unique_ptr<CoordinatorChannels> channels;
  std::string leader;  // the last coordinator that took this worker, or that a standby named
  // The highest leadership term seen on the welcome or a command (issue
  // 65's fencing token): a command of a lower one comes from a replaced
  // leader and is ignored. 0: no leadership (one coordinator).
  std::atomic<int64_t> highest_term{0};
  int64_t stale_term_logged = -1;  // the reader's: the stale term last logged
  Welcome welcome;

  // Waiters await conditions on `mu`; they wake when one holds.
  absl::Mutex mu;
  std::shared_ptr<Conn> conn ABSL_GUARDED_BY(mu);
  std::deque<StepMetrics> pending ABSL_GUARDED_BY(mu);
  // Checkpoint reports and notes, sent at once.
  std::deque<v1::WorkerMessage> reports ABSL_GUARDED_BY(mu);
  bool finishing ABSL_GUARDED_BY(mu) = false;
  bool result_sent ABSL_GUARDED_BY(mu) = false;  // the stream's end is expected
  bool stream_broken ABSL_GUARDED_BY(mu) = false;
  bool gave_up ABSL_GUARDED_BY(mu) = false;  // no more reconnection attempts
  absl::Mutex write_mu;                      // one writer on a stream at a time
  std::atomic<int32_t> every_steps{10};
  // The newest membership taken whole (deltas apply to it); the reader's.
  MembershipView held_membership_;

  std::thread reader;
  std::thread sender;
  std::promise<void> reader_done;

  // Opens a stream to `address` and says hello; the coordinator answers
  // with a welcome, or ends the stream with the reason it refuses this
  // worker. `*standby`: the refusal was a standby's (`*hint`: the leader it
  // named, if any), or the welcome came from a replaced leader (a term
  // lower than one seen).
  absl::StatusOr<std::shared_ptr<Conn>> Open(const std::string& address, v1::CoordinatorMessage* first,
                                             bool* standby = nullptr, std::string* hint = nullptr) {
    if (standby != nullptr) *standby = false;
    v1::WorkerService::Stub* stub = channels->Stub(address);
    auto c = std::make_shared<Conn>();
    // The job and token in the metadata too: the coordinator counts the
    // stream against the job's budget of streams yet to say hello, which
    // strangers on this host cannot fill.
    AddWorkerCredentials(&c->ctx, options.job_id, options.token);
    c->stream = stub->Connect(&c->ctx);
    v1::WorkerMessage hello;
    hello.mutable_hello()->set_job_id(options.job_id);
    hello.mutable_hello()->set_rank(options.rank);
    hello.mutable_hello()->set_attempt(options.attempt);
    hello.mutable_hello()->set_token(options.token);
    hello.mutable_hello()->set_advertise_addr(options.advertise_addr);
    hello.mutable_hello()->set_rendezvous_port(options.rendezvous_port);
    hello.mutable_hello()->set_replica_store_port(options.replica_store_port);
    hello.mutable_hello()->set_node(NodeName());
    if (std::optional<MembershipView> m =
            options.memberships == nullptr ? std::nullopt : options.memberships->Newest()) {
      ToProto(*m, hello.mutable_hello()->mutable_membership());
    }
    if (!c->stream->Write(hello) || !c->stream->Read(first)) {
      grpc::Status st = c->stream->Finish();
      if (standby != nullptr) *standby = IsStandbyAnswer(st);
      if (hint != nullptr) *hint = LeaderHint(c->ctx);
      return absl::Status(static_cast<absl::StatusCode>(st.error_code()),
                          absl::StrCat("the coordinator refused the worker: ", st.error_message()));
    }
    if (!first->has_welcome()) {
      c->ctx.TryCancel();
      c->stream->Finish();
      return absl::InternalError("the coordinator's first message was not a welcome");
    }
    if (const int64_t seen = highest_term.load(); first->term() < seen) {
      c->ctx.TryCancel();
      c->stream->Finish();
      if (standby != nullptr) *standby = true;
      return absl::UnavailableError(absl::StrCat("the coordinator at ", address, " leads with term ", first->term(),
                                                 ", replaced by term ", seen, " since"));
    }
    if (first->term() > highest_term.load()) highest_term.store(first->term());
    return c;
  }

  // One pass over the coordinators: the last leader first, then the list
  // in its order; a leader a standby names is tried next (even one not in
  // the list). A coordinator whose channel is not connected is passed over
  // (its connection is started: the next pass may find it). `*status`:
  // the leader's refusal (kRefused), or what each coordinator said.
  PassOutcome OpenLeader(v1::CoordinatorMessage* first, std::shared_ptr<Conn>* conn, absl::Status* status) {
    const std::vector<std::string> order = TryOrder(addresses, leader);
    std::deque<std::string> queue(order.begin(), order.end());
    std::set<std::string> tried;
    std::vector<std::string> said;
    bool reached = false;
    while (!queue.empty()) {
      const std::string address = queue.front();
      queue.pop_front();
      if (!tried.insert(address).second) continue;
      // A leader a standby named, outside the list, not connected yet: given a moment.
      const bool listed = std::find(addresses.begin(), addresses.end(), address) != addresses.end();
      if (!channels->Connected(address, listed ? std::chrono::milliseconds(0) : std::chrono::seconds(1))) {
        said.push_back(absl::StrCat(address, ": not connected"));
        continue;
      }
      reached = true;
      bool standby = false;
      std::string hint;
      absl::StatusOr<std::shared_ptr<Conn>> c = Open(address, first, &standby, &hint);
      if (c.ok()) {
        leader = address;
        *conn = *c;
        return PassOutcome::kTaken;
      }
      if (!standby) {
        leader = address;
        *status = c.status();
        return PassOutcome::kRefused;
      }
      said.push_back(absl::StrCat(address, ": ", c.status().message()));
      channels->Forget(address);  // its connection ends if it becomes the leader
      if (!hint.empty() && hint != address) {
        leader = hint;
        if (tried.count(hint) == 0) queue.push_front(hint);
      }
    }
    *status = absl::UnavailableError(absl::StrCat(
        reached ? "no coordinator of " : "cannot reach the coordinator at ", options.server, reached ? " leads" : "",
        said.size() > 1 || reached ? absl::StrCat(" (", absl::StrJoin(said, "; "), ")") : ""));
    return reached ? PassOutcome::kNoLeader : PassOutcome::kNoneConnected;
  }

  void Handle(const v1::CoordinatorMessage& msg) {
    // Fencing (issue 65): a command of a term lower than one seen comes
    // from a leader that has been replaced; it is not obeyed.
    if (const int64_t seen = highest_term.load(); msg.term() < seen) {
      if (stale_term_logged != msg.term()) {
        log::Warn(
            "ignored a command of leadership term {} (this worker has seen term {}): it comes from a replaced "
            "coordinator",
            msg.term(), seen);
        stale_term_logged = msg.term();
      }
      return;
    }
    if (msg.term() > highest_term.load()) highest_term.store(msg.term());
    if (msg.has_stop()) {
      log::Info("coordinator asked to stop: {}", msg.stop().reason());
      control->RequestStop();
    } else if (msg.has_checkpoint()) {
      const auto& c = msg.checkpoint();
      CheckpointRequest r;
      r.type = FromProto(c.type()).value_or(CheckpointType::kAuto);
      r.request_id = c.request_id();
      r.stop_after = c.stop_after();
      log::Info("coordinator asked for a checkpoint (request {}{})", r.request_id, r.stop_after ? ", then stop" : "");
      control->RequestCheckpoint(r);
    } else if (msg.has_membership()) {
      MembershipView offered = FromProto(msg.membership());
      // A delta applies to the membership this rank holds; one that does not
      // (it missed one, or the digest differs) asks for the whole list.
      if (const std::optional<MembershipDelta> delta = DeltaFromProto(msg.membership())) {
        std::optional<std::vector<int32_t>> ranks = delta->ApplyTo(held_membership_);
        if (!ranks) {
          log::Warn(
              "membership {} came as a change from epoch {}, which does not apply to the epoch held ({}): "
              "asking for the whole list",
              offered.epoch, delta->base_epoch, held_membership_.epoch);
          v1::WorkerMessage up;
          ToProto(ReplicaReport{ReplicaReport::Kind::kGroupBroken, held_membership_.epoch, 0,
                                "a membership delta did not apply"},
                  up.mutable_replica());
          Report(std::move(up));
          return;
        }
        offered.ranks = std::move(*ranks);
      }
      held_membership_ = offered;
      log::Info("coordinator offered membership {}", offered.Describe());
      if (options.memberships != nullptr) options.memberships->Offer(std::move(offered));
    } else if (msg.has_diagnose()) {
      // Answered here, on the reader thread: the training thread may be
      // the one that is stuck.
      FlightRecord record;
      if (options.flight_recorder != nullptr) {
        record = options.flight_recorder->Capture();
      } else {
        record.rank = options.rank;
        record.phase = "unknown (no flight recorder)";
      }
      v1::WorkerMessage up;
      ToProto(record, up.mutable_flight_record());
      up.mutable_flight_record()->set_request_id(msg.diagnose().request_id());
      Report(std::move(up));
    }
  }

  // Reconnects as soon as the coordinator answers again (training goes on
  // meanwhile): gRPC's channel paces the connection attempts (its reconnect
  // backoff, capped at a second), and the stream is opened the
  // moment the channel is connected. Null when giving up: finishing, the
  // coordinator refused this worker (a stale attempt is told to exit), or
  // reconnect_timeout passed.
  std::shared_ptr<Conn> Reconnect() {
    const auto deadline = std::chrono::steady_clock::now() + options.reconnect_timeout;
    auto finished = [this] {
      absl::MutexLock lock(&mu);
      return finishing && result_sent;
    };
    while (std::chrono::steady_clock::now() < deadline) {
      if (finished()) return nullptr;
      v1::CoordinatorMessage first;
      std::shared_ptr<Conn> c;
      absl::Status refused;
      const PassOutcome outcome = OpenLeader(&first, &c, &refused);
      if (outcome == PassOutcome::kTaken) {
        if (first.term() > 0) {
          log::Info("reconnected to the coordinator at {} (leadership term {})", leader, first.term());
        } else {
          log::Info("reconnected to the coordinator at {}", leader);
        }
        return c;
      }
      if (outcome == PassOutcome::kNoneConnected) {
        // Bounded, so that a finished worker does not wait for a coordinator.
        channels->AwaitAny(deadline);
        continue;
      }
      const auto code = refused.code();
      if (outcome == PassOutcome::kRefused &&
          (code == absl::StatusCode::kPermissionDenied || code == absl::StatusCode::kFailedPrecondition ||
           code == absl::StatusCode::kNotFound || code == absl::StatusCode::kInvalidArgument)) {
        log::Error("{}; this worker stops", std::string(refused.message()));
        control->RequestStop();
        return nullptr;
      }
      // Connected but not taken yet (the coordinator is starting, no
      // coordinator leads yet): ask again shortly.
      absl::MutexLock lock(&mu);
      auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return finishing && result_sent; };
      if (mu.AwaitWithTimeout(absl::Condition(&done), absl::Milliseconds(250))) return nullptr;
    }
    log::Error("no coordinator at {} for {} s; this worker stops", options.server,
               std::chrono::duration_cast<std::chrono::seconds>(options.reconnect_timeout).count());
    control->RequestStop();
    return nullptr;
  }

  void ReadLoop() {
    for (;;) {
      std::shared_ptr<Conn> c;
      {
        absl::MutexLock lock(&mu);
        c = conn;
      }
      v1::CoordinatorMessage msg;
      while (c->stream->Read(&msg)) Handle(msg);
      {
        absl::MutexLock lock(&mu);
        if (result_sent) break;  // the coordinator closes the stream after the result
        stream_broken = true;
      }
      log::Warn("lost the stream to the coordinator at {}; training goes on, metrics are kept", leader);
      std::shared_ptr<Conn> fresh = Reconnect();
      {
        absl::MutexLock wlock(&write_mu);
        c->ctx.TryCancel();
        c->stream->Finish();
        c->finished = true;
      }
      if (!fresh) {
        absl::MutexLock lock(&mu);
        gave_up = true;
        break;
      }
      absl::MutexLock lock(&mu);
      conn = fresh;
      stream_broken = false;
    }
    reader_done.set_value();
  }

  // Writes what is pending (releasing `mu` while writing); on failure keeps
  // it (bounded) for after a reconnection. False when the stream is gone.
  bool Flush() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if ((pending.empty() && reports.empty()) || stream_broken) return !stream_broken;
    std::vector<v1::WorkerMessage> msgs;
    std::deque<StepMetrics> batch;
    batch.swap(pending);
    std::deque<v1::WorkerMessage> sent;
    sent.swap(reports);
    if (!batch.empty()) {
      msgs.emplace_back();
      for (const StepMetrics& m : batch) ToProto(m, msgs.back().mutable_metrics()->add_samples());
    }
    msgs.insert(msgs.end(), sent.begin(), sent.end());
    std::shared_ptr<Conn> c = conn;
    mu.Unlock();
    bool ok = true;
    {
      absl::MutexLock wlock(&write_mu);
      for (const auto& msg : msgs) ok = ok && c->stream->Write(msg);
    }
    mu.Lock();
    if (!ok) {
      stream_broken = true;
      // Put them back in front of what came meanwhile, within the bound.
      for (auto it = batch.rbegin(); it != batch.rend(); ++it) pending.push_front(*it);
      while (pending.size() > options.max_buffered_samples) pending.pop_front();
      for (auto it = sent.rbegin(); it != sent.rend(); ++it) reports.push_front(*it);
      while (reports.size() > 1000) reports.pop_front();
    }
    return ok;
  }

  void Report(v1::WorkerMessage msg) {
    absl::MutexLock lock(&mu);
    reports.push_back(std::move(msg));
    while (reports.size() > 1000) reports.pop_front();
  }

  void SendLoop() {
    absl::MutexLock lock(&mu);
    auto due = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
      return finishing ||
             (!stream_broken && (!reports.empty() || static_cast<int32_t>(pending.size()) >= every_steps.load()));
    };
    while (!finishing) {
      mu.AwaitWithTimeout(absl::Condition(&due), absl::Seconds(1));
      Flush();
    }
  }
};

ControlClient::ControlClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

absl::StatusOr<std::unique_ptr<ControlClient>> ControlClient::Connect(const ControlOptions& options,
                                                                      TrainerControl* control) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->control = control;
  impl->every_steps = std::max(1, options.metrics_every_steps);
  absl::StatusOr<std::vector<std::string>> addresses = SplitAddresses(options.server);
  if (!addresses.ok()) return addresses.status();
  impl->addresses = *std::move(addresses);
  impl->channels =
      std::make_unique<CoordinatorChannels>(ClientCredentials(options.ca_pem, options.cert_pem, options.key_pem));
  for (const std::string& a : impl->addresses) impl->channels->Connected(a);  // connecting meanwhile
  // Until a coordinator is reached (connect_timeout), then: refused for
  // now by the leader — a joining worker early (its job queued, rank 0 not
  // joined yet), or too many streams waiting to say hello — it asks again
  // by the join rule (common/join_retry.h) until join_timeout; no
  // coordinator leading yet (standbys only), it asks again shortly, within
  // the join timeout too.
  const auto reach_by = std::chrono::steady_clock::now() + options.connect_timeout;
  JoinRetryOptions join;
  join.join_timeout = options.join_timeout;
  std::optional<JoinRetry> retry;
  const uint64_t seed = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ static_cast<uint32_t>(options.rank);
  v1::CoordinatorMessage first;
  std::shared_ptr<Conn> conn;
  absl::Status refused;
  for (;;) {
    const PassOutcome outcome = impl->OpenLeader(&first, &conn, &refused);
    if (outcome == PassOutcome::kTaken) break;
    const auto now = std::chrono::steady_clock::now();
    if (outcome == PassOutcome::kNoneConnected && !retry) {
      if (now >= reach_by) return refused;
      impl->channels->AwaitAny(reach_by);
      continue;
    }
    if (!retry) retry.emplace(join, now, seed);
    if (outcome == PassOutcome::kRefused) {
      const std::optional<std::chrono::milliseconds> wait = retry->NextWait(refused.code(), now);
      if (!wait) return refused;
      log::Info("{}; asking again in {} ms", std::string(refused.message()), wait->count());
      std::this_thread::sleep_for(*wait);
      continue;
    }
    if (now >= retry->deadline()) return refused;
    if (outcome == PassOutcome::kNoLeader) {
      log::Info("{}; asking again", std::string(refused.message()));
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
    } else {
      impl->channels->AwaitAny(retry->deadline());
    }
  }
  {
    absl::MutexLock lock(&impl->mu);
    impl->conn = conn;
  }
  impl->welcome.spec_json = first.welcome().spec_json();
  impl->welcome.world_size = first.welcome().world_size();
  impl->welcome.attempt = first.welcome().attempt();
  impl->welcome.master_addr = first.welcome().master_addr();
  impl->welcome.master_port = first.welcome().master_port();
  // Reconnections speak for the attempt joined.
  if (impl->options.attempt == 0) impl->options.attempt = impl->welcome.attempt;
  Impl* raw = impl.get();
  impl->reader = std::thread([raw] { raw->ReadLoop(); });
  impl->sender = std::thread([raw] { raw->SendLoop(); });
  return std::unique_ptr<ControlClient>(new ControlClient(std::move(impl)));
}

ControlClient::~ControlClient() {
  Impl& s = *impl_;
  std::shared_ptr<Conn> c;
  {
    absl::MutexLock lock(&s.mu);
    s.finishing = true;
    s.result_sent = true;  // nothing more to say: no reconnection either
    c = s.conn;
  }
  if (s.sender.joinable()) s.sender.join();
  if (s.reader.joinable()) {
    if (c) c->ctx.TryCancel();
    s.reader.join();
  }
}

const Welcome& ControlClient::welcome() const { return impl_->welcome; }

void ControlClient::set_metrics_every_steps(int32_t n) { impl_->every_steps = std::max(1, n); }

void ControlClient::OnStep(const StepMetrics& metrics) {
  Impl& s = *impl_;
  absl::MutexLock lock(&s.mu);  // the sender wakes once enough samples are pending
  s.pending.push_back(metrics);
  if (s.pending.size() > s.options.max_buffered_samples) s.pending.pop_front();
}

void ControlClient::OnCheckpoint(const CheckpointEvent& event) {
  v1::WorkerMessage msg;
  ToProto(event, msg.mutable_checkpoint());
  impl_->Report(std::move(msg));
}

void ControlClient::OnNote(const std::string& text) {
  v1::WorkerMessage msg;
  msg.mutable_note()->set_text(text);
  impl_->Report(std::move(msg));
}

void ControlClient::OnReplica(const ReplicaReport& report) {
  v1::WorkerMessage msg;
  ToProto(report, msg.mutable_replica());
  impl_->Report(std::move(msg));
}

void ControlClient::Finish(WorkerOutcome outcome, const std::string& error, int64_t final_step) {
  Impl& s = *impl_;
  {
    absl::MutexLock lock(&s.mu);
    s.finishing = true;
  }
  if (s.sender.joinable()) s.sender.join();
  bool broken = false;
  std::shared_ptr<Conn> c;
  {
    absl::MutexLock lock(&s.mu);
    // A coordinator that is away gets the reconnect window to come back,
    // unless the rank is told to leave meanwhile (a signal: checked often).
    auto back = [&s]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) { return !s.stream_broken || s.gave_up; };
    const auto deadline = std::chrono::steady_clock::now() + s.options.reconnect_timeout;
    while (!back() && std::chrono::steady_clock::now() < deadline) {
      if (s.options.leave_requested && s.options.leave_requested()) {
        log::Warn("told to leave while the coordinator is away: not waiting for it to come back");
        break;
      }
      s.mu.AwaitWithTimeout(absl::Condition(&back), absl::Milliseconds(200));
    }
    s.Flush();
    broken = s.stream_broken;
    c = s.conn;
    s.result_sent = true;
  }
  if (!broken && !c->finished) {
    v1::WorkerMessage msg;
    msg.mutable_result()->set_outcome(ToProto(outcome));
    msg.mutable_result()->set_error(error);
    msg.mutable_result()->set_final_step(final_step);
    absl::MutexLock wlock(&s.write_mu);
    c->stream->Write(msg);
    c->stream->WritesDone();
  } else {
    log::Warn("the coordinator is gone; the result (exit code {}) could not be delivered", ExitCodeOf(outcome));
  }
  // The coordinator closes the stream once it has the result; do not wait
  // forever for a coordinator that is gone.
  if (s.reader_done.get_future().wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    c->ctx.TryCancel();
  }
  s.reader.join();
  absl::MutexLock wlock(&s.write_mu);
  if (!c->finished) {
    grpc::Status st = c->stream->Finish();
    c->finished = true;
    if (!st.ok() && !broken && st.error_code() != grpc::StatusCode::CANCELLED) {
      log::Warn("closing the coordinator stream: {}", st.error_message());
    }
  }
}

}  // namespace trainyard
