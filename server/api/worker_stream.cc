#include "server/api/worker_stream.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/credentials.h"
#include "common/job_record.h"
#include "common/log.h"
#include "common/wire_convert.h"
#include "spdlog/spdlog.h"

namespace trainyard {
namespace {

// A membership goes as a delta where this stream sent its base
// (`*sent_epoch`: the epoch of the last one it sent, updated).
void CommandToProto(const WorkerCommand& cmd, v1::CoordinatorMessage* down, int64_t* sent_epoch) {
  if (cmd.kind == WorkerCommand::Kind::kCheckpoint) {
    auto* c = down->mutable_checkpoint();
    c->set_request_id(cmd.request_id);
    c->set_type(ToProto(cmd.type));
    c->set_stop_after(cmd.stop_after);
  } else if (cmd.kind == WorkerCommand::Kind::kDiagnose) {
    down->mutable_diagnose()->set_request_id(cmd.request_id);
  } else if (cmd.kind == WorkerCommand::Kind::kMembership && cmd.membership) {
    if (cmd.delta && cmd.delta->base_epoch == *sent_epoch) {
      ToProto(*cmd.membership, *cmd.delta, down->mutable_membership());
    } else {
      ToProto(*cmd.membership, down->mutable_membership());
    }
    *sent_epoch = cmd.membership->epoch;
  } else {
    down->mutable_stop()->set_reason(cmd.reason);
  }
}

// Bounds on what a hello carries: a stranger sends it before anything is
// known of them, and its strings reach the log, the job's events and
// GetJob. Worker tokens are 32 hex digits; host and node names at most 255
// characters (RFC 1123); a membership's reason is the coordinator's own text.
constexpr size_t kMaxTokenBytes = 256;
constexpr size_t kMaxHostBytes = 255;
constexpr size_t kMaxReasonBytes = 1024;
constexpr int kMaxMembershipRanks = 1 << 16;  // kMaxNumProcessesCeiling

// Printable ASCII (no spaces when `spaces` is false).
bool Printable(const std::string& s, bool spaces) {
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c >= 0x7f || (c == ' ' && !spaces)) return false;
  }
  return true;
}

// Every field of a hello within its bounds and of its form, before any of
// it is looked up or logged: INVALID_ARGUMENT naming the first that is not.
absl::Status CheckHello(const v1::WorkerHello& h) {
  if (!IsJobId(h.job_id())) {
    return absl::InvalidArgumentError(absl::StrCat("field 'job_id': not a job id (", std::string(kJobIdPrefix), " and ",
                                                   kJobIdHexDigits, " hex digits)"));
  }
  if (h.token().size() > kMaxTokenBytes) {
    return absl::InvalidArgumentError(absl::StrCat("field 'token': at most ", kMaxTokenBytes, " bytes"));
  }
  if (h.advertise_addr().size() > kMaxHostBytes || !Printable(h.advertise_addr(), false)) {
    return absl::InvalidArgumentError(
        absl::StrCat("field 'advertise_addr': at most ", kMaxHostBytes, " characters of printable ASCII, no spaces"));
  }
  if (h.node().size() > kMaxHostBytes || !Printable(h.node(), false)) {
    return absl::InvalidArgumentError(
        absl::StrCat("field 'node': at most ", kMaxHostBytes, " characters of printable ASCII, no spaces"));
  }
  const v1::Membership& m = h.membership();
  if (m.store_addr().size() > kMaxHostBytes || !Printable(m.store_addr(), false)) {
    return absl::InvalidArgumentError(absl::StrCat("field 'membership.store_addr': at most ", kMaxHostBytes,
                                                   " characters of printable ASCII, no spaces"));
  }
  if (m.reason().size() > kMaxReasonBytes) {
    return absl::InvalidArgumentError(absl::StrCat("field 'membership.reason': at most ", kMaxReasonBytes, " bytes"));
  }
  if (m.ranks_size() > kMaxMembershipRanks || m.removed_size() > kMaxMembershipRanks ||
      m.added_size() > kMaxMembershipRanks) {
    return absl::InvalidArgumentError(
        absl::StrCat("field 'membership': at most ", kMaxMembershipRanks, " ranks in each list"));
  }
  return absl::OkStatus();
}

std::string MetadataValue(const grpc::CallbackServerContext* ctx, const char* key) {
  const auto& md = ctx->client_metadata();
  auto it = md.find(key);
  return it == md.end() ? std::string() : std::string(it->second.data(), it->second.size());
}

// The job whose worker token the stream presented in its metadata
// (common/credentials.h), if it holds it.
std::optional<std::string> ProvenJob(const grpc::CallbackServerContext* ctx, WorkerHandler* manager) {
  std::string job = MetadataValue(ctx, kWorkerJobMetadata);
  const std::string token = MetadataValue(ctx, kWorkerTokenMetadata);
  if (!IsJobId(job) || token.empty() || token.size() > kMaxTokenBytes) return std::nullopt;
  if (!manager->HoldsWorkerToken(job, token)) return std::nullopt;
  return job;
}

}  // namespace

WorkerStream::WorkerStream(grpc::CallbackServerContext* ctx, WorkerHandler* manager, HelloGuard* hellos,
                           std::function<int64_t()> term)
    : ctx_(ctx), manager_(manager), term_(std::move(term)) {
  if (absl::Status s = hellos->Start(ctx, ProvenJob(ctx, manager)); !s.ok()) {
    End(ToGrpcStatus(s));
    return;
  }
  waiting_.emplace(hellos, ctx);
  StartRead(&in_);
}

void WorkerStream::OnReadDone(bool ok) {
  if (!ok) {
    // The worker closed its side, the stream broke, or the hello's time ran out.
    if (!channel_) {
      End(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                       "the first message must be a hello, within 5 s of the stream's start"));
    } else {
      End(grpc::Status::OK);
    }
    return;
  }
  if (!channel_) {
    Hello();
    return;
  }
  if (Handle()) {
    StartRead(&in_);
  } else {
    End(grpc::Status::OK);
  }
}

void WorkerStream::Hello() {
  waiting_.reset();
  if (!in_.has_hello()) {
    End(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                     "the first message must be a hello, within 5 s of the stream's start"));
    return;
  }
  if (absl::Status s = CheckHello(in_.hello()); !s.ok()) {
    spdlog::warn("a worker stream from {} refused: {} (job_id \"{}\")", log::Escaped(ctx_->peer()),
                 std::string(s.message()), log::Escaped(in_.hello().job_id(), 80));
    End(ToGrpcStatus(s));
    return;
  }
  hello_ = in_.hello();
  auto attached = manager_->AttachWorker(hello_.job_id(), hello_.rank(), hello_.attempt(), hello_.token(),
                                         hello_.advertise_addr(), hello_.rendezvous_port(), hello_.replica_store_port(),
                                         FromProto(hello_.membership()), hello_.node());
  if (!attached.ok()) {
    spdlog::warn("worker for job {} rank {} refused: {}", hello_.job_id(), hello_.rank(),
                 log::Escaped(std::string(attached.status().message()), 400));
    End(ToGrpcStatus(attached.status()));
    return;
  }
  attempt_ = attached->attempt;
  {
    std::lock_guard<std::mutex> lock(mu_);
    channel_ = attached->channel;
    // The welcome first; the commands pushed meanwhile wait in the channel.
    auto* w = out_.mutable_welcome();
    w->set_spec_json(attached->spec_json);
    w->set_world_size(attached->world_size);
    w->set_attempt(attempt_);
    w->set_master_addr(attached->master_addr);
    w->set_master_port(attached->master_port);
    out_.set_term(term_ ? term_() : 0);
    writing_ = true;
    StartWrite(&out_);
  }
  channel_->SetListener([this] { Pump(); });
  StartRead(&in_);
}

bool WorkerStream::Handle() {
  const std::string& job = hello_.job_id();
  const int32_t rank = hello_.rank();
  if (in_.has_metrics()) {
    std::vector<StepMetrics> samples;
    samples.reserve(in_.metrics().samples_size());
    for (const auto& s : in_.metrics().samples()) {
      StepMetrics m = FromProto(s);
      m.rank = rank;  // a worker speaks only for its own rank
      samples.push_back(std::move(m));
    }
    manager_->ReportMetrics(job, attempt_, samples);
  } else if (in_.has_checkpoint()) {
    manager_->ReportCheckpoint(job, attempt_, FromProto(in_.checkpoint()), rank);
  } else if (in_.has_note()) {
    manager_->ReportNote(job, attempt_, rank, in_.note().text());
  } else if (in_.has_flight_record()) {
    FlightRecord record = FromProto(in_.flight_record());
    record.rank = rank;  // a worker speaks only for its own rank
    manager_->ReportFlightRecord(job, attempt_, in_.flight_record().request_id(), std::move(record));
  } else if (in_.has_replica()) {
    // A kind this coordinator does not know is passed over.
    if (const std::optional<ReplicaReport> report = FromProto(in_.replica())) {
      manager_->ReportReplica(job, attempt_, rank, *report);
    }
  } else if (in_.has_result()) {
    manager_->ReportResult(job, attempt_, rank, FromProto(in_.result().outcome()), in_.result().error());
    got_result_ = true;
    return false;
  }
  return true;
}

void WorkerStream::Pump() {
  std::lock_guard<std::mutex> lock(mu_);
  if (writing_ || ended_ || !channel_) return;
  WorkerCommand cmd;
  if (!channel_->TryPop(&cmd)) return;
  out_.Clear();
  CommandToProto(cmd, &out_, &membership_sent_);
  out_.set_term(term_ ? term_() : 0);
  writing_ = true;
  StartWrite(&out_);
}

void WorkerStream::OnWriteDone(bool ok) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    writing_ = false;
    if (!ok) return;  // the stream broke: its read ends it
  }
  Pump();
}

void WorkerStream::End(const grpc::Status& status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ended_) return;
    ended_ = true;
  }
  waiting_.reset();
  if (channel_) {
    channel_->SetListener(nullptr);
    manager_->DetachWorker(hello_.job_id(), attempt_, hello_.rank(), channel_);
    if (!got_result_) spdlog::info("job {} rank {}: stream closed before a result", hello_.job_id(), hello_.rank());
  }
  Finish(status);
}

void WorkerStream::OnDone() {
  if (channel_) channel_->SetListener(nullptr);  // no command reaches a stream gone
  delete this;
}

}  // namespace trainyard
