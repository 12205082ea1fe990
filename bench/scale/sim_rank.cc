#include "bench/scale/sim_rank.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <thread>
#include <utility>

#include "common/credentials.h"
#include "common/splitmix.h"
#include "common/wire_convert.h"

namespace trainyard::scale {

void Stream::Start() {
  ctx_ = std::make_unique<grpc::ClientContext>();
  ctx_->set_wait_for_ready(true);  // a server restarting: the stream waits for it, as a worker's reconnection does
  AddWorkerCredentials(ctx_.get(), shared_->job_id, shared_->token);
  {
    std::lock_guard<std::mutex> lock(mu_);
    welcomed_ = false;
    stopping_ = false;
    writing_ = false;
    pending_.clear();
    v1::WorkerMessage hello;
    v1::WorkerHello* h = hello.mutable_hello();
    h->set_job_id(shared_->job_id);
    h->set_rank(rank_);
    h->set_attempt(0);
    h->set_token(shared_->token);
    h->set_node("sim" + std::to_string(rank_ / 8));
    // Every rank says where its own store would listen (a replica job's
    // memberships meet at their first member's); rank 0 its rendezvous.
    h->set_advertise_addr("127.0.0.1");
    h->set_replica_store_port(20000 + rank_ % 40000);
    if (rank_ == 0) h->set_rendezvous_port(29500);
    pending_.push_back(std::move(hello));
  }
  stub_->async()->Connect(ctx_.get(), this);
  StartRead(&in_);
  WriteNext();
  StartCall();
}

bool Stream::Report(int64_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!welcomed_ || stopping_) return false;
  if (pending_.size() > 4) return true;  // the server is behind: the report waits with the others
  v1::WorkerMessage m;
  v1::MetricsSample* s = m.mutable_metrics()->add_samples();
  s->set_rank(rank_);
  s->set_step(step);
  s->set_loss(2.0 / static_cast<double>(step + 1));
  s->set_step_seconds(1.0);
  s->set_samples_per_second(32);
  s->set_samples(1);  // the server's samples_total counts the reports it took
  s->set_learning_rate(1e-3);
  s->set_unix_millis(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
  pending_.push_back(std::move(m));
  WriteLocked();
  return true;
}

bool Stream::welcomed() {
  std::lock_guard<std::mutex> lock(mu_);
  return welcomed_;
}

void Stream::Lose() {
  lost_ = true;
  ctx_->TryCancel();
}

void Stream::TookMembership(const v1::Membership& m) {
  const auto now = Clock::now();
  std::lock_guard<std::mutex> lock(shared_->mu);
  ++shared_->membership_messages;
  shared_->membership_bytes += static_cast<int64_t>(m.ByteSizeLong());
  Shared::Seen& seen = shared_->memberships[rank_];
  std::string error;
  int size = m.ranks_size();
  auto known = shared_->views.find(m.epoch());
  if (const std::optional<MembershipDelta> delta = DeltaFromProto(m)) {
    ++shared_->membership_deltas;
    // As a worker does: applied to the membership it holds, checked by the
    // digest; once per epoch (every rank holding the base gets the same).
    auto base = shared_->views.find(seen.epoch);
    if (seen.epoch != delta->base_epoch || base == shared_->views.end()) {
      error = "rank " + std::to_string(rank_) + " holding epoch " + std::to_string(seen.epoch) +
              " got a delta from epoch " + std::to_string(delta->base_epoch);
    } else if (known == shared_->views.end() || shared_->deltas[m.epoch()] != *delta) {
      std::optional<std::vector<int32_t>> ranks = delta->ApplyTo(base->second);
      if (!ranks) {
        error = "rank " + std::to_string(rank_) + ": the delta to epoch " + std::to_string(m.epoch()) +
                " does not apply (digest)";
      } else if (known != shared_->views.end() && known->second.ranks != *ranks) {
        error = "rank " + std::to_string(rank_) + " got another membership " + std::to_string(m.epoch());
      } else {
        size = static_cast<int>(ranks->size());
        MembershipView view = FromProto(m);
        view.ranks = std::move(*ranks);
        shared_->views[m.epoch()] = std::move(view);
        shared_->deltas[m.epoch()] = *delta;
      }
    } else {
      size = static_cast<int>(known->second.ranks.size());
    }
  } else if (known == shared_->views.end()) {
    shared_->views.emplace(m.epoch(), FromProto(m));
  } else if (!std::equal(known->second.ranks.begin(), known->second.ranks.end(), m.ranks().begin(), m.ranks().end())) {
    error = "rank " + std::to_string(rank_) + " got another membership " + std::to_string(m.epoch());
  }
  if (!error.empty()) {
    ++shared_->failed;
    if (shared_->first_error.empty()) shared_->first_error = error;
  } else if (m.epoch() > seen.epoch) {
    seen = {m.epoch(), size, now};
  }
  // Nobody is woken: the run looks every few milliseconds (a look walks
  // every rank, too much for each of 10,000 arrivals), and `at` says when
  // each came.
}

void Stream::OnReadDone(bool ok) {
  if (!ok) return;  // the stream ends: OnDone
  if (in_.has_welcome()) {
    std::lock_guard<std::mutex> lock(mu_);
    welcomed_ = true;
    ++shared_->welcomed;
  } else if (in_.has_membership()) {
    TookMembership(in_.membership());
  } else if (in_.has_stop()) {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) {  // said again (a cancel and the attempt's stop): answered once
      StartRead(&in_);
      return;
    }
    stopping_ = true;
    v1::WorkerMessage result;
    result.mutable_result()->set_outcome(v1::WORKER_OUTCOME_STOPPED);
    pending_.push_back(std::move(result));
    closing_ = true;
    WriteLocked();
  }
  StartRead(&in_);
}

void Stream::OnWriteDone(bool ok) {
  std::lock_guard<std::mutex> lock(mu_);
  writing_ = false;
  if (!ok) return;
  if (counting_) ++shared_->reports;
  WriteLocked();
}

void Stream::OnDone(const grpc::Status& s) {
  if (lost_) return;  // as a dead process's: nothing follows
  if (!stopping_) {
    if (const std::optional<std::chrono::milliseconds> wait = owner_->RetryWait(s.error_code(), welcomed())) {
      ++shared_->retries;
      owner_->Retry(*wait);
      return;
    }
  }
  if (!s.ok() && !stopping_) {
    ++shared_->failed;
    std::lock_guard<std::mutex> lock(shared_->mu);
    if (shared_->first_error.empty()) shared_->first_error = s.error_message();
  }
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    ++shared_->ended;
  }
  shared_->cv.notify_all();
}

void Stream::WriteNext() {
  std::lock_guard<std::mutex> lock(mu_);
  WriteLocked();
}

void Stream::WriteLocked() {
  if (writing_ || pending_.empty()) {
    if (!writing_ && pending_.empty() && closing_) {
      closing_ = false;
      StartWritesDone();
    }
    return;
  }
  out_ = std::move(pending_.front());
  pending_.pop_front();
  counting_ = out_.has_metrics();
  writing_ = true;
  StartWrite(&out_);
}

void SimRank::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (current_) done_.push_back(std::move(current_));
  current_ = std::make_unique<Stream>(stub_, shared_, rank_, this);
  if (!join_) join_.emplace(JoinRetryOptions{}, std::chrono::steady_clock::now(), SplitMix64(rank_));
  current_->Start();
}

bool SimRank::Report(int64_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  return current_ != nullptr && current_->Report(step);
}

void SimRank::Lose() {
  std::lock_guard<std::mutex> lock(mu_);
  if (current_) current_->Lose();
}

std::optional<std::chrono::milliseconds> SimRank::RetryWait(grpc::StatusCode code, bool welcomed) {
  const auto status = static_cast<absl::StatusCode>(code);
  std::lock_guard<std::mutex> lock(mu_);
  joined_ = joined_ || welcomed;
  if (!joined_) return join_->NextWait(status, std::chrono::steady_clock::now());
  // After its join (a stream broken by a server restarting): again
  // shortly, while the server answers UNAVAILABLE or RESOURCE_EXHAUSTED.
  if (!RetriesJoin(status)) return std::nullopt;
  return std::chrono::milliseconds(100 + rank_ % 400);
}

void SimRank::Retry(std::chrono::milliseconds wait) {
  std::thread([this, wait] {
    std::this_thread::sleep_for(wait);
    Start();
  }).detach();
}

std::string ExternalSpec(const std::string& name, int ranks, const std::string& more) {
  return "name: " + name +
         "\nlauncher: external\nmodel: {kind: mlp}\nmax_steps: 1000000\nnum_processes: " + std::to_string(ranks) +
         "\n" + more;
}

SimJob::SimJob(const std::string& addr, const std::string& spec, int ranks, int channels)
    : shared_(std::make_unique<Shared>(ranks)) {
  auto stub = JobStub(addr);
  shared_->job_id = Submit(stub.get(), spec, &error_);
  if (!shared_->job_id.empty()) shared_->token = JoinToken(stub.get(), shared_->job_id);
  sim_ = std::make_unique<SimRanks>(addr, shared_.get(), ranks, channels);
}

int SimJob::End(v1::JobService::Stub* stub, std::string* error) {
  CancelJob(stub, id());
  const int ranks = static_cast<int>(sim_->ranks.size());
  std::unique_lock<std::mutex> lock(shared_->mu);
  shared_->cv.wait_for(lock, std::chrono::seconds(120), [&] { return shared_->ended >= ranks; });
  if (error->empty()) *error = shared_->first_error;
  return shared_->failed;
}

StepReporter::StepReporter(SimRanks* sim, std::function<void(int64_t, int)> on_sent) {
  thread_ = std::thread([this, sim, on_sent = std::move(on_sent)] {
    const int n = static_cast<int>(sim->ranks.size());
    const auto t0 = Clock::now();
    for (int64_t s = 1; !done_; ++s) {
      const auto second = t0 + std::chrono::seconds(s);
      for (int r = 0; r < n && !done_; ++r) {
        std::this_thread::sleep_until(second - std::chrono::seconds(1) + std::chrono::microseconds(1000000LL * r / n));
        if (sim->ranks[r]->Report(s) && on_sent) on_sent(s, r);
      }
      step_ = s;
      std::this_thread::sleep_until(second);
    }
  });
}

void StepReporter::Stop() {
  done_ = true;
  if (thread_.joinable()) thread_.join();
}

SimRanks::SimRanks(const std::string& addr, Shared* shared, int n, int channels) {
  if (channels <= 0) channels = n;  // one connection per rank, as workers connect
  for (int c = 0; c < channels; ++c) {
    grpc::ChannelArguments args;
    args.SetInt("trainyard.bench.channel", c);  // a connection each
    connections.push_back(grpc::CreateCustomChannel(addr, grpc::InsecureChannelCredentials(), args));
    stubs.push_back(v1::WorkerService::NewStub(connections.back()));
  }
  for (int r = 0; r < n; ++r) ranks.push_back(std::make_unique<SimRank>(stubs[r % channels].get(), shared, r));
}

}  // namespace trainyard::scale
