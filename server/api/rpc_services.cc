#include "server/api/rpc_services.h"

#include <grpc/grpc_security_constants.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/paths.h"
#include "common/secrets.h"
#include "common/wire_convert.h"
#include "server/api/worker_stream.h"
#include "server/auth/access.h"
#include "spdlog/spdlog.h"

namespace trainyard {
namespace {

constexpr int64_t kDefaultLogTail = 1 << 20;
constexpr int64_t kMaxLogTail = 16 << 20;
constexpr size_t kMaxIdLength = 64;

absl::Status CheckId(const std::string& id) {
  if (id.empty()) return absl::InvalidArgumentError("field 'id': a job id is required");
  if (id.size() > kMaxIdLength) return absl::InvalidArgumentError("field 'id': too long to be a job id");
  return absl::OkStatus();
}

}  // namespace

grpc::Status JobServiceImpl::Authenticate(grpc::ServerContext* ctx, Caller* caller) const {
  if (identities_ == nullptr) {
    *caller = Caller{};
    return grpc::Status::OK;
  }
  const auto& md = ctx->client_metadata();
  auto it = md.find("authorization");
  const std::string authorization = it == md.end() ? "" : std::string(it->second.data(), it->second.size());
  // Under mutual TLS the client certificate may name the user.
  Identities::PeerCertificate cert;
  if (auto auth = ctx->auth_context(); auth != nullptr && auth->IsPeerAuthenticated()) {
    cert.verified = true;
    for (const auto& v : auth->FindPropertyValues(GRPC_X509_SUBJECT_PROPERTY_NAME))
      cert.subject.assign(v.data(), v.size());
    for (const auto& v : auth->FindPropertyValues(GRPC_X509_PEM_CERT_PROPERTY_NAME))
      cert.pem.assign(v.data(), v.size());
  }
  auto who = identities_->Authenticate(authorization, cert);
  if (!who.ok()) return ToGrpcStatus(who.status());
  *caller = *std::move(who);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::Authorize(const Caller& who, const std::string& id, const char* action, bool read_only,
                                       const absl::Status& fields) const {
  if (auto s = CheckId(id); !s.ok()) return ToGrpcStatus(s);
  if (!fields.ok()) return ToGrpcStatus(fields);
  if (auto s = manager_->Authorize(who, id, action, read_only); !s.ok()) return ToGrpcStatus(s);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::SubmitJob(const Caller& caller, const v1::SubmitJobRequest* req,
                                       v1::SubmitJobResponse* resp, const CallContext& call) {
  auto job = manager_->Submit(req->spec(), req->accelerate_config(), caller);
  if (!job.ok()) {
    std::string source = req->source_name().empty() ? "" : absl::StrCat(req->source_name(), ": ");
    return grpc::Status(static_cast<grpc::StatusCode>(job.status().code()),
                        absl::StrCat(source, job.status().message()));
  }
  ToProto(*job, {}, resp->mutable_job());
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::GetJob(const Caller& caller, const v1::GetJobRequest* req, v1::GetJobResponse* resp,
                                    const CallContext& call) {
  if (grpc::Status auth = Authorize(caller, req->id(), "see", true); !auth.ok()) return auth;
  if (req->rank_page_size() < 0) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "field 'rank_page_size': must be >= 0");
  }
  int32_t first = 0;
  if (!req->rank_page_token().empty() && (!absl::SimpleAtoi(req->rank_page_token(), &first) || first < 0)) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("field 'rank_page_token': '", req->rank_page_token(),
                                     "' is not a token GetJob returned (the next page's first rank)"));
  }
  const int32_t count = req->rank_page_size() == 0
                            ? JobRequestHandler::kDefaultRankPageSize
                            : std::min(req->rank_page_size(), JobRequestHandler::kMaxRankPageSize);
  auto job = manager_->Get(req->id());
  if (!job.ok()) return ToGrpcStatus(job.status());
  HideSecrets(caller, &*job);
  auto events = manager_->Events(req->id());
  if (!events.ok()) return ToGrpcStatus(events.status());
  ToProto(*job, *events, resp->mutable_job());
  std::vector<StepMetrics> samples = manager_->RankSamples(req->id(), first, count);
  for (const StepMetrics& m : samples) ToProto(m, resp->mutable_job()->add_ranks());
  std::optional<JobRequestHandler::Placement> p = manager_->PlacementOf(req->id(), first, count);
  // More ranks after this page: the job has them, and it has not ended (an
  // ended job has no ranks to page through).
  if (!IsTerminal(job->state) && static_cast<int64_t>(first) + count < job->num_processes) {
    resp->set_next_rank_page_token(std::to_string(first + count));
  }
  if (p) {
    for (const auto& [rank, node] : p->nodes) {
      v1::RankPlace* place = resp->mutable_job()->add_places();
      place->set_rank(rank);
      place->set_node(node);
    }
    // Only the Slurm launcher gives its attempts an id of its own.
    if (!p->external_id.empty()) resp->mutable_job()->set_slurm_job_id(p->external_id);
  }
  if (auto replicas = manager_->Replicas(req->id())) ToProto(*replicas, resp->mutable_job()->mutable_replicas());
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::ListJobs(const Caller& caller, const v1::ListJobsRequest* req, v1::ListJobsResponse* resp,
                                      const CallContext& call) {
  std::set<JobState> states;
  for (int s : req->states()) {
    auto st = FromProto(static_cast<v1::JobState>(s));
    if (!st) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, absl::StrCat("field 'states': unknown state ", s));
    states.insert(*st);
  }
  if (req->page_size() < 0) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "field 'page_size': must be >= 0");
  }
  if (req->view() != v1::JOB_VIEW_UNSPECIFIED && req->view() != v1::JOB_VIEW_BASIC &&
      req->view() != v1::JOB_VIEW_FULL) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, absl::StrCat("field 'view': unknown view ", req->view()));
  }
  auto page =
      manager_->List(states, req->page_size(), req->page_token(), caller, req->all_users(), req->newest_first());
  if (!page.ok()) return ToGrpcStatus(page.status());
  const bool full = req->view() == v1::JOB_VIEW_FULL;
  for (JobRecord& j : page->jobs) {
    if (full) HideSecrets(caller, &j);
    ToProto(j, {}, resp->add_jobs(), full);
  }
  resp->set_next_page_token(page->next_page_token);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::GetQueue(const Caller& caller, const v1::GetQueueRequest* req, v1::GetQueueResponse* resp,
                                      const CallContext& call) {
  if (req->page_size() < 0) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "field 'page_size': must be >= 0");
  }
  int32_t skip = 0;
  if (!req->page_token().empty() && (!absl::SimpleAtoi(req->page_token(), &skip) || skip < 0)) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("field 'page_token': '", req->page_token(), "' is not a token GetQueue returned"));
  }
  const int32_t count = req->page_size() == 0 ? 1000 : std::min(req->page_size(), 10000);
  auto queue = manager_->Queue(caller, req->all_users(), skip, count);
  if (!queue.ok()) return ToGrpcStatus(queue.status());
  resp->set_total_size(queue->total);
  if (static_cast<int64_t>(skip) + count < queue->total) resp->set_next_page_token(std::to_string(skip + count));
  for (const QueuedJob& q : queue->jobs) {
    v1::QueueEntry* e = resp->add_entries();
    e->set_id(q.job.id);
    e->set_name(q.job.name);
    e->set_owner(q.job.owner);
    e->set_priority_class(q.priority_class);
    e->set_priority(q.job.priority);
    e->set_position(q.position);
    e->set_num_processes(q.job.num_processes);
    e->set_resource(!q.local ? "none" : q.kind == ResourcePool::Kind::kGpus ? "gpus" : "slots");
    e->set_reason(q.reason);
    e->set_estimated_start_unix_millis(q.estimated_start_unix_millis);
    e->set_fair_share_usage(q.owner_usage);
    e->set_preemptible(q.preemptible);
  }
  resp->set_free_slots(manager_->free_slots());
  resp->set_free_gpus(manager_->free_gpus());
  auto usage = manager_->Usage(caller, req->all_users());
  if (!usage.ok()) return ToGrpcStatus(usage.status());
  for (const QuotaUse& u : *usage) {
    v1::QuotaUsage* out = resp->add_usage();
    out->set_name(u.name);
    out->set_group(u.group);
    out->set_slots(u.slots);
    out->set_gpus(u.gpus);
    out->set_queued_jobs(u.queued_jobs);
    out->set_slots_quota(u.slots_quota);
    out->set_gpus_quota(u.gpus_quota);
    out->set_queued_jobs_quota(u.queued_jobs_quota);
  }
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::CancelJob(const Caller& caller, const v1::CancelJobRequest* req,
                                       v1::CancelJobResponse* resp, const CallContext& call) {
  if (grpc::Status auth = Authorize(caller, req->id(), "cancel", false); !auth.ok()) return auth;
  auto job = manager_->Cancel(req->id(), req->checkpoint());
  if (!job.ok()) return ToGrpcStatus(job.status());
  ToProto(*job, {}, resp->mutable_job());
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::DeleteJob(const Caller& caller, const v1::DeleteJobRequest* req,
                                       v1::DeleteJobResponse* resp, const CallContext& call) {
  if (grpc::Status auth = Authorize(caller, req->id(), "delete", false); !auth.ok()) return auth;
  return ToGrpcStatus(manager_->Delete(req->id(), caller));
}

grpc::Status JobServiceImpl::ScaleJob(const Caller& caller, const v1::ScaleJobRequest* req, v1::ScaleJobResponse* resp,
                                      const CallContext& call) {
  const absl::Status fields = req->num_processes() > 0
                                  ? absl::OkStatus()
                                  : absl::InvalidArgumentError(absl::StrCat(
                                        "field 'num_processes': must be at least 1, got ", req->num_processes()));
  if (grpc::Status auth = Authorize(caller, req->id(), "scale", false, fields); !auth.ok()) return auth;
  auto job = manager_->Scale(req->id(), req->num_processes(), caller);
  if (!job.ok()) return ToGrpcStatus(job.status());
  ToProto(*job, {}, resp->mutable_job());
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::CheckpointJob(const Caller& caller, const v1::CheckpointJobRequest* req,
                                           v1::CheckpointJobResponse* resp, const CallContext& call) {
  std::optional<CheckpointType> type = FromProto(req->type());
  const absl::Status fields =
      type ? absl::OkStatus()
           : absl::InvalidArgumentError(absl::StrCat("field 'type': unknown checkpoint type ", req->type()));
  if (grpc::Status auth = Authorize(caller, req->id(), "checkpoint", false, fields); !auth.ok()) return auth;
  // With `wait`, until the client's deadline (at most an hour), in slices so
  // that a cancelled call or a shutdown ends the wait: first for a job that
  // is still starting to run, then for its checkpoint.
  const auto limit = std::min(call.deadline, std::chrono::system_clock::now() + std::chrono::hours(1));
  auto slice_of_wait = [&] {
    return std::min(limit, std::chrono::system_clock::now() + std::chrono::milliseconds(500));
  };
  for (absl::Status running = absl::OkStatus(); req->wait();) {
    running = manager_->AwaitRunning(req->id(), slice_of_wait());
    if (running.ok()) break;
    if (std::chrono::system_clock::now() >= limit) {
      return ToGrpcStatus(absl::DeadlineExceededError(
          absl::StrCat(running.message(), " at the end of the wait; no checkpoint was requested")));
    }
    if ((call.cancelled && call.cancelled()) || shutting_down_) {
      return grpc::Status(grpc::StatusCode::CANCELLED, "wait cancelled");
    }
  }
  auto request_id = manager_->RequestCheckpoint(req->id(), *type);
  if (!request_id.ok()) return ToGrpcStatus(request_id.status());
  resp->set_request_id(*request_id);
  if (!req->wait()) return grpc::Status::OK;
  for (;;) {
    auto done = manager_->WaitCheckpoint(req->id(), *request_id, slice_of_wait());
    if (done.ok()) {
      ToProto(*done, resp->mutable_checkpoint());
      if (done->refused) {
        return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, absl::StrCat("no checkpoint: ", done->error));
      }
      if (!done->ok) {
        return grpc::Status(grpc::StatusCode::INTERNAL, absl::StrCat("checkpoint failed: ", done->error));
      }
      return grpc::Status::OK;
    }
    if (done.status().code() != absl::StatusCode::kDeadlineExceeded || std::chrono::system_clock::now() >= limit) {
      return ToGrpcStatus(done.status());
    }
    if ((call.cancelled && call.cancelled()) || shutting_down_) {
      return grpc::Status(grpc::StatusCode::CANCELLED, "wait cancelled");
    }
  }
}

grpc::Status JobServiceImpl::ListCheckpoints(const Caller& caller, const v1::ListCheckpointsRequest* req,
                                             v1::ListCheckpointsResponse* resp, const CallContext& call) {
  if (grpc::Status auth = Authorize(caller, req->id(), "see the checkpoints of", true); !auth.ok()) return auth;
  auto list = manager_->Checkpoints(req->id());
  if (!list.ok()) return ToGrpcStatus(list.status());
  for (const CheckpointRecord& r : *list) ToProto(r, resp->add_checkpoints());
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::ResumeJob(const Caller& caller, const v1::ResumeJobRequest* req,
                                       v1::ResumeJobResponse* resp, const CallContext& call) {
  const absl::Status fields =
      req->from().size() > 4096 ? absl::InvalidArgumentError("field 'from': too long") : absl::OkStatus();
  if (grpc::Status auth = Authorize(caller, req->id(), "resume", false, fields); !auth.ok()) return auth;
  auto job = manager_->Resume(req->id(), req->from(), req->num_processes(), caller);
  if (!job.ok()) return ToGrpcStatus(job.status());
  ToProto(*job, {}, resp->mutable_job());
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::GetJoinInfo(const Caller& caller, const v1::GetJoinInfoRequest* req,
                                         v1::GetJoinInfoResponse* resp, const CallContext& call) {
  if (grpc::Status auth = Authorize(caller, req->id(), "join", false); !auth.ok()) return auth;
  auto info = manager_->GetJoinInfo(req->id());
  if (!info.ok()) return ToGrpcStatus(info.status());
  resp->set_job_id(info->job_id);
  resp->set_token(info->token);
  resp->set_world_size(info->world_size);
  resp->set_attempt(info->attempt);
  resp->set_coordinator_addr(info->coordinator_addr);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::DiagnoseJob(const Caller& caller, const v1::DiagnoseJobRequest* req,
                                         v1::DiagnoseJobResponse* resp, const CallContext& call) {
  const absl::Status fields = req->timeout_ms() < 0 || req->timeout_ms() > 60000
                                  ? absl::InvalidArgumentError(absl::StrCat(
                                        "field 'timeout_ms': must be between 0 and 60000, got ", req->timeout_ms()))
                                  : absl::OkStatus();
  if (grpc::Status auth = Authorize(caller, req->id(), "diagnose", false, fields); !auth.ok()) return auth;
  const std::chrono::milliseconds wait(req->timeout_ms() == 0 ? 5000 : req->timeout_ms());
  auto request_id = manager_->RequestDiagnosis(req->id(), wait);
  if (!request_id.ok()) return ToGrpcStatus(request_id.status());
  auto d = manager_->WaitDiagnosis(*request_id);
  if (!d.ok()) return ToGrpcStatus(d.status());
  resp->set_verdict(d->result.verdict);
  resp->set_attempt(d->attempt);
  for (int32_t r : d->result.behind_ranks) resp->add_behind_ranks(r);
  for (int32_t r : d->result.silent_ranks) resp->add_silent_ranks(r);
  for (const auto& [rank, record] : d->answers) ToProto(record, resp->add_ranks());
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::GetJobHistory(const Caller& caller, const v1::GetJobHistoryRequest* req,
                                           v1::GetJobHistoryResponse* resp, const CallContext&) {
  absl::Status fields =
      req->series_size() > 64 ? absl::InvalidArgumentError("field 'series': at most 64 names") : absl::OkStatus();
  const std::vector<std::string>& known = JobHistory::SeriesNames();
  for (const std::string& name : req->series()) {
    if (fields.ok() && (name.empty() || name.size() > JobHistory::kMaxValueNameBytes)) {
      fields = absl::InvalidArgumentError(
          absl::StrCat("field 'series': '", name.substr(0, 64), "' is no series' name (", absl::StrJoin(known, ", "),
                       ", or a name of at most ", JobHistory::kMaxValueNameBytes, " bytes the job's script reports)"));
    }
  }
  if (grpc::Status auth = Authorize(caller, req->id(), "see the history of", true, fields); !auth.ok()) return auth;
  auto history = manager_->History(req->id());
  if (!history.ok()) return ToGrpcStatus(history.status());
  auto wanted = [&](const std::string& name) {
    return req->series().empty() || std::find(req->series().begin(), req->series().end(), name) != req->series().end();
  };
  // The built-in series in their order, then the script's own by name.
  std::vector<std::string> names = known;
  for (const auto& [name, s] : history->series()) {
    if (std::find(known.begin(), known.end(), name) == known.end()) names.push_back(name);
  }
  for (const std::string& name : names) {
    auto it = history->series().find(name);
    if (it == history->series().end() || !wanted(name)) continue;
    v1::HistorySeries* out = resp->add_series();
    out->set_name(name);
    out->set_samples(it->second.added());
    for (const HistoryPoint& p : it->second.points()) {
      if (p.unix_millis <= req->since_unix_millis()) continue;
      v1::HistoryPoint* q = out->add_points();
      q->set_step(p.step);
      q->set_unix_millis(p.unix_millis);
      q->set_value(p.value);
    }
  }
  auto events = manager_->Events(req->id());
  if (!events.ok()) return ToGrpcStatus(events.status());
  for (const JobEvent& e : *events) {
    if (e.unix_millis <= req->since_unix_millis()) continue;
    v1::JobEvent* out = resp->add_events();
    out->set_unix_millis(e.unix_millis);
    out->set_state(ToProto(e.state));
    out->set_reason(e.reason);
  }
  auto checkpoints = manager_->Checkpoints(req->id());
  if (!checkpoints.ok()) return ToGrpcStatus(checkpoints.status());
  for (const CheckpointRecord& r : *checkpoints) {
    if (r.checkpoint.unix_millis > req->since_unix_millis()) ToProto(r, resp->add_checkpoints());
  }
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::WatchJob(grpc::ServerContext* ctx, const v1::WatchJobRequest* req,
                                      grpc::ServerWriter<v1::WatchJobResponse>* writer) {
  Caller caller;
  if (grpc::Status auth = Authenticate(ctx, &caller); !auth.ok()) return auth;
  if (grpc::Status auth = Authorize(caller, req->id(), "watch", true); !auth.ok()) return auth;
  auto watch = manager_->Watch(req->id());
  if (!watch.ok()) return ToGrpcStatus(watch.status());
  JobUpdate update;
  while (!ctx->IsCancelled() && !shutting_down_) {
    if (!(*watch)->Next(&update, std::chrono::milliseconds(200))) {
      if ((*watch)->closed_and_drained()) break;
      continue;
    }
    v1::WatchJobResponse resp;
    if (update.job) {
      HideSecrets(caller, &*update.job);
      ToProto(*update.job, {}, resp.mutable_job());
    }
    if (update.metrics) ToProto(*update.metrics, resp.mutable_metrics());
    if (!writer->Write(resp)) break;
  }
  if (shutting_down_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the server is shutting down");
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::GetLogs(const Caller& caller, const v1::GetLogsRequest* req, v1::GetLogsResponse* resp,
                                     const CallContext& call) {
  const absl::Status fields =
      req->tail_bytes() < 0 || req->tail_bytes() > kMaxLogTail
          ? absl::InvalidArgumentError(absl::StrCat("field 'tail_bytes': must be between 0 and ", kMaxLogTail))
      : req->offset() < 0  ? absl::InvalidArgumentError("field 'offset': must not be negative")
      : req->attempt() < 0 ? absl::InvalidArgumentError("field 'attempt': must not be negative (0: the latest)")
                           : absl::OkStatus();
  if (grpc::Status auth = Authorize(caller, req->id(), "read the logs of", true, fields); !auth.ok()) {
    return auth;
  }
  auto found = manager_->LogPath(req->id(), req->rank(), req->attempt());
  if (!found.ok()) return ToGrpcStatus(found.status());
  const auto& [path, attempt] = *found;
  // A job's log directory may be its owner's account's: its files are read
  // only when they are regular files, never through a symbolic link there.
  absl::StatusOr<int> fd = OpenRegularFileNoFollow(path);
  if (!fd.ok()) {
    if (absl::IsNotFound(fd.status())) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, absl::StrCat("no log file at ", path));
    }
    return ToGrpcStatus(fd.status());
  }
  struct FdCloser {
    int fd;
    ~FdCloser() { close(fd); }
  } closer{*fd};
  struct stat st {};
  fstat(*fd, &st);
  const int64_t size = st.st_size;
  const int64_t tail = req->tail_bytes() == 0 ? kDefaultLogTail : req->tail_bytes();
  // The end of the log; from `offset`, what was added since (a follower).
  const int64_t from = req->offset() > 0 ? std::min(req->offset(), size) : (size > tail ? size - tail : 0);
  const int64_t to = req->offset() > 0 ? std::min(size, from + tail) : size;
  std::string content(static_cast<size_t>(to - from), '\0');
  size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = pread(*fd, content.data() + done, content.size() - done, from + static_cast<int64_t>(done));
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  content.resize(done);
  resp->set_path(path);
  resp->set_content(std::move(content));
  resp->set_truncated(req->offset() == 0 && from > 0);
  resp->set_size(to);
  resp->set_attempt(attempt);
  return grpc::Status::OK;
}

grpc::ServerBidiReactor<v1::WorkerMessage, v1::CoordinatorMessage>* WorkerServiceImpl::Connect(
    grpc::CallbackServerContext* ctx) {
  return new WorkerStream(ctx, manager_, &hellos_, term_);
}

}  // namespace trainyard
