#include "server/sweeps/sweep_manager.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/log.h"
#include "common/spec/job_spec.h"
#include "common/webhook_url.h"
#include "server/jobs/job_history.h"
#include "server/sweeps/sweep_live.h"
#include "server/sweeps/trial_spec.h"

namespace trainyard {

using sweep_detail::Ended;

namespace {

// " by user alice", " by the admin token"; "" on a server without users
// (anyone may act there: "by anyone" says nothing).
std::string By(const Caller& by) {
  return by.user.empty() && !by.admin ? std::string() : absl::StrCat(" by ", by.Describe());
}

std::string NewSweepId() {
  static std::mt19937_64 gen{std::random_device{}()};
  static absl::Mutex mu;
  absl::MutexLock lock(&mu);
  return absl::StrFormat("sweep-%08x", static_cast<uint32_t>(gen()));
}

}  // namespace

SweepManager::SweepManager(JobRequestHandler* jobs, SweepStore* store, Notifier* notifier, const TimeSource* clock)
    : jobs_(jobs), store_(store), notifier_(notifier), clock_(clock) {}

SweepManager::~SweepManager() { Stop(); }

absl::Status SweepManager::Recover() {
  auto all = store_->List();
  if (!all.ok()) return all.status();
  absl::MutexLock lock(&mu_);
  for (SweepRecord& r : *all) {
    auto live = std::make_unique<Live>();
    auto spec = ParseSweepSpec(r.spec_text);
    if (!spec.ok()) {
      log::Warn("sweep {}: its stored spec no longer parses ({})", r.id, spec.status().message());
      continue;
    }
    live->spec = std::move(*spec);
    live->caller = DecodeCaller(r.caller);
    live->searcher = MakeSearcher(live->spec);
    live->searcher->Resume(static_cast<int>(r.trials.size()));
    auto results = store_->RungResults(r.id);
    if (!results.ok()) return results.status();
    for (const RungResult& x : *results) {
      live->searcher->OnMetric(x.trial, x.step, x.value);
      int64_t& seen = live->seen[x.trial];
      seen = std::max(seen, x.step);
    }
    if (live->spec.searcher.kind == SweepSearcher::Kind::kPbt) {
      // PBT decides from reports alone: a live trial is checked again from its step now on.
      for (const SweepTrialRecord& t : r.trials) live->seen[t.number] = std::max(live->seen[t.number], t.step);
    }
    live->cancelled = r.state == JobState::kCancelled;
    for (auto t = r.trials.rbegin(); t != r.trials.rend() && t->job_id.empty(); ++t) ++live->refused_in_a_row;
    live->announced_best = BestTrial(live->spec, r);
    live->record = std::move(r);
    order_.push_back(live->record.id);
    {
      absl::MutexLock states(&states_mu_);
      states_[live->record.id] = live->record.state;
    }
    sweeps_[live->record.id] = std::move(live);
  }
  return absl::OkStatus();
}

void SweepManager::Start() {
  thread_ = std::thread([this] {
    absl::MutexLock lock(&thread_mu_);
    auto stop = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(thread_mu_) { return stop_; };
    while (!thread_mu_.AwaitWithTimeout(absl::Condition(&stop), absl::FromChrono(kTick))) {
      thread_mu_.Unlock();
      Tick();
      thread_mu_.Lock();
    }
  });
}

void SweepManager::Stop() {
  {
    absl::MutexLock lock(&thread_mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

absl::StatusOr<SweepStatus> SweepManager::Submit(const std::string& spec_text, const Caller& by) {
  auto spec = ParseSweepSpec(spec_text);
  if (!spec.ok()) return spec.status();
  if (spec->metric.size() > JobHistory::kMaxValueNameBytes) {
    return absl::InvalidArgumentError(absl::StrCat("sweep.metric.name: longer than the ",
                                                   JobHistory::kMaxValueNameBytes,
                                                   " bytes of a series' name (a job's history keeps no such series)"));
  }
  for (size_t i = 0; i < spec->notify_urls.size(); ++i) {
    auto url = ParseWebhookUrl(spec->notify_urls[i]);
    if (url.ok() && notifier_ != nullptr && !WebhookHostAllowed(url->host, notifier_->options().allowed_hosts)) {
      return absl::InvalidArgumentError(absl::StrCat("sweep.notify.urls[", i, "]: host ", url->host,
                                                     " is not one this server calls (its --notify-allowed-host)"));
    }
  }
  if (auto s = CheckValues(*spec); !s.ok()) return s;
  if (auto s = CheckMetric(*spec); !s.ok()) return s;
  if (!by.admin && !by.user.empty()) {
    absl::MutexLock lock(&mu_);
    int running = 0;
    for (const auto& [id, live] : sweeps_) running += live->record.owner == by.user && !Ended(live->record.state);
    if (running >= kMaxRunningPerUser) {
      return absl::ResourceExhaustedError(absl::StrCat(by.Describe(), " has ", running,
                                                       " sweeps running, the most one user may (", kMaxRunningPerUser,
                                                       "); cancel one or wait for one to end"));
    }
  }

  auto live = std::make_unique<Live>();
  live->spec = std::move(*spec);
  live->caller = by;
  live->searcher = MakeSearcher(live->spec);
  SweepRecord& r = live->record;
  r.id = NewSweepId();
  r.name = live->spec.name.empty() ? "sweep" : live->spec.name;
  r.owner = by.user;
  r.state = JobState::kRunning;
  r.reason = "started";
  r.spec_text = spec_text;
  r.caller = EncodeCaller(by);
  r.created_unix_millis = clock_->UnixMillis();
  if (auto s = store_->Insert(r); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  Live& s = *live;
  order_.push_back(r.id);
  sweeps_[r.id] = std::move(live);
  const int64_t total = TotalTrials(s.spec);
  std::string trials;
  switch (s.spec.searcher.kind) {
    case SweepSearcher::Kind::kGrid:
      trials = total == GridSize(s.spec.parameters)
                   ? absl::StrFormat("%d trial%s (every combination)", total, total == 1 ? "" : "s")
                   : absl::StrFormat("%d trials (the first of %d combinations)", total, GridSize(s.spec.parameters));
      break;
    case SweepSearcher::Kind::kPbt: trials = absl::StrFormat("a population of %d trials", total); break;
    default: trials = absl::StrFormat("up to %d trials", total);
  }
  Event(s, absl::StrFormat("submitted%s: searcher %s, %s, %d at once, metric %s (%s, scope %s)", By(by),
                           SweepSearcher::Name(s.spec.searcher.kind), trials, s.spec.concurrency, s.spec.metric,
                           s.spec.maximize ? "maximize" : "minimize", MetricScopeName(s.spec)));
  StartTrials(s);
  return StatusOf(s);
}

absl::StatusOr<SweepManager::Live*> SweepManager::Find(const std::string& id, const Caller& by) {
  auto it = sweeps_.find(id);
  if (it == sweeps_.end() || (!by.admin && !by.user.empty() && it->second->record.owner != by.user)) {
    return absl::NotFoundError(absl::StrCat("sweep ", id, " not found"));
  }
  return it->second.get();
}

absl::StatusOr<SweepStatus> SweepManager::Get(const std::string& id, const Caller& by) {
  absl::MutexLock lock(&mu_);
  auto s = Find(id, by);
  if (!s.ok()) return s.status();
  SweepStatus out = StatusOf(**s);
  if (auto events = store_->Events(id); events.ok()) out.events = *std::move(events);
  return out;
}

absl::StatusOr<std::vector<SweepStatus>> SweepManager::List(const Caller& by, bool all_users, int page_size,
                                                            const std::string& page_token, std::string* next) {
  if (all_users && !by.admin && !by.user.empty()) {
    return absl::PermissionDeniedError("all_users: only admins list everyone's sweeps");
  }
  if (page_size <= 0) page_size = kDefaultPageSize;
  page_size = std::min(page_size, kMaxPageSize);
  // The token is the position in order_ (which only grows) to go on from.
  size_t from = 0;
  if (!page_token.empty() && (!absl::SimpleAtoi(page_token, &from) || page_token.size() > 12)) {
    return absl::InvalidArgumentError("page_token: not one a listing of sweeps gave");
  }
  if (next != nullptr) next->clear();
  absl::MutexLock lock(&mu_);
  std::vector<SweepStatus> out;
  for (size_t i = from; i < order_.size(); ++i) {
    const Live& s = *sweeps_.at(order_[i]);
    if (!all_users && !by.user.empty() && s.record.owner != by.user) continue;
    if (static_cast<int>(out.size()) == page_size) {
      if (next != nullptr) *next = absl::StrCat(i);
      break;
    }
    out.push_back(StatusOf(s));
  }
  return out;
}

absl::StatusOr<SweepStatus> SweepManager::Cancel(const std::string& id, bool keep_best, const Caller& by) {
  absl::MutexLock lock(&mu_);
  auto found = Find(id, by);
  if (!found.ok()) return found.status();
  Live& s = **found;
  const int best = keep_best ? BestTrial(s.spec, s.record) : -1;
  s.cancelled = true;
  for (SweepTrialRecord& t : s.record.trials) {
    if (t.job_id.empty() || Ended(t.state) || t.number == best) continue;
    t.reason = absl::StrCat("the sweep was cancelled", By(by));
    StopJob(s, t, ": " + t.reason);
    SaveTrial(s, t);
  }
  if (!Ended(s.record.state)) {
    s.record.state = JobState::kCancelled;
    s.record.reason = absl::StrCat("cancelled", By(by),
                                   best >= 0 ? absl::StrCat("; trial ", best, " (the best so far) runs on") : "");
    s.record.ended_unix_millis = clock_->UnixMillis();
    Save(s);
    Event(s, s.record.reason);
    Notify(s, "CANCELLED");
  }
  return StatusOf(s);
}

void SweepManager::Tick() {
  absl::MutexLock lock(&mu_);
  for (const std::string& id : order_) {
    Live& s = *sweeps_.at(id);
    bool live_trials = false;
    for (SweepTrialRecord& t : s.record.trials) {
      if (t.job_id.empty() || Ended(t.state)) continue;
      Follow(s, t);
      live_trials = true;
    }
    if (Ended(s.record.state) && !live_trials) continue;
    if (const int best = BestTrial(s.spec, s.record); best >= 0 && best != s.announced_best) {
      s.announced_best = best;
      Notify(s, "BEST");
    }
    SpendBudget(s);
    FinishExploits(s);
    StartTrials(s);
    MaybeEnd(s);
  }
}

void SweepManager::Follow(Live& s, SweepTrialRecord& t) {
  const SweepTrialRecord before = t;
  auto job = jobs_->Get(t.job_id);
  if (!job.ok()) {
    t.state = JobState::kFailed;
    t.reason = absl::StrCat("its job: ", job.status().message());
    SaveTrial(s, t);
    return;
  }
  t.state = job->state;
  // A trial the searcher stopped is shown as of its decision: its step and
  // value there, though its job may train a few steps more before it stops.
  if (!t.early_stopped) t.step = job->step;
  if (job->started_unix_millis > 0) {
    const int64_t end = job->ended_unix_millis > 0 ? job->ended_unix_millis : clock_->UnixMillis();
    t.rank_seconds =
        static_cast<double>(std::max<int64_t>(0, end - job->started_unix_millis)) / 1000.0 * job->num_processes;
  }
  // The history is read only when the job reported a step the searcher
  // has not seen (it copies every series of the job).
  const auto seen_step = s.seen.find(t.number);
  const bool news = seen_step == s.seen.end() || job->step > seen_step->second || Ended(t.state);
  if (!t.early_stopped && news) {
    auto history = jobs_->History(t.job_id);
    const SeriesHistory* series = nullptr;
    if (history.ok()) {
      auto it = history->series().find(s.spec.metric);
      if (it != history->series().end()) series = &it->second;
    }
    // The trial's reports up to the last one looked at (the decision's, when
    // the searcher stopped it there): its value (metric.scope) is theirs.
    std::vector<double> reports;
    if (series != nullptr) {
      int64_t& seen = s.seen[t.number];
      for (const HistoryPoint& p : series->points()) {
        if (!std::isfinite(p.value)) continue;
        reports.push_back(p.value);
        if (p.step <= seen) continue;
        seen = p.step;
        const double value = s.spec.maximize ? -p.value : p.value;
        const Searcher::Verdict v = s.searcher->OnMetric(t.number, p.step, value);
        if (v == Searcher::Verdict::kContinue) continue;
        if (v == Searcher::Verdict::kExploit) {
          const int source = s.searcher->exploit_source();
          const SweepTrialRecord& from = s.record.trials[source];
          auto request = jobs_->RequestCheckpoint(from.job_id, CheckpointType::kAuto);
          if (!request.ok()) {
            Event(s, absl::StrFormat("trial %d cannot copy trial %d (%s): %s", t.number, source, from.job_id,
                                     request.status().message()));
            break;
          }
          s.exploits.push_back({t.number, source, p.step, *request, clock_->SteadyNow()});
          t.reason = absl::StrFormat(
              "in the bottom of the population at step %d (%s %g): to be replaced by a copy of "
              "trial %d",
              p.step, s.spec.metric, p.value, source);
          Event(s, absl::StrFormat("trial %d (%s): %s", t.number, t.job_id, t.reason));
          break;
        }
        if (auto st = store_->AddRungResult(s.record.id, RungResult{t.number, p.step, value}); !st.ok()) {
          log::Warn("sweep {}: {}", s.record.id, st.message());
        }
        if (v == Searcher::Verdict::kPromote) {
          ++t.rungs_passed;
          Event(s, absl::StrFormat("trial %d (%s) goes on at step %d: %s %g among the best 1/%d at the rung", t.number,
                                   t.job_id, p.step, s.spec.metric, p.value, s.spec.searcher.reduction_factor));
          continue;
        }
        // A trial that ended before the look that found it at the rung keeps its end.
        if (!Ended(t.state)) {
          t.early_stopped = true;
          t.step = p.step;
          t.reason = absl::StrFormat("stopped at step %d: %s %g not among the best 1/%d at the rung", p.step,
                                     s.spec.metric, p.value, s.spec.searcher.reduction_factor);
          // The job says who stopped it: the sweep's searcher, not a user.
          StopJob(s, t,
                  absl::StrFormat(" (ASHA, step %d: %s %.4g not among the best 1/%d at the rung)", p.step,
                                  s.spec.metric, p.value, s.spec.searcher.reduction_factor));
          Event(s, absl::StrFormat("trial %d (%s) %s", t.number, t.job_id, t.reason));
        }
        break;
      }
    }
    if (std::optional<double> value = TrialValue(s.spec, reports)) t.best_metric = value;
  }
  if (Ended(t.state) && t.reason.empty()) t.reason = job->reason;
  if (Ended(t.state) && !Ended(before.state) && !t.early_stopped) {
    Event(s, absl::StrFormat("trial %d (%s) %s at step %d: %s", t.number, t.job_id, JobStateName(t.state), t.step,
                             t.reason));
  }
  if (!(t == before)) SaveTrial(s, t);
  // A trial that trained to its end without ever reporting the metric: so
  // will every other (the metric's name is wrong, or the script does not
  // report it), and the sweep ends now, not after training them all.
  if (t.state == JobState::kSucceeded && !Ended(before.state) && !t.best_metric && !Ended(s.record.state)) {
    Fail(s, absl::StrFormat("trial %d (%s) ended at step %d without ever reporting the sweep's metric %s (a "
                            "script reports it with trainyard.report(step, %s=...))",
                            t.number, t.job_id, t.step, s.spec.metric, s.spec.metric));
  }
}

void SweepManager::Notify(Live& s, const std::string& event) {
  if (notifier_ == nullptr || s.spec.notify_urls.empty()) return;
  if (std::find(s.spec.notify_on.begin(), s.spec.notify_on.end(), event) == s.spec.notify_on.end()) return;
  const SweepRecord& r = s.record;
  const int64_t now = clock_->UnixMillis();
  const std::string body = SweepWebhookBody(s.spec, r, event, now);
  for (const std::string& url : s.spec.notify_urls) {
    notifier_->Enqueue(r.owner, {r.id, url, event, absl::StrFormat("%s-%d-%d", r.id, now, ++s.deliveries), body});
  }
}

std::optional<Caller> SweepManager::CurrentCaller(Live& s) {
  if (!caller_lookup_) return s.caller;
  absl::StatusOr<Caller> now = caller_lookup_(s.caller);
  if (!now.ok()) {
    Fail(s, absl::StrCat("its owner's rights are gone: ", now.status().message()));
    return std::nullopt;
  }
  return *std::move(now);
}

void SweepManager::StopJob(const Live& s, SweepTrialRecord& t, const std::string& detail) {
  auto job = jobs_->Cancel(t.job_id, /*checkpoint=*/false, absl::StrCat("stopped by sweep ", s.record.id, detail));
  if (job.ok()) t.state = job->state;
}

void SweepManager::Fail(Live& s, const std::string& reason) {
  s.pending.reset();
  for (SweepTrialRecord& t : s.record.trials) {
    if (t.job_id.empty() || Ended(t.state)) continue;
    t.reason = absl::StrCat("the sweep ended: ", reason);
    StopJob(s, t, ": " + t.reason);
    SaveTrial(s, t);
  }
  if (Ended(s.record.state)) return;
  s.record.state = JobState::kFailed;
  s.record.reason = reason;
  s.record.ended_unix_millis = clock_->UnixMillis();
  Save(s);
  Event(s, absl::StrCat("FAILED: ", reason));
  Notify(s, "FAILED");
}

void SweepManager::StartTrials(Live& s) {
  if (s.cancelled || s.budget_spent || Ended(s.record.state)) return;
  int live = 0;
  for (const SweepTrialRecord& t : s.record.trials) live += !t.job_id.empty() && !Ended(t.state);
  // Bounded per look: a refused trial is not live, so without a bound a
  // search space whose trials are all refused would be drawn whole here.
  for (int submitted = 0; live < s.spec.concurrency && submitted < kMaxSubmissionsPerLook; ++submitted) {
    std::optional<TrialPlan> plan = s.pending ? std::move(s.pending) : s.searcher->Next();
    s.pending.reset();
    if (!plan) return;
    std::optional<Caller> by = CurrentCaller(s);
    if (!by) return;
    auto text = TrialSpec(s.spec, s.record.name, *plan);
    auto job = text.ok() ? jobs_->Submit(*text, "", *by, {s.record.id, plan->number})
                         : absl::StatusOr<JobRecord>(text.status());
    std::string values;
    for (size_t i = 0; i < s.spec.parameters.size() && i < plan->values.size(); ++i) {
      absl::StrAppend(&values, i ? ", " : "", s.spec.parameters[i].path, "=", plan->values[i]);
    }
    if (!job.ok() && (absl::IsResourceExhausted(job.status()) || absl::IsUnavailable(job.status()))) {
      // The owner's queue is full (or the server busy): the trial waits for
      // the next look, drawn once.
      if (!s.pending_noted) {
        Event(s, absl::StrFormat("trial %d (%s) waits: %s", plan->number, values, job.status().message()));
      }
      s.pending_noted = true;
      s.pending = std::move(plan);
      return;
    }
    s.pending_noted = false;
    SweepTrialRecord t;
    t.number = plan->number;
    t.values = plan->values;
    if (job.ok()) {
      t.job_id = job->id;
      t.state = job->state;
      ++live;
      s.refused_in_a_row = 0;
    } else {
      t.state = JobState::kFailed;
      t.reason = absl::StrCat("refused: ", job.status().message());
      ++s.refused_in_a_row;
    }
    Event(s, job.ok() ? absl::StrFormat("trial %d submitted as %s (%s)", t.number, t.job_id, values)
                      : absl::StrFormat("trial %d (%s) %s", t.number, values, t.reason));
    s.record.trials.push_back(t);
    SaveTrial(s, t);
    if (s.refused_in_a_row >= kMaxRefusedInARow) {
      Fail(s, absl::StrFormat("its last %d trials were refused (the last: %s)", s.refused_in_a_row,
                              job.status().message()));
      return;
    }
  }
}

void SweepManager::MaybeEnd(Live& s) {
  if (Ended(s.record.state)) return;
  for (const SweepTrialRecord& t : s.record.trials) {
    if (!t.job_id.empty() && !Ended(t.state)) return;
  }
  if ((!s.searcher->exhausted() && !s.budget_spent) || !s.exploits.empty() || s.pending) return;
  const int best = BestTrial(s.spec, s.record);
  s.record.ended_unix_millis = clock_->UnixMillis();
  if (best < 0) {
    s.record.state = JobState::kFailed;
    s.record.reason = absl::StrCat("no trial reported ", s.spec.metric);
  } else {
    const SweepTrialRecord& b = s.record.trials[best];
    s.record.state = JobState::kSucceeded;
    s.record.reason = absl::StrFormat("best: trial %d (%s), %s %g%s", best, b.job_id, s.spec.metric, *b.best_metric,
                                      s.budget_spent ? "; its rank-hour budget was spent" : "");
  }
  Save(s);
  Event(s, absl::StrCat(JobStateName(s.record.state), ": ", s.record.reason));
  Notify(s, JobStateName(s.record.state));
}

SweepStatus SweepManager::StatusOf(const Live& s) const {
  SweepStatus out{s.record, s.spec, {}, BestTrial(s.spec, s.record)};
  if (s.spec.searcher.kind == SweepSearcher::Kind::kAsha) {
    out.rungs = AshaRungs(s.spec.searcher.min_steps, s.spec.searcher.reduction_factor, s.spec.max_steps);
  }
  return out;
}

void SweepManager::Note(const std::string& id, const std::string& text) {
  // Not under mu_: the notifier records a dropped delivery on the thread
  // that enqueued it, which may hold mu_ (Notify).
  JobState state = JobState::kRunning;
  {
    absl::MutexLock lock(&states_mu_);
    auto it = states_.find(id);
    if (it == states_.end()) return;
    state = it->second;
  }
  log::Info("sweep {}: {}", id, text);
  if (auto st = store_->AddEvent(id, JobEvent{clock_->UnixMillis(), state, text}); !st.ok()) {
    log::Warn("sweep {}: {}", id, st.message());
  }
}

void SweepManager::Event(const Live& s, const std::string& text) {
  {
    absl::MutexLock lock(&states_mu_);
    states_[s.record.id] = s.record.state;
  }
  log::Info("sweep {}: {}", s.record.id, text);
  if (auto st = store_->AddEvent(s.record.id, JobEvent{clock_->UnixMillis(), s.record.state, text}); !st.ok()) {
    log::Warn("sweep {}: {}", s.record.id, st.message());
  }
}

void SweepManager::Save(const Live& s) {
  {
    absl::MutexLock lock(&states_mu_);
    states_[s.record.id] = s.record.state;
  }
  if (auto st = store_->Update(s.record); !st.ok()) log::Warn("sweep {}: {}", s.record.id, st.message());
}

void SweepManager::SaveTrial(const Live& s, const SweepTrialRecord& t) {
  if (auto st = store_->SaveTrial(s.record.id, t); !st.ok()) log::Warn("sweep {}: {}", s.record.id, st.message());
}

}  // namespace trainyard
