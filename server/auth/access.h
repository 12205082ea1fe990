// Access: the rules of the users' policy that decide what a caller may do —
// which jobs they may see and act on, which of them a list shows, which
// priority class they may submit at and how many jobs they may queue.
// Pure functions of the policy, the caller and the job; the JobManager
// applies them (and records refusals). Torch- and gRPC-free.
#ifndef TRAINYARD_SERVER_AUTH_ACCESS_H_
#define TRAINYARD_SERVER_AUTH_ACCESS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/job_record.h"
#include "common/policy.h"
#include "server/auth/caller.h"

namespace trainyard {

// Admins, and anyone on a server without users, see and act on every job.
inline bool SeesEverything(const Caller& by) { return by.admin || by.user.empty(); }

// Whether `by` may act on (or, `read_only`, look at) job `job`: its owner
// may; with the policy's group_visibility, members of the job's group may
// look.
bool MayAccess(const Policy& policy, const Caller& by, const JobRecord& job, bool read_only);

// The jobs a list shows `by`: these owners or groups; both empty: all.
struct ListScope {
  std::vector<std::string> owners, groups;
};
// `all_users`: everyone's (admins), or also the caller's groups' where the
// policy has group_visibility; PermissionDenied otherwise.
absl::StatusOr<ListScope> ListScopeFor(const Policy& policy, const Caller& by, bool all_users);

// Whether `job` is among those `scope` shows (as the store's list filters).
bool InScope(const ListScope& scope, const JobRecord& job);

// What of `job` only its owner and admins may read, hidden from anyone
// else who sees it (group_visibility): the values of its spec's script.env
// (secrets a script is given), each replaced by "(hidden)", and its
// notify.urls, each cut to scheme://host[:port] (a receiver's token lives in
// the path or query).
void HideSecrets(const Caller& by, JobRecord* job);

// The priority of a job `by` submits naming `class_name` ("": the default
// class): InvalidArgument for a class the server lacks (naming those it
// has), PermissionDenied above the user's or a group's max_priority_class.
absl::StatusOr<int64_t> PriorityFor(const Policy& policy, const Caller& by, const std::string& class_name);

// ResourceExhausted when `by` already has its quota of queued jobs.
absl::Status CheckQueuedJobs(const Policy& policy, const Caller& by, int queued);

// FailedPrecondition when a job of `by` needing at least `minimum` GPUs
// (`gpus`) or slots could never start: more than its user's or group's
// whole quota of them (as Slurm's EnforcePartLimits refuses a job larger
// than its limits at submit, rather than queueing it for ever).
absl::Status CheckQuotaCanFit(const Policy& policy, const Caller& by, bool gpus, int minimum);

// The name of the class of `priority` ("" when none has it).
std::string ClassName(const Policy& policy, int64_t priority);

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_AUTH_ACCESS_H_
