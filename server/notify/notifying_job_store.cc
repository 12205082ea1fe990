#include "server/notify/notifying_job_store.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"

namespace trainyard {
namespace {

// The spec's notify section, when it names URLs.
struct Wanted {
  std::vector<std::string> urls, on;
  bool from_policy = false;  // the operator's
};

std::optional<Wanted> WantedOf(const std::string& spec_json) {
  if (spec_json.find("http") == std::string::npos) return std::nullopt;  // no URL: most jobs
  try {
    const nlohmann::json j = nlohmann::json::parse(spec_json);
    auto n = j.find("notify");
    if (n == j.end() || !n->contains("urls") || (*n)["urls"].empty()) return std::nullopt;
    return Wanted{(*n)["urls"].get<std::vector<std::string>>(), n->value("on", std::vector<std::string>{})};
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// What a change from `before` to `event` announces ("" for nothing).
std::string EventName(JobState before, const JobEvent& event) {
  if (event.state == before) return "";
  if (event.state == JobState::kQueued) return absl::StartsWith(event.reason, "preempted") ? "PREEMPTED" : "";
  return JobStateName(event.state);
}

}  // namespace

std::string WebhookBody(const JobRecord& job, const std::string& event, int64_t unix_millis) {
  nlohmann::ordered_json j = {{"event", event},
                              {"unix_millis", unix_millis},
                              {"job",
                               {{"id", job.id},
                                {"name", job.name},
                                {"owner", job.owner},
                                {"state", JobStateName(job.state)},
                                {"reason", job.reason},
                                {"attempt", job.attempt},
                                {"num_processes", job.num_processes},
                                {"step", job.step},
                                {"max_steps", job.max_steps},
                                {"loss", job.loss},
                                {"first_loss", job.first_loss},
                                {"created_unix_millis", job.created_unix_millis},
                                {"started_unix_millis", job.started_unix_millis},
                                {"ended_unix_millis", job.ended_unix_millis}}}};
  return j.dump();
}

void NotifyingJobStore::SetPolicy(std::shared_ptr<const Policy> policy) {
  absl::MutexLock lock(&mu_);
  policy_ = std::move(policy);
}

absl::Status NotifyingJobStore::Update(const JobRecord& job, const JobEvent* event) {
  if (event == nullptr) return store_->Update(job, event);
  // Whether the job may have webhooks at all: a URL in its spec, or the
  // policy's for everyone or for its owner (a scan, not a parse).
  bool may_notify = job.spec_json.find("http") != std::string::npos;
  std::optional<JobState> known;
  {
    absl::MutexLock lock(&mu_);
    if (policy_ != nullptr) {
      const PolicyUser* user = policy_->User(job.owner);
      may_notify = may_notify || !policy_->notify.urls.empty() || (user != nullptr && !user->notify.urls.empty());
    }
    if (auto it = states_.find(job.id); it != states_.end()) known = it->second;
  }
  if (!may_notify) return store_->Update(job, event);
  // The state before this change, as committed: as last seen here, or
  // from the store (the job's first event since a restart).
  JobState before = JobState::kQueued;
  if (known) {
    before = *known;
  } else if (absl::StatusOr<JobRecord> stored = store_->Get(job.id); stored.ok()) {
    before = stored->state;
  } else {
    return store_->Update(job, event);
  }
  absl::Status s = store_->Update(job, event);
  if (!s.ok()) return s;
  {
    absl::MutexLock lock(&mu_);
    if (IsTerminal(event->state)) {
      states_.erase(job.id);
    } else {
      states_[job.id] = event->state;
    }
  }
  const std::string name = EventName(before, *event);
  if (name.empty()) return s;  // most events: nothing to announce, nothing parsed
  std::vector<Wanted> wanted;
  ++spec_reads_;
  if (std::optional<Wanted> w = WantedOf(job.spec_json)) wanted.push_back(*std::move(w));
  {
    absl::MutexLock lock(&mu_);
    if (policy_ != nullptr) {
      if (!policy_->notify.urls.empty()) wanted.push_back({policy_->notify.urls, policy_->notify.on, true});
      const PolicyUser* user = policy_->User(job.owner);
      if (user != nullptr && !user->notify.urls.empty()) {
        wanted.push_back({user->notify.urls, user->notify.on, true});
      }
    }
  }
  // Each URL once: the spec's first, then the policy's (the operator's).
  std::vector<std::pair<std::string, bool>> urls;
  for (const Wanted& w : wanted) {
    if (std::find(w.on.begin(), w.on.end(), name) == w.on.end()) continue;
    for (const std::string& url : w.urls) {
      if (std::find_if(urls.begin(), urls.end(), [&url](const auto& u) { return u.first == url; }) == urls.end()) {
        urls.emplace_back(url, w.from_policy);
      }
    }
  }
  if (urls.empty()) return s;
  const std::string body = WebhookBody(job, name, event->unix_millis);
  for (const auto& [url, from_policy] : urls) {
    notifier_->Enqueue(
        job.owner,
        {job.id, url, name, absl::StrFormat("%s-%d-%d", job.id, event->unix_millis, ++deliveries_), body, from_policy});
  }
  return s;
}

}  // namespace trainyard
