// JobService's sweep calls: SubmitSweep, GetSweep, ListSweeps, CancelSweep
// over the SweepManager (server/sweeps/sweep_manager.h).
#include "absl/strings/str_cat.h"
#include "common/wire_convert.h"
#include "server/api/rpc_services.h"

namespace trainyard {
namespace {

constexpr size_t kMaxSweepSpec = 1 << 20;

grpc::Status NoSweeps() { return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "this server runs no sweeps"); }

}  // namespace

void SweepToProto(const SweepStatus& sweep, v1::Sweep* out) {
  const SweepRecord& r = sweep.record;
  out->set_id(r.id);
  out->set_name(r.name);
  out->set_owner(r.owner);
  out->set_state(ToProto(r.state));
  out->set_reason(r.reason);
  out->set_spec(r.spec_text);
  for (const SweepParameter& p : sweep.spec.parameters) {
    out->add_parameters(p.path);
    switch (p.kind) {
      case SweepParameter::Kind::kChoice: out->add_parameter_kinds("choice"); break;
      case SweepParameter::Kind::kUniform: out->add_parameter_kinds("uniform"); break;
      case SweepParameter::Kind::kLogUniform: out->add_parameter_kinds("log_uniform"); break;
      case SweepParameter::Kind::kInt: out->add_parameter_kinds("int"); break;
    }
  }
  out->set_metric(sweep.spec.metric);
  out->set_maximize(sweep.spec.maximize);
  out->set_searcher(SweepSearcher::Name(sweep.spec.searcher.kind));
  out->set_max_trials(sweep.spec.max_trials);
  out->set_total_trials(static_cast<int32_t>(TotalTrials(sweep.spec)));
  out->set_metric_scope(MetricScopeName(sweep.spec));
  out->set_concurrency(sweep.spec.concurrency);
  for (const SweepTrialRecord& t : r.trials) {
    v1::SweepTrial* p = out->add_trials();
    p->set_number(t.number);
    p->set_job_id(t.job_id);
    for (const std::string& v : t.values) p->add_values(v);
    p->set_state(ToProto(t.state));
    p->set_early_stopped(t.early_stopped);
    p->set_rungs_passed(t.rungs_passed);
    p->set_has_metric(t.best_metric.has_value());
    p->set_best_metric(t.best_metric.value_or(0));
    p->set_step(t.step);
    p->set_rank_seconds(t.rank_seconds);
    p->set_reason(t.reason);
    p->set_parent(t.parent);
    p->set_resumed_from_step(t.from_step);
  }
  out->set_best_trial(sweep.best_trial);
  out->set_created_unix_millis(r.created_unix_millis);
  out->set_ended_unix_millis(r.ended_unix_millis);
  for (int64_t rung : sweep.rungs) out->add_rungs(rung);
  for (const JobEvent& e : sweep.events) {
    v1::JobEvent* p = out->add_events();
    p->set_unix_millis(e.unix_millis);
    p->set_state(ToProto(e.state));
    p->set_reason(e.reason);
  }
}

grpc::Status JobServiceImpl::SubmitSweep(const Caller& caller, const v1::SubmitSweepRequest* req,
                                         v1::SubmitSweepResponse* resp, const CallContext&) {
  if (sweeps_ == nullptr) return NoSweeps();
  if (shutting_down_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the server is shutting down");
  if (req->spec().size() > kMaxSweepSpec) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("field 'spec': ", req->spec().size(), " bytes, more than ", kMaxSweepSpec));
  }
  auto sweep = sweeps_->Submit(req->spec(), caller);
  if (!sweep.ok()) return ToGrpcStatus(sweep.status());
  SweepToProto(*sweep, resp->mutable_sweep());
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::GetSweep(const Caller& caller, const v1::GetSweepRequest* req, v1::GetSweepResponse* resp,
                                      const CallContext&) {
  if (sweeps_ == nullptr) return NoSweeps();
  auto sweep = sweeps_->Get(req->id(), caller);
  if (!sweep.ok()) return ToGrpcStatus(sweep.status());
  SweepToProto(*sweep, resp->mutable_sweep());
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::ListSweeps(const Caller& caller, const v1::ListSweepsRequest* req,
                                        v1::ListSweepsResponse* resp, const CallContext&) {
  if (sweeps_ == nullptr) return NoSweeps();
  std::string next;
  auto sweeps = sweeps_->List(caller, req->all_users(), req->page_size(), req->page_token(), &next);
  if (!sweeps.ok()) return ToGrpcStatus(sweeps.status());
  for (const SweepStatus& s : *sweeps) {
    v1::Sweep* w = resp->add_sweeps();
    SweepToProto(s, w);
    w->clear_spec();  // up to 1 MiB each: GetSweep has it
    w->clear_events();
  }
  resp->set_next_page_token(next);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::CancelSweep(const Caller& caller, const v1::CancelSweepRequest* req,
                                         v1::CancelSweepResponse* resp, const CallContext&) {
  if (sweeps_ == nullptr) return NoSweeps();
  auto sweep = sweeps_->Cancel(req->id(), req->keep_best(), caller);
  if (!sweep.ok()) return ToGrpcStatus(sweep.status());
  SweepToProto(*sweep, resp->mutable_sweep());
  return grpc::Status::OK;
}

}  // namespace trainyard
