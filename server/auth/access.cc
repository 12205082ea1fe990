#include "server/auth/access.h"

#include <algorithm>
#include <map>
#include <tuple>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/webhook_url.h"

namespace trainyard {

bool MayAccess(const Policy& policy, const Caller& by, const JobRecord& job, bool read_only) {
  if (SeesEverything(by) || job.owner == by.user) return true;
  return read_only && policy.group_visibility && !job.group.empty() &&
         std::find(by.groups.begin(), by.groups.end(), job.group) != by.groups.end();
}

absl::StatusOr<ListScope> ListScopeFor(const Policy& policy, const Caller& by, bool all_users) {
  ListScope scope;
  if (SeesEverything(by)) {
    if (!all_users && !by.user.empty()) scope.owners.push_back(by.user);  // an admin's own, unless told
    return scope;
  }
  scope.owners.push_back(by.user);
  if (all_users) {
    if (!policy.group_visibility) {
      return absl::PermissionDeniedError(absl::StrCat(by.Describe(), " may not list other users' jobs on this server"));
    }
    scope.groups = by.groups;
  }
  return scope;
}

bool InScope(const ListScope& scope, const JobRecord& job) {
  if (scope.owners.empty() && scope.groups.empty()) return true;
  auto has = [](const std::vector<std::string>& names, const std::string& name) {
    return !name.empty() && std::find(names.begin(), names.end(), name) != names.end();
  };
  return has(scope.owners, job.owner) || has(scope.groups, job.group);
}

void HideSecrets(const Caller& by, JobRecord* job) {
  if (SeesEverything(by) || job->owner == by.user || job->spec_json.empty()) return;
  nlohmann::json spec = nlohmann::json::parse(job->spec_json, nullptr, /*allow_exceptions=*/false);
  if (spec.is_discarded() || !spec.is_object()) {
    job->spec_json.clear();  // nothing unreadable goes out unchecked
    return;
  }
  auto script = spec.find("script");
  if (script != spec.end() && script->is_object()) {
    auto env = script->find("env");
    if (env != script->end() && env->is_object()) {
      for (auto& [name, value] : env->items()) value = "(hidden)";
    }
  }
  // A webhook's path and query may hold the receiver's token.
  auto notify = spec.find("notify");
  if (notify != spec.end() && notify->is_object()) {
    auto urls = notify->find("urls");
    if (urls != notify->end() && urls->is_array()) {
      for (auto& url : *urls) url = url.is_string() ? ShownWebhookUrl(url.get<std::string>()) : "(hidden)";
    }
  }
  job->spec_json = spec.dump();
}

absl::StatusOr<int64_t> PriorityFor(const Policy& policy, const Caller& by, const std::string& class_name) {
  if (policy.priority_classes.empty()) {
    if (class_name.empty()) return 0;
    return absl::InvalidArgumentError(
        absl::StrCat("spec field 'priority': this server has no priority classes (got '", class_name, "')"));
  }
  const std::optional<int64_t> value = policy.Priority(class_name);
  if (!value) {
    std::vector<std::string> names;
    for (const auto& [name, v] : policy.priority_classes) names.push_back(name);
    return absl::InvalidArgumentError(absl::StrCat("spec field 'priority': unknown class '", class_name,
                                                   "'; this server has: ", absl::StrJoin(names, ", ")));
  }
  if (by.admin) return *value;
  // Every maximum that applies: the user's and each of its groups'.
  auto check = [&](const std::map<std::string, Quota>& quotas, const std::string& name,
                   const char* what) -> absl::Status {
    auto q = quotas.find(name);
    if (q == quotas.end() || q->second.max_priority_class.empty()) return absl::OkStatus();
    if (*value <= policy.priority_classes.at(q->second.max_priority_class)) return absl::OkStatus();
    return absl::PermissionDeniedError(
        absl::StrCat("spec field 'priority': ", what, " ", name, " may submit up to '", q->second.max_priority_class,
                     "', not '", class_name.empty() ? policy.default_priority_class : class_name, "'"));
  };
  if (auto s = check(policy.user_quotas, by.user, "user"); !s.ok()) return s;
  for (const std::string& g : by.groups) {
    if (auto s = check(policy.group_quotas, g, "group"); !s.ok()) return s;
  }
  return *value;
}

absl::Status CheckQueuedJobs(const Policy& policy, const Caller& by, int queued) {
  if (by.admin) return absl::OkStatus();
  auto q = policy.user_quotas.find(by.user);
  if (q == policy.user_quotas.end() || !q->second.queued_jobs || queued < *q->second.queued_jobs) {
    return absl::OkStatus();
  }
  return absl::ResourceExhaustedError(
      absl::StrCat("user ", by.user, " has ", queued, " jobs queued, the quota (queued_jobs); try again later"));
}

absl::Status CheckQuotaCanFit(const Policy& policy, const Caller& by, bool gpus, int minimum) {
  const char* what = gpus ? "gpus" : "slots";
  for (const auto& [quotas, name, kind] :
       {std::tuple{&policy.user_quotas, by.user, "user"}, std::tuple{&policy.group_quotas, by.group(), "group"}}) {
    if (name.empty()) continue;
    auto q = quotas->find(name);
    if (q == quotas->end()) continue;
    const std::optional<int64_t> limit = gpus ? q->second.gpus : q->second.slots;
    if (!limit || minimum <= *limit) continue;
    return absl::FailedPreconditionError(
        absl::StrCat("spec field 'num_processes': the job needs ", minimum, " ", what, " at least, more than ", kind,
                     " ", name, "'s whole quota (", what, ": ", *limit,
                     "): it could never start; submit fewer processes or ask an operator "
                     "for a larger quota"));
  }
  return absl::OkStatus();
}

std::string ClassName(const Policy& policy, int64_t priority) {
  for (const auto& [name, v] : policy.priority_classes) {
    if (v == priority) return name;
  }
  return "";
}

}  // namespace trainyard
